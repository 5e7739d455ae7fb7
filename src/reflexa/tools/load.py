"""A user's own tools, named on the command line or in a task spec: `module:function` or a Python file.

`module:function` imports the module (from the working folder too) and takes that attribute: a `@tool`, a
plain typed function (made a tool as `@tool` would), or a list of either. A path ending in `.py` takes every
`@tool` defined at the top level of that file. Anything else is a ConfigError naming what is wrong. The
module's docstring is its tools' context: what the model is told up front about the API (Tool.context).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .registry import Tool, tool


def load_tools(refs: Iterable[str], base: Path) -> list[Tool]:
    """The tools each reference names, in order; paths and modules are read from `base`."""
    found: list[Tool] = []
    for ref in refs:
        for one in (part.strip() for part in ref.split(",") if part.strip()):
            found += _from_file(base / one) if one.endswith(".py") else _from_module(one, base)
    return found


def problem(ref: str, base: Path) -> str | None:
    """What is wrong with a tools reference, or None when its tools load."""
    try:
        load_tools([ref], base)
    except ConfigError as exc:
        return str(exc)
    return None


def _from_file(path: Path) -> list[Tool]:
    if not path.is_file():
        raise ConfigError(f"tools file not found: {path}")
    # A name of its own per file and version, so two files called tools.py do not replace each other in
    # sys.modules, and a file checked before its run (TaskSpec.problems) is not executed a second time.
    version = f"{path.resolve()}:{path.stat().st_mtime_ns}"
    name = f"reflexa_tools_{hashlib.sha256(version.encode()).hexdigest()[:12]}"
    if (loaded := sys.modules.get(name)) is not None:
        return _tools_in(loaded, path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"cannot load tools from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # pydantic resolves a tool's annotations through the module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's file (argparse at import exits)
        del sys.modules[name]
        raise ConfigError(f"{path} failed to load: {type(exc).__name__}: {exc}") from None
    return _tools_in(module, path)


def _tools_in(module: Any, path: Path) -> list[Tool]:
    tools = [value for value in vars(module).values() if isinstance(value, Tool)]
    if not tools:
        raise ConfigError(f"{path} defines no @tool", hint="decorate each tool function with reflexa's @tool")
    return [_with_context(t, module) for t in tools]


def _with_context(found: Tool, module: Any) -> Tool:
    """`found` with its module's docstring as its context, unless it has one of its own."""
    doc = inspect.getdoc(module) or ""
    return replace(found, context=doc) if doc and not found.context else found


def _from_module(ref: str, base: Path) -> list[Tool]:
    module_name, _, attribute = ref.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"tools: {ref!r} is neither module:function nor a .py file")
    if str(base) not in sys.path:
        sys.path.insert(0, str(base))  # a module beside the task, as `python -m` would find it
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's module
        raise ConfigError(f"tools: cannot import {module_name}: {type(exc).__name__}: {exc}") from None
    value = getattr(module, attribute, None)
    if value is None:
        raise ConfigError(f"tools: {module_name} has no {attribute!r}")
    return [_with_context(_as_tool(item, ref), module)
            for item in (value if isinstance(value, list | tuple) else [value])]


def _as_tool(value: Any, ref: str) -> Tool:
    if isinstance(value, Tool):
        return value
    if callable(value):
        try:
            made: Tool = tool(value)
        except Exception as exc:  # noqa: BLE001 - e.g. an annotation pydantic cannot build a schema for
            raise ConfigError(f"tools: {ref} cannot be a tool: {type(exc).__name__}: {exc}") from None
        return made
    raise ConfigError(f"tools: {ref} is neither a tool nor a function")
