"""reflexa's own backends, registered under the `reflexa.models` entry-point group like any plugin.

This module must stay light: it is imported to list backends, and each backend's SDK is imported only
inside `create`.
"""

from __future__ import annotations

import importlib.util
import os

from ..errors import ConfigError
from .base import Model
from .registry import Availability, Backend


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _create_local(target: str) -> Model:
    from .local import LocalModel

    return LocalModel(target or None)


def _local_availability() -> list[Availability]:
    from .local import INSTALL_HINT
    from .named import DEFAULT, NAMED
    from .weights import missing_packages, state

    if not _installed("llama_cpp"):
        return [Availability("local", False, f"llama-cpp-python missing: {INSTALL_HINT}")]
    model = NAMED[DEFAULT]
    if missing_packages(model):
        return [Availability("local", False, f"{model.description}: weights not installed: {model.install_hint}")]
    return [Availability("local", True, f"{model.description} (default), {state(model)}; also: "
                         f"{', '.join(f'local:{n}' for n in NAMED if n != DEFAULT)}, local:PATH.gguf")]


LOCAL = Backend("local", "local[:NAME|:PATH.gguf]", _create_local, _local_availability)


def _create_openai(target: str) -> Model:
    from .openai_compat import OpenAIModel, parse_target

    base_url, model, profile = parse_target(target)
    return OpenAIModel(model, base_url=base_url or os.environ.get("OPENAI_BASE_URL"), profile=profile)


def _openai_availability() -> list[Availability]:
    if not _installed("openai"):
        return [Availability("openai", False, "openai missing: pip install 'reflexa[openai]'")]
    key = "OPENAI_API_KEY set" if os.environ.get("OPENAI_API_KEY") else "no OPENAI_API_KEY: servers by URL only"
    return [Availability("openai", True, key)]


OPENAI = Backend("openai", "openai:MODEL, openai:http://HOST:PORT/v1#MODEL", _create_openai, _openai_availability)


def _create_anthropic(target: str) -> Model:
    from .anthropic_model import AnthropicModel

    return AnthropicModel(target)


def _anthropic_availability() -> list[Availability]:
    if not _installed("anthropic"):
        return [Availability("anthropic", False, "anthropic missing: pip install 'reflexa[anthropic]'")]
    if not os.environ.get("ANTHROPIC_API_KEY"):
        return [Availability("anthropic", False, "ANTHROPIC_API_KEY is not set")]
    return [Availability("anthropic", True, "ANTHROPIC_API_KEY set")]


ANTHROPIC = Backend("anthropic", "anthropic:MODEL", _create_anthropic, _anthropic_availability)


def _create_scripted(target: str) -> Model:
    from .scripted import ScriptedModel

    if not target:
        raise ConfigError("scripted needs a replies file", hint="use scripted:replies.json")
    return ScriptedModel.from_file(target)


SCRIPTED = Backend("scripted", "scripted:FILE.json", _create_scripted,
                   lambda: [Availability("scripted", True, "replays a JSON list of replies: scripted:FILE.json")])
