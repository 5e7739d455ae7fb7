"""Choosing a model from a spec string: flag, then $REFLEXA_MODEL, then a config file, then `local`."""

from __future__ import annotations

import importlib.util
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, ModelNotInstalled
from .base import Model

SPEC_HELP = "local[:PATH.gguf], openai:MODEL, openai:http://HOST:PORT/v1#MODEL, anthropic:MODEL, scripted:FILE.json"
CONFIG_NAME = "reflexa.toml"


def config_paths() -> list[Path]:
    """Config files in the order they are read: ./reflexa.toml, then the user's config directory."""
    from platformdirs import user_config_dir

    return [Path.cwd() / CONFIG_NAME, Path(user_config_dir("reflexa")) / "config.toml"]


def configured_spec() -> str:
    """The model spec in force when no flag names one."""
    if spec := os.environ.get("REFLEXA_MODEL"):
        return spec
    for path in config_paths():
        if path.is_file():
            try:
                data = tomllib.loads(path.read_text())
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"{path} is not valid TOML: {exc}") from None
            if spec := data.get("model"):
                return str(spec)
    return "local"


def resolve(spec: str | None = None) -> Model:
    """Build the Model a spec string names. Raises ConfigError for a spec it cannot read."""
    spec = (spec or configured_spec()).strip()
    kind, _, target = spec.partition(":")
    if kind == "local":
        from .local import LocalModel

        return LocalModel(target or None)
    if kind == "openai":
        from .openai_compat import OpenAIModel, parse_target

        base_url, model, profile = parse_target(target)
        return OpenAIModel(model, base_url=base_url or os.environ.get("OPENAI_BASE_URL"), profile=profile)
    if kind == "anthropic":
        from .anthropic_model import AnthropicModel

        return AnthropicModel(target)
    if kind == "scripted":
        from .scripted import ScriptedModel

        if not target:
            raise ConfigError("scripted needs a replies file", hint="use scripted:replies.json")
        return ScriptedModel.from_file(target)
    raise ConfigError(f"unknown model spec {spec!r}", hint=f"use one of: {SPEC_HELP}")


@dataclass(frozen=True, slots=True)
class Availability:
    backend: str
    usable: bool
    detail: str


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def availability() -> list[Availability]:
    """Which backends can run here and, for the others, why not. Imports nothing heavy."""
    from .local import INSTALL_HINT, default_weights

    rows = []
    if not _installed("llama_cpp"):
        rows.append(Availability("local", False, f"llama-cpp-python missing: {INSTALL_HINT}"))
    else:
        try:
            rows.append(Availability("local", True, f"SmolLM2-135M-Instruct at {default_weights()}"))
        except ModelNotInstalled as exc:
            rows.append(Availability("local", False, f"{exc}: {exc.hint}"))
    if not _installed("openai"):
        rows.append(Availability("openai", False, "openai missing: pip install 'reflexa[openai]'"))
    else:
        key = "OPENAI_API_KEY set" if os.environ.get("OPENAI_API_KEY") else "no OPENAI_API_KEY: servers by URL only"
        rows.append(Availability("openai", True, key))
    if not _installed("anthropic"):
        rows.append(Availability("anthropic", False, "anthropic missing: pip install 'reflexa[anthropic]'"))
    elif not os.environ.get("ANTHROPIC_API_KEY"):
        rows.append(Availability("anthropic", False, "ANTHROPIC_API_KEY is not set"))
    else:
        rows.append(Availability("anthropic", True, "ANTHROPIC_API_KEY set"))
    rows.append(Availability("scripted", True, "replays a JSON list of replies: scripted:FILE.json"))
    return rows
