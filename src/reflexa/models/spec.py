"""Choosing a model from a spec string `BACKEND[:TARGET]`: flag, then $REFLEXA_MODEL, then a config file,
then `local`. The backend comes from the registry (`reflexa.models` entry points)."""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError, ReflexaError
from .base import Model
from .config import CONFIG_NAME, config_paths, configured_reflector_spec, configured_spec
from .registry import Availability, all_availability, load, names

SPEC_HELP = ("local[:NAME|:PATH.gguf], openai:MODEL, openai:http://HOST:PORT/v1#MODEL, anthropic:MODEL, "
             "scripted:FILE.json")

__all__ = ["CONFIG_NAME", "SPEC_HELP", "Availability", "absolute_spec", "availability", "config_paths",
           "configured_reflector_spec", "configured_spec", "resolve", "resolve_reflector"]


def resolve(spec: str | None = None, *, loop: str | None = None) -> Model:
    """Build the Model a spec string names; None means the configured spec (for `loop`: its own default when
    nothing is configured). An empty spec, an unknown backend or a target the backend cannot read is a
    ConfigError."""
    if spec is None:
        spec = configured_spec(loop)
    spec = spec.strip()
    if not spec:
        raise ConfigError("empty model spec", hint=f"use one of: {SPEC_HELP}; or leave out -m for the default")
    kind, _, target = spec.partition(":")
    registered = names()
    if kind not in registered:
        raise ConfigError(f"unknown model spec {spec!r}: no backend {kind!r}",
                          hint=f"registered backends: {', '.join(registered)} (e.g. {SPEC_HELP})")
    try:
        model = load(kind).create(target)
    except ReflexaError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's bug, named as such rather than a traceback
        raise ConfigError(f"the {kind!r} model backend failed to build {spec!r}: {type(exc).__name__}: {exc}",
                          hint="a plugin backend's bug: see its package") from None
    if not isinstance(model, Model):
        raise ConfigError(f"the {kind!r} model backend built a {type(model).__name__}, not a model")
    model.spec = absolute_spec(spec, Path.cwd())
    return model


def resolve_reflector(spec: str | None = None, model: Model | None = None) -> Model | None:
    """The reflector's own Model: the one `spec` names, else (`spec` None) the configured one
    (`configured_reflector_spec`). None, the run's model reflects, when nothing names one or `spec` is empty
    (how a flag overrides a configured reflector). A spec equal to `model`'s own is `model` itself, so one
    model is not loaded twice."""
    spec = spec if spec is not None else configured_reflector_spec()
    if spec is None or not spec.strip():
        return None
    if model is not None and model.spec is not None and absolute_spec(spec.strip(), Path.cwd()) == model.spec:
        return model
    return resolve(spec)


FILE_BACKENDS = ("scripted", "local")
"""The backends whose spec target may be a file path."""


def absolute_spec(spec: str | None, base: Path) -> str | None:
    """A model spec whose target is a file (scripted:FILE, local:PATH.gguf) with that path made absolute, so
    a worker or a resume, wherever it starts, finds the file."""
    if spec is None or ":" not in spec:
        return spec
    kind, _, target = spec.partition(":")
    if kind not in FILE_BACKENDS:  # openai:gpt-4o is a model name, even beside a file called gpt-4o
        return spec
    if target and not target.startswith(("http://", "https://", "/")) and (base / target).is_file():
        return f"{kind}:{(base / target).resolve()}"
    return spec


def availability() -> list[Availability]:
    """Which registered backends can run here and, for the others, why not. Imports nothing heavy."""
    return all_availability()
