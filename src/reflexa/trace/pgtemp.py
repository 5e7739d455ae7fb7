"""A throwaway PostgreSQL server in a temporary folder, for tests and benchmarks of the PostgreSQL store.

It needs Debian's `postgresql` package (the server binaries under /usr/lib/postgresql/*/bin). PostgreSQL
refuses to run as root, so as root the server runs as the unprivileged user `nobody` (through `runuser`),
with its data folder owned by that user. It listens on 127.0.0.1 on a free port and on a socket in its
own folder, trusts local connections, and is removed when stopped.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

from ..errors import StoreError

USER = "nobody"
"""Who runs the server when we are root."""
START_TIMEOUT = 60
"""Seconds pg_ctl waits for the server to accept connections (a loaded machine is slow)."""


def server_bin() -> Path | None:
    """The newest installed PostgreSQL server's bin folder, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parent.parent.name)
                   if Path(p).parent.parent.name.isdigit() else 0)
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TempPostgres:
    """A PostgreSQL server of our own: `start()` returns a URL, `database()` a URL to a fresh database."""

    def __init__(self, *, durable: bool = False) -> None:
        """`durable` False turns fsync off: faster, and a test server has nothing to lose."""
        self.durable = durable
        self.folder: Path | None = None
        self.port = 0
        self.bin = server_bin()

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = list(args)
        if os.geteuid() == 0:
            command = ["runuser", "-u", USER, "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=START_TIMEOUT + 30, check=False)

    def start(self) -> str:
        """Create and start the server; the URL of its `postgres` database. StoreError when it cannot."""
        if self.bin is None:
            raise StoreError("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb)",
                             hint="apt-get install -y postgresql")
        # Under /tmp, not pytest's per-user folder: `nobody` must be able to reach it.
        self.folder = Path(tempfile.mkdtemp(prefix="reflexa-pg-"))
        data, log = self.folder / "data", self.folder / "server.log"
        if os.geteuid() == 0:
            shutil.chown(self.folder, USER)
        init = self._run(str(self.bin / "initdb"), "-D", str(data), "-U", "reflexa", "--auth=trust", "-E", "UTF8",
                         "--no-sync", "--locale=C")
        if init.returncode != 0:
            self.stop()
            raise StoreError(f"initdb failed: {(init.stderr or init.stdout).strip()[-500:]}")
        self.port = _free_port()
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.folder} "
                   "-c max_connections=200")
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        started = self._run(str(self.bin / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options, "-w",
                            "-t", str(START_TIMEOUT), "start")
        if started.returncode != 0:
            detail = log.read_text(errors="replace")[-800:] if log.exists() else started.stderr
            self.stop()
            raise StoreError(f"the PostgreSQL server did not start: {detail.strip()}")
        return self.url("postgres")

    def url(self, database: str) -> str:
        return f"postgresql://reflexa@127.0.0.1:{self.port}/{database}"

    def database(self) -> str:
        """A new, empty database on the server; its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"'.encode())
        return self.url(name)

    def stop(self) -> None:
        """Stop the server at once and remove its folder."""
        if self.folder is None:
            return
        if self.bin is not None and (self.folder / "data" / "postmaster.pid").exists():
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.folder / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None
