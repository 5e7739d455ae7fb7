"""Checks that turn a candidate into objective signals, and the sandbox they run code in."""

from .checks import (
    Check,
    CheckContext,
    CommandCheck,
    JsonSchemaCheck,
    LLMJudge,
    PytestCheck,
    PythonScriptCheck,
    RegexCheck,
    run_checks,
    verdict_from,
)
from .sandbox import ExecResult, Limits, Sandbox

__all__ = [
    "Check", "CheckContext", "CommandCheck", "ExecResult", "JsonSchemaCheck", "LLMJudge", "Limits",
    "PytestCheck", "PythonScriptCheck", "RegexCheck", "Sandbox", "run_checks", "verdict_from",
]
