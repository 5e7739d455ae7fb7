"""The check kinds a task can name: the one registry the spec, the CLI's flags, the loop's checks and an
eval's scoring all read. A new kind is one `CheckKind` here (or one entry point of the group `reflexa.checks`
in another package) plus its Check class.

    CheckKind("regex", str, "A regular expression the candidate must match.", "RE", build=...)

gives a spec field `regex`, a flag `--regex RE` on `reflexa refine`, a `RegexCheck` in the loop, and a
`regex` an eval's `score` may use.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..evaluate.patterns import compile_pattern
from ..files import read_json

if TYPE_CHECKING:
    from ..evaluate.checks import Check
    from ..evaluate.sandbox import Sandbox

ENTRY_POINTS = "reflexa.checks"
"""The entry-point group through which another package adds a check kind (each entry point a CheckKind)."""


@dataclass(frozen=True)
class CheckSetup:
    """What building a check may need besides its value: the candidate's file, the folder, the time limit."""

    out: str
    """The candidate's file name (`solution.py` unless the spec's `out` says otherwise)."""
    workdir: Path
    timeout: float
    """Seconds each check may run."""
    values: bool = False
    """Test code's failing call shows the values it computed on the way (the spec's `show_values`)."""

    @functools.cached_property
    def sandbox(self) -> Sandbox:
        """One sandbox for the spec's checks, with its time limit."""
        from ..evaluate.sandbox import Limits, Sandbox

        return Sandbox(Limits.within(self.timeout))


def _none(value: Any) -> str | None:
    return None


def _no_files(value: Any, setup: CheckSetup) -> list[str]:
    return []


@dataclass(frozen=True, slots=True)
class CheckKind:
    """One kind of check: its spec field (and, with dashes, its flag), what it takes, how it is built."""

    name: str
    takes: Any
    """The value's type, as pydantic validates it (str, bool, dict[str, Any] | str)."""
    help: str
    """One line: the flag's help, and what docs/tasks.md says of the field."""
    metavar: str | None
    """The flag's placeholder; None makes it a switch (`--judge`)."""
    build: Callable[[Any, CheckSetup], Check]
    scores: bool = True
    """An eval's `score` may use it to decide a row (a subjective check may not)."""
    path: bool = False
    """The value names a file, read against the spec's `workdir` (made absolute with the spec's paths)."""
    invalid: Callable[[Any], str | None] = _none
    """What is wrong with the value itself, found when the spec is read (a regex that does not compile)."""
    problems: Callable[[Any, CheckSetup], list[str]] = _no_files
    """What the file system says is wrong (a missing file), found before any model call."""
    text_or_file: bool = False
    """On the command line the flag's text is the value, or names a file holding it (test code in a .py file)."""

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


# --- the built-in kinds -----------------------------------------------------------------------------------

def _tests(value: str, setup: CheckSetup) -> Check:
    from ..evaluate.checks import PytestCheck

    return PytestCheck(setup.workdir / value, module=Path(setup.out).stem, sandbox=setup.sandbox)


def _tests_problems(value: str, setup: CheckSetup) -> list[str]:
    from .inputs import tests_problems

    return tests_problems(setup.workdir / value, setup.out)


def _blank(value: str) -> str | None:
    """`sh -c "  "` exits 0: a blank command would pass any answer."""
    return "empty" if not value.strip() else None


def _python(value: str) -> str | None:
    if not value.strip():
        return "empty"
    try:
        ast.parse(value)
    except SyntaxError as exc:  # else every attempt fails on it, blamed on the candidate
        return f"not valid Python: {exc.msg} (line {exc.lineno})"
    return None


def _regex(value: str) -> str | None:
    try:
        compile_pattern(value)
    except ValueError as exc:
        return str(exc)
    return None


def _schema(value: dict[str, Any] | str, setup: CheckSetup) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    data = read_json(setup.workdir / value, "JSON schema file")
    if not isinstance(data, dict):
        raise ConfigError(f"the JSON schema file must hold a JSON object: {value}")
    return data


def _schema_problems(value: dict[str, Any] | str, setup: CheckSetup) -> list[str]:
    import jsonschema

    try:
        schema = _schema(value, setup)
    except ConfigError as exc:
        return [str(exc)]
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return [f"not a valid JSON schema: {exc.message}"]
    return []


