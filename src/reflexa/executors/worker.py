"""What a driver and its workers share besides the executor: one store and one model per worker process, the
model specs every worker resolves alike, and the driver's lease that keeps a second driver of the same batch or
eval out."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import ConfigError, RunLeased
from ..models.base import Model
from ..trace.store import Store

WORKER = f"{socket.gethostname()}:{os.getpid()}"
"""This process, as a result row names the worker that ran it."""

_STORES: dict[tuple[int, str], Store] = {}
_MODELS: dict[tuple[int, str | None], Model] = {}
_GUARD = threading.Lock()


def worker_store(target: str) -> Store:
    """This process's store for `target` (a pool or connection does not survive a fork: keyed by pid)."""
    from ..trace import open_store

    key = (os.getpid(), target)
    with _GUARD:
        if key not in _STORES:
            _STORES[key] = open_store(target)
        return _STORES[key]


def worker_model(spec: str | None, connections: int | None, *, loop: str | None = None) -> Model:
    """The model for a task (None: the configured one, or `loop`'s default). A scripted model is built for
    each task (its queue of replies is per-run state); any other is built once per process and shared by its
    threads, under the connection limit."""
    from ..models.config import configured_spec
    from ..models.limit import limited
    from ..models.spec import resolve

    spec = spec if spec is not None else configured_spec(loop)
    if spec.startswith("scripted:"):
        return resolve(spec)
    key = (os.getpid(), spec)
    with _GUARD:
        if key not in _MODELS:
            _MODELS[key] = limited(resolve(spec), connections)
        return _MODELS[key]


def driver_models(model: str | None, reflector: str | None) -> tuple[str | None, str | None]:
    """The model spec and the reflector's every worker resolves, files made absolute. A reflector that is ''
    or the model itself is none: each task's model reflects."""
    from ..models.config import configured_reflector_spec, configured_spec
    from ..models.spec import absolute_spec

    model = absolute_spec(model, Path.cwd())
    reflector = (configured_reflector_spec() if reflector is None else reflector) or ""
    reflector = absolute_spec(reflector.strip(), Path.cwd()) if reflector.strip() else None
    if reflector is not None and reflector == (model or configured_spec()):
        reflector = None
    return model, reflector


def check_model_spec(spec: str | None) -> None:
    """An unknown model backend, or a model file that is not there, is bad input: say so before any worker
    starts."""
    from ..models.named import is_named
    from ..models.registry import names
    from ..models.spec import FILE_BACKENDS

    if not spec:
        return
    kind, _, target = spec.strip().partition(":")
    if kind not in names():
        raise ConfigError(f"unknown model spec {spec!r}: no backend {kind!r}",
                          hint=f"registered backends: {', '.join(names())}")
    # A file a task's model reads (scripted:FILE, local:PATH.gguf) that is missing would stop the run at that
    # task; a named model (local:smollm2, local:qwen1.5b, whose name has a "suffix") is no path.
    named = kind == "local" and is_named(target)
    if kind in FILE_BACKENDS and not named and ("/" in target or Path(target).suffix) and not Path(target).is_file():
        raise ConfigError(f"model file not found: {target} (model spec {spec!r})",
                          hint="a task's model file is relative to the tasks file's folder")


@contextmanager
def driving(store: Any, ns: str, what: str, ident: str, *, hint: str | None = None) -> Iterator[None]:
    """Hold the driver's lease on `ns` while the body runs, so a second driver of the same batch or eval is
    refused (a ConfigError naming the process that holds it)."""
    owner = f"{what}-driver:{os.getpid()}"
    try:
        store.acquire_lease(ns, owner, os.getpid())
    except RunLeased as exc:
        raise ConfigError(f"{what} {ident} is already running: pid {exc.pid} on {exc.host}", hint=hint) from None
    try:
        yield
    finally:
        store.release_lease(ns, owner)
