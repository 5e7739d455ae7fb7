import re
import subprocess
import sys
from pathlib import Path

import reflexa

PUBLIC = [
    "ApprovalRequest",
    "Budget",
    "Check",
    "CheckContext",
    "CommandCheck",
    "Completion",
    "ConfigError",
    "Control",
    "Decision",
    "ErrorCode",
    "ExperienceLibrary",
    "Governor",
    "JsonSchemaCheck",
    "LLMJudge",
    "Lesson",
    "Limits",
    "LocalCorpus",
    "MCPClient",
    "MemoryStore",
    "Model",
    "ModelError",
    "ModelNotInstalled",
    "ModelUnavailable",
    "Observation",
    "PytestCheck",
    "PythonScriptCheck",
    "ReflexaError",
    "RegexCheck",
    "RepairPolicy",
    "Result",
    "Role",
    "RunInterrupted",
    "RunLeased",
    "SQLiteStore",
    "Sandbox",
    "SandboxError",
    "ScriptedModel",
    "SearchCache",
    "Session",
    "Signal",
    "Status",
    "Step",
    "StopReason",
    "StoreError",
    "TaskSpec",
    "Tool",
    "ToolError",
    "ToolRegistry",
    "TrialCall",
    "Usage",
    "Verdict",
    "plan",
    "react",
    "refine",
    "research",
    "resolve_model",
    "sql_tools",
    "tool",
    "trials",
]


def test_public_api_is_pinned():
    assert sorted(reflexa.__all__) == sorted(PUBLIC)


def test_every_public_name_resolves():
    for name in reflexa.__all__:
        assert getattr(reflexa, name) is not None, name


def test_every_public_name_is_documented_and_has_a_docstring():
    page = (Path(__file__).parent.parent / "docs" / "python-api.md").read_text()
    assert not [name for name in reflexa.__all__ if not re.search(rf"`{name}[`(]", page)]
    assert not [name for name in reflexa.__all__ if not (getattr(reflexa, name).__doc__ or "").strip()]


def test_unknown_name_is_an_attribute_error():
    try:
        reflexa.nope  # noqa: B018
    except AttributeError as exc:
        assert "nope" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_import_is_light():
    # `import reflexa` must not pull in pydantic, llama.cpp or the CLI stack.
    code = ("import sys, reflexa; "
            "print(','.join(m for m in ('pydantic', 'llama_cpp', 'typer', 'rich') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