def _builtins() -> list[CheckKind]:
    from ..evaluate import checks as c

    return [
        CheckKind("tests", str, "A pytest file; it imports the candidate from module `solution` (or the --out "
                  "file's).", "FILE", _tests, path=True, problems=_tests_problems),
        CheckKind("test_code", str, "Python run after the candidate (asserts), or a .py file.", "CODE",
                  lambda value, s: c.PythonScriptCheck(value, sandbox=s.sandbox, values=s.values), invalid=_python,
                  text_or_file=True),
        CheckKind("check", str, "A shell command run in a scratch copy of this folder, the candidate written to "
                  "--out; exit 0 passes.", "CMD",
                  lambda value, s: c.CommandCheck(value, out=s.out, workdir=s.workdir, sandbox=s.sandbox),
                  invalid=_blank),
        CheckKind("regex", str, "A regular expression the candidate must match.", "RE",
                  lambda value, s: c.RegexCheck(value), invalid=_regex),
        CheckKind("json_schema", dict[str, Any] | str, "A JSON schema the candidate (JSON) must follow: a file, "
                  "or the schema itself in a spec.", "FILE",
                  lambda value, s: c.JsonSchemaCheck(_schema(value, s)), path=True, problems=_schema_problems),
        CheckKind("judge", bool, "Add an LLM judge (subjective: alone, it never makes a run PASSED).", None,
                  lambda value, s: c.LLMJudge(), scores=False),
    ]


_KINDS: dict[str, CheckKind] = {}


def kinds() -> dict[str, CheckKind]:
    """Every check kind by name: the built-in ones, then those other packages register by entry point."""
    if not _KINDS:
        found = _builtins()
        for point in entry_points(group=ENTRY_POINTS):
            kind = point.load()
            if not isinstance(kind, CheckKind):
                raise ConfigError(f"entry point {point.name} of {ENTRY_POINTS} is not a CheckKind")
            found.append(kind)
        for kind in found:
            if kind.name in _KINDS:
                raise ConfigError(f"two check kinds are named {kind.name!r}")
            _KINDS[kind.name] = kind
    return _KINDS


def is_set(kind: CheckKind, value: Any) -> bool:
    """Whether a value asks for a check: a switch that is on, any other value that is there."""
    return bool(value) if kind.takes is bool else value is not None


def build(values: dict[str, Any], setup: CheckSetup) -> list[Check]:
    """The checks `values` (a spec's or a score's, by kind name) ask for, in the registry's order."""
    return [kind.build(values[name], setup) for name, kind in kinds().items()
            if name in values and is_set(kind, values[name])]


def gather(data: Any, *, scoring: bool = False) -> Any:
    """Plain data of a spec (or of a score) with its check kinds' flat fields gathered into `checks`, as the
    model holds them; `checks` itself is no field of a file. A score gathers only the kinds that score."""
    if not isinstance(data, dict):
        return data
    if "checks" in data:
        raise ValueError("checks: unknown field (each check kind is a field of its own: tests, regex, ...)")
    found = {name: data[name] for name, kind in kinds().items() if name in data and (kind.scores or not scoring)}
    if not found:
        return data
    return {**{k: v for k, v in data.items() if k not in found}, "checks": found}


def validated(values: dict[str, Any]) -> dict[str, Any]:
    """Each check kind's value as its kind takes it, unset ones left out; every problem in one ValueError."""
    from pydantic import TypeAdapter, ValidationError

    checked, errors = {}, []
    for name, value in values.items():
        if value is None:
            continue
        kind = kinds()[name]
        try:
            checked[name] = TypeAdapter(kind.takes).validate_python(value)
        except ValidationError as exc:
            errors.append(f"{name}: {exc.errors()[0]['msg']}")
            continue
        if (problem := kind.invalid(checked[name])) is not None:
            errors.append(f"{name}: {problem}")
    if errors:
        raise ValueError("; ".join(errors))
    return checked


def flattened(data: dict[str, Any]) -> dict[str, Any]:
    """A model's dump with `checks` spread back into flat fields, as files and batch lines have them."""
    return {**{k: v for k, v in data.items() if k != "checks"}, **data.get("checks", {})}
