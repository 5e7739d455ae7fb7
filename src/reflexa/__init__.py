"""reflexa: self-correcting LLM agents that check each attempt against objective signals, turn a failure
into a short structured lesson, and retry within a hard budget.

    >>> from reflexa import refine, PytestCheck, Session, SQLiteStore
    >>> result = refine("Write is_prime(n: int) -> bool", [PytestCheck("test_solution.py")],
    ...                 session=Session(store=SQLiteStore()))
    >>> result.stop_reason, result.best

    >>> from reflexa import plan, react, sql_tools
    >>> result = react("Which customer spent the most in 2024?", sql_tools("shop.sqlite"))
    >>> result = plan("Which city does the top customer of 2024 live in?", sql_tools("shop.sqlite"))

    >>> from reflexa import TaskSpec   # a task of any loop as data, as the CLI and batch run it
    >>> result = TaskSpec.from_file("task.json").run()

Names are loaded on first use, so `import reflexa` stays cheap (no pydantic, no llama.cpp).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

_EXPORTS: dict[str, str] = {
    # loops and what they share
    "Session": "reflexa.loops.session",
    "plan": "reflexa.loops.plan",
    "react": "reflexa.loops.react",
    "refine": "reflexa.loops.refine",
    "research": "reflexa.loops.research",
    "trials": "reflexa.loops.trials",
    "TrialCall": "reflexa.loops.trials",
    # tasks as data
    "TaskSpec": "reflexa.tasks.spec",
    # engine
    "ExperienceLibrary": "reflexa.reflect.experience",
    "Governor": "reflexa.reflect.governor",
    "RepairPolicy": "reflexa.reflect.repairs",
    # tools
    "Observation": "reflexa.tools.registry",
    "Tool": "reflexa.tools.registry",
    "ToolError": "reflexa.tools.registry",
    "ToolRegistry": "reflexa.tools.registry",
    "sql_tools": "reflexa.tools.sql",
    "MCPClient": "reflexa.tools.mcp",
    "ApprovalRequest": "reflexa.tools.approval",
    "Decision": "reflexa.tools.approval",
    # search
    "LocalCorpus": "reflexa.search.corpus",
    "SearchCache": "reflexa.search.cache",
    "tool": "reflexa.tools.registry",
    # core types
    "Budget": "reflexa.types",
    "Control": "reflexa.types",
    "ErrorCode": "reflexa.types",
    "Lesson": "reflexa.types",
    "Result": "reflexa.types",
    "Role": "reflexa.types",
    "Signal": "reflexa.types",
    "Status": "reflexa.types",
    "Step": "reflexa.types",
    "StopReason": "reflexa.types",
    "Usage": "reflexa.types",
    "Verdict": "reflexa.types",
    # models
    "Completion": "reflexa.models.base",
    "Model": "reflexa.models.base",
    "ScriptedModel": "reflexa.models.scripted",
    "resolve_model": "reflexa.models.spec",
    # checks
    "Check": "reflexa.evaluate.checks",
    "CheckContext": "reflexa.evaluate.checks",
    "CommandCheck": "reflexa.evaluate.checks",
    "JsonSchemaCheck": "reflexa.evaluate.checks",
    "LLMJudge": "reflexa.evaluate.checks",
    "PytestCheck": "reflexa.evaluate.checks",
    "PythonScriptCheck": "reflexa.evaluate.checks",
    "RegexCheck": "reflexa.evaluate.checks",
    "Limits": "reflexa.evaluate.sandbox",
    "Sandbox": "reflexa.evaluate.sandbox",
    # stores
    "MemoryStore": "reflexa.trace.store",
    "SQLiteStore": "reflexa.trace.sqlite",
    # errors
    "ConfigError": "reflexa.errors",
    "ModelError": "reflexa.errors",
    "ModelNotInstalled": "reflexa.errors",
    "ModelUnavailable": "reflexa.errors",
    "ReflexaError": "reflexa.errors",
    "RunInterrupted": "reflexa.errors",
    "RunLeased": "reflexa.errors",
    "SandboxError": "reflexa.errors",
    "StoreError": "reflexa.errors",
}
_ALIASES = {"resolve_model": "resolve"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'reflexa' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), _ALIASES.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return [*__all__, "__version__"]


if TYPE_CHECKING:
    from .errors import (
        ConfigError,
        ModelError,
        ModelNotInstalled,
        ModelUnavailable,
        ReflexaError,
        RunInterrupted,
        RunLeased,
        SandboxError,
        StoreError,
    )
    from .evaluate.checks import (
        Check,
        CheckContext,
        CommandCheck,
        JsonSchemaCheck,
        LLMJudge,
        PytestCheck,
        PythonScriptCheck,
        RegexCheck,
    )
    from .evaluate.sandbox import Limits, Sandbox
    from .loops.plan import plan
    from .loops.react import react
    from .loops.refine import refine
    from .loops.research import research
    from .loops.session import Session
    from .loops.trials import TrialCall, trials
    from .models.base import Completion, Model
    from .models.scripted import ScriptedModel
    from .models.spec import resolve as resolve_model
    from .reflect.experience import ExperienceLibrary
    from .reflect.governor import Governor
    from .reflect.repairs import RepairPolicy
    from .search.cache import SearchCache
    from .search.corpus import LocalCorpus
    from .tasks.spec import TaskSpec
    from .tools.registry import Observation, Tool, ToolError, ToolRegistry, tool
    from .tools.sql import sql_tools
    from .trace.sqlite import SQLiteStore
    from .trace.store import MemoryStore
    from .types import (
        Budget,
        Control,
        ErrorCode,
        Lesson,
        Result,
        Role,
        Signal,
        Status,
        Step,
        StopReason,
        Usage,
        Verdict,
    )
