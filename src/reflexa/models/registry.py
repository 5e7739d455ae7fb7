"""The backend registry: every model backend, reflexa's own included, registers through an entry point.

A package adds a backend by declaring, in its pyproject.toml,

    [project.entry-points."reflexa.models"]
    mine = "my_package.reflexa_backend:BACKEND"

where BACKEND is a `Backend` (or any object with `name`, `usage`, `create(target)` and
`availability()`). The spec `mine:TARGET` then builds `BACKEND.create("TARGET")`, and `reflexa models`
lists it. Nothing is imported until a backend is used: entry points are read from package metadata.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from ..errors import ConfigError
from .base import Model

GROUP = "reflexa.models"

BUILTIN: dict[str, str] = {
    "local": "reflexa.models.backends:LOCAL",
    "openai": "reflexa.models.backends:OPENAI",
    "anthropic": "reflexa.models.backends:ANTHROPIC",
    "scripted": "reflexa.models.backends:SCRIPTED",
}
"""reflexa's own backends, used when the package metadata does not declare them (a source checkout on
PYTHONPATH, or an editable install made before the entry points existed)."""


@dataclass(frozen=True, slots=True)
class Availability:
    """Whether a backend can run here and, if not, what to do about it."""

    backend: str
    usable: bool
    detail: str


@dataclass(frozen=True, slots=True)
class Backend:
    """A model backend as the registry knows it."""

    name: str
    """The spec prefix: `name:TARGET`."""
    usage: str
    """The spec forms it takes, for help text, e.g. `openai:MODEL`."""
    create: Callable[[str], Model]
    """Build a model from the text after the colon (empty when the spec has none)."""
    availability: Callable[[], list[Availability]]
    """Rows for `reflexa models`; must be cheap and import nothing heavy."""


def entry_points() -> dict[str, metadata.EntryPoint]:
    """Every registered backend by name. When a name is declared twice, the first found wins."""
    found: dict[str, metadata.EntryPoint] = {}
    for ep in metadata.entry_points(group=GROUP):
        found.setdefault(ep.name, ep)
    for name, value in BUILTIN.items():
        found.setdefault(name, metadata.EntryPoint(name=name, value=value, group=GROUP))
    return found


def names() -> list[str]:
    """The registered backend names, reflexa's own first."""
    registered = entry_points()
    return [*(n for n in BUILTIN if n in registered), *sorted(n for n in registered if n not in BUILTIN)]


def load(name: str) -> Backend:
    """The backend registered as `name`. A missing name or a plugin that fails to load is a ConfigError."""
    registered = entry_points()
    if name not in registered:
        raise ConfigError(f"no model backend named {name!r}", hint=f"registered backends: {', '.join(names())}")
    return _load(registered[name])


def _load(ep: metadata.EntryPoint) -> Backend:
    try:
        backend: Any = ep.load()
    except Exception as exc:  # noqa: BLE001 - a plugin may fail in any way; say which one and why
        raise ConfigError(f"model backend {ep.name!r} ({ep.value}) failed to load: {exc!r}",
                          hint="reinstall or remove the package that provides it") from None
    if not (callable(getattr(backend, "create", None)) and callable(getattr(backend, "availability", None))):
        raise ConfigError(f"model backend {ep.name!r} ({ep.value}) has no create() and availability()")
    return backend


def all_availability() -> list[Availability]:
    """One or more rows per registered backend; a backend that fails to load is listed as unusable."""
    rows: list[Availability] = []
    for name in names():
        try:
            rows.extend(load(name).availability())
        except Exception as exc:  # noqa: BLE001 - a listing must survive a broken plugin
            rows.append(Availability(name, False, str(exc)))
    return rows
