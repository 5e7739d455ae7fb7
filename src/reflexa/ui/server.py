"""`reflexa ui`: serve the trace viewer with uvicorn, on 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from pathlib import Path

from ..errors import ConfigError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
SHUTDOWN_SECONDS = 2
"""Open live feeds get this long to close when the server stops."""


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine only (127.0.0.0/8, ::1 or localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def listen(host: str, port: int) -> socket.socket:
    """A listening socket, or a ConfigError saying why not (port taken, address not here)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        socket.getaddrinfo(host.strip("[]"), port, family)
    except socket.gaierror as exc:  # the name is the problem, not the port
        raise ConfigError(f"cannot listen on {host}: {exc.strerror or exc}",
                          hint="give --host an address of this machine, or a name it resolves") from None
    try:
        return socket.create_server((host.strip("[]"), port), family=family)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                          hint="pick another port with --port (0 picks a free one)") from None


def serve(trace: str | Path, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          on_ready: Callable[[str], None] = print) -> None:
    """Serve the viewer for the store at `trace` until interrupted; `on_ready` gets the URL once it listens."""
    try:
        import uvicorn

        from .app import LOOPBACK_HOSTS, create_app
    except ImportError as exc:
        raise ConfigError(f"the trace viewer needs fastapi, uvicorn and jinja2 ({exc.name} is missing)",
                          hint="pip install 'reflexa[ui]'") from None
    # On loopback (IPv4 or IPv6), only loopback Host headers: another site's page that rebinds its name to
    # 127.0.0.1 or ::1 must not read the trace through the user's browser.
    allowed = [*LOOPBACK_HOSTS, host] if is_loopback(host) else None
    app = create_app(trace, allowed_hosts=allowed)
    sock = listen(host, port)
    bound_port = sock.getsockname()[1]
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=SHUTDOWN_SECONDS))
    on_ready(f"http://{shown}:{bound_port}/")
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        app.state.store.close()
