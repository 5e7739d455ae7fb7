"""`TaskSpec`: a task of any loop as validated data, with the same field names as the CLI's flags.

Every face builds one and runs it: each CLI command, `reflexa run FILE`, a `batch` line, `resume` (from the
spec stored with the run) and `eval`. A spec validates whole before anything runs: unknown fields, fields
of another loop and a missing check are errors of the model; missing files, an unreadable database or a
regex that does not compile are `problems()`, read from the file system.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from ..errors import ConfigError
from ..files import read_json
from ..loops.refine import ContextStrategy, Repairs
from ..types import LOOPS, Budget
from .kinds import CheckSetup, flattened, gather, is_set, kinds, validated

Loop = Literal["refine", "react", "trials", "research", "plan"]
assert get_args(Loop) == LOOPS
Search = Literal["local", "tavily", "ddgs", "wikipedia"]
Approve = Literal["off", "ask", "defer"]

COMMON = frozenset({"loop", "task", "id", "model", "reflector_model", "max_tokens", "max_calls", "max_seconds",
                    "max_reflections", "reflect", "meta", "workdir"})
TOOLS = frozenset({"db", "write", "validate_", "tools", "mcp", "approve"})
OWN_FIELDS: dict[str, frozenset[str]] = {
    "refine": frozenset({"checks", "out", "timeout", "max_attempts", "context", "prelude", "temperature", "seed",
                          "repairs", "max_reply_tokens", "select", "show_values"}),
    "react": TOOLS | {"max_steps"},
    "trials": TOOLS | {"max_steps", "max_trials"},
    "plan": TOOLS | {"max_steps", "plan", "replan", "facts", "corpus", "search"},
    "research": frozenset({"corpus", "search", "max_rounds"}),
}
"""The fields each loop reads besides the COMMON ones (refine's `checks` stand for every check kind's field); a
field of another loop is an error, not ignored."""
BUDGET_FIELDS = ("max_tokens", "max_calls", "max_seconds", "max_reflections")
"""The budget's fields: limits over the whole run, which a batch or an eval fills for a task that sets none."""
PATHS = ("db", "corpus")
"""Fields that name a file or folder, relative to `workdir`."""
MAX_ERRORS = 20
"""Problems listed at most in one error; the rest are counted."""


class TaskSpec(BaseModel):
    """A task of any loop: what to do, what checks it, its tools, search, bounds, budget and models.

    Paths are relative to `workdir` (the folder of the file the spec came from, or the current directory
    on the command line); `resolved()` makes them absolute, and a run stores its spec that way so a resume
    finds the same files wherever it starts."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    loop: Loop = "refine"
    task: str = Field(min_length=1)
    """The task, question or goal."""
    id: str | None = Field(default=None, min_length=1, max_length=200)
    """A name for the task, unique within a batch or an eval."""

    # refine: what checks a candidate (tasks/kinds.py): one flat field per check kind, read and written flat
    checks: dict[str, Any] = Field(default_factory=dict)
    """The check kinds' values by kind name (`tests`, `test_code`, `check`, `regex`, `json_schema`, `judge`, and
    any a plugin registers); in a file or a batch line each is a field of its own."""
    out: str | None = None
    """The candidate's file, relative to `workdir` (default solution.py); from the CLI, the best candidate is
    written there at the end."""
    timeout: float = Field(default=10.0, gt=0, le=3600)
    """Seconds each check may run."""
    context: ContextStrategy = "feedback"
    """What a revision sees: the task and how the latest candidate failed (feedback), that candidate too
    (latest), or every earlier attempt (full)."""
    prelude: str | None = None
    """Python put before the candidate wherever it is checked: the imports, or the whole function stub, a
    task's prompt gives (HumanEval's prompt, so that a reply with only the body runs as its harness runs it)."""
    temperature: float = Field(default=0.0, ge=0, le=2)
    """The temperature of each attempt (0: greedy)."""
    seed: int | None = None
    """The sampling seed at a temperature above 0 (default: the model's, 0)."""
    select: int = Field(default=1, ge=1, le=16)
    """Draw this many candidates first (the first greedy, the others sampled) and, of those that pass, keep
    the one whose behaviour on calls the model writes most others share (1: off); see docs/loops.md."""
    max_reply_tokens: int = Field(default=512, ge=16, le=32_768)
    """Tokens each attempt's reply may take; a reply cut there before its code ends is a REPLY_CUT failure,
    repaired by asking for a shorter one."""
    show_values: bool = False
    """A failing assert of test code (`test_code`, HumanEval's `check`) also shows what its call computed: the
    call runs once more, traced, and each line it ran is shown with the values that changed (docs/checks.md)."""
    repairs: Repairs = "fixed"
    """How a failed attempt is repaired: by the fixed rule (revise it; after a failed revision, a fresh sample),
    by revising every time (a revision that repeats itself gets one fresh sample; the fixed rule's ablation),
    by a policy learned from the trace store's record of what converted (learn), or by that record read and
    left unchanged (frozen); see docs/loops.md."""

    # react, trials, plan: tools
    db: str | None = None
    """The SQLite database the bundled SQL tools work on."""
    write: bool = False
    """Allow changes: adds the side-effecting `execute` tool."""
    validate_: str | None = Field(default=None, alias="validate")
    """Checks the final answer: an SQL query that must return a row (the answer is :answer), or a shell
    command that must exit 0, run in `workdir` (the answer is $REFLEXA_ANSWER)."""
    tools: list[str] = Field(default_factory=list)
    """Your own tools: `module:function` (a @tool, a typed function or a list of them) or a `.py` file (every
    @tool in it), read from `workdir`."""
    mcp: list[str] = Field(default_factory=list)
    """MCP servers whose tools join the run: a command that starts a stdio server (run in `workdir`), or the
    URL of a streamable HTTP one."""
    approve: Approve = "off"
    """Human approval of side-effecting tool calls: ask in the terminal, or defer (the run stops
    AWAITING_APPROVAL until `reflexa approve`); off runs them unasked."""

    # research (and plan's research sub-goals)
    corpus: str | None = None
    """A folder of documents, indexed on the fly (search `local`)."""
    search: Search = "local"

    # plan
    plan: str | dict[str, Any] | None = None
    """A goal tree (or a JSON file holding one): skips the planner."""
    replan: bool = True
    """Rewrite a failed sub-goal once before skipping its dependents."""
    facts: list[str] = Field(default_factory=list)
    """Facts every sub-goal sees (e.g. "budget 5,000 EUR")."""

    # the loop's own bound (default: the loop's)
    max_attempts: int | None = Field(default=None, ge=1, le=1000)
    """refine: attempts at most."""
    max_steps: int | None = Field(default=None, ge=1, le=1000)
    """react, trials: steps at most (each trial's); plan: steps each sub-goal takes at most."""
    max_rounds: int | None = Field(default=None, ge=1, le=1000)
    """research: search-and-revise rounds at most."""
    max_trials: int | None = Field(default=None, ge=1, le=1000)
    """trials: whole attempts at most, each starting from the lessons of the ones before."""

    # the budget, over the whole run
    max_tokens: int | None = Field(default=None, ge=1)
    """Input plus output tokens over every model call of the run."""
    max_calls: int | None = Field(default=None, ge=1)
    max_seconds: float | None = Field(default=None, gt=0)
    max_reflections: int | None = Field(default=None, ge=0)
    """Reflector calls (default 2)."""
    reflect: bool = True
    """Let the reflector turn a failure into a lesson; off, retries see the raw signals (no reflector call)."""

    # models
    model: str | None = None
    """A model spec (default: $REFLEXA_MODEL, reflexa.toml, then local)."""
    reflector_model: str | None = None
    """A model spec for the reflector's calls alone; '' for the run's own model."""

    meta: dict[str, Any] = Field(default_factory=dict)
    """Any JSON object, kept with the run and copied into a batch's or an eval's result row."""
    workdir: str | None = None
    """The folder relative paths are read from, and that `check` runs in a scratch copy of."""

    @model_validator(mode="before")
    @classmethod
    def _gather_checks(cls, data: Any) -> Any:
        return gather(data)

    @field_validator("checks")
    @classmethod
    def _check_values(cls, values: dict[str, Any]) -> dict[str, Any]:
        return validated(values)

    @model_serializer(mode="wrap")
    def _flat_checks(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return flattened(handler(self))

    @model_validator(mode="after")
    def _fits_its_loop(self) -> TaskSpec:
        given = self.model_fields_set - {"checks"} | set(self.checks)
        errors = [f"{name.rstrip('_')}: not a field of a {self.loop} task"
                  for name in sorted(given - COMMON - OWN_FIELDS[self.loop] - ({*kinds()} if self.loop == "refine"
                                                                                else set()))]
        if not self.task.strip():
            errors.append("task: empty")
        errors += _loop_errors(self)
        if errors:
            raise ValueError("; ".join(errors))
        return self

    # --- reading and writing --------------------------------------------------------------------------

    @classmethod
    def parse(cls, data: Any, *, where: str = "invalid task") -> TaskSpec:
        """A spec from plain data; every problem with it is one ConfigError, "WHERE: problem; problem"."""
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: must be a JSON object, got {type(data).__name__}")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"{where}: " + "; ".join(field_errors(exc)),
                              hint="docs/tasks.md lists the fields of each loop") from None

    @classmethod
    def from_file(cls, path: str | Path) -> TaskSpec:
        """A spec from a JSON file, its paths resolved against the file's folder."""
        path = Path(path)
        data = read_json(path, "task spec file")
        return cls.parse(data, where=str(path)).resolved(path.resolve().parent)

    def to_file(self, path: str | Path) -> None:
        """Write the spec as JSON; paths inside the file's folder are written relative to it, so the file
        and its inputs can move together."""
        path = Path(path)
        folder = path.resolve().parent
        data = self.dump()
        for name in (*self.path_fields(), "workdir"):
            if isinstance(data.get(name), str) and Path(data[name]).is_absolute():
                relative = _relative(Path(data[name]), folder)
                data[name] = relative
        if data.get("workdir") == ".":
            del data["workdir"]
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")

    def dump(self) -> dict[str, Any]:
        """Plain JSON data, only the fields that differ from their defaults (as stored with a run)."""
        return {"loop": self.loop, **self.model_dump(mode="json", by_alias=True, exclude_defaults=True)}

    @classmethod
    def from_run(cls, record: Any) -> TaskSpec:
        """The spec a stored run was started from (`RunRecord.meta["spec"]`)."""
        data = (record.meta or {}).get("spec")
        if data is None:
            raise ConfigError(f"run {record.run_id[:12]} was started from Python, with no task spec stored",
                              hint=f"resume it from Python: {record.loop}(..., resume={record.run_id[:12]!r})")
        return cls.parse(data, where=f"run {record.run_id[:12]}'s stored task")

    def resolved(self, base: Path) -> TaskSpec:
        """A copy whose paths (and file model specs) are absolute, read against `workdir` or else `base`."""
        from ..models.spec import absolute_spec

        folder = _absolute(base / (self.workdir or "."))
        update: dict[str, Any] = {"workdir": str(folder)}
        checks = dict(self.checks)
        for name in self.path_fields():
            target = checks if name in kinds() else update
            value = checks.get(name) if name in kinds() else getattr(self, name)
            if isinstance(value, str) and value:
                target[name] = str(_absolute(folder / value))
        if checks:
            update["checks"] = checks
        for name in ("model", "reflector_model"):
            if getattr(self, name):
                update[name] = absolute_spec(getattr(self, name), folder)
        if self.tools:  # one entry per tool reference; a file's path made absolute
            refs = [part.strip() for ref in self.tools for part in ref.split(",") if part.strip()]
            update["tools"] = [str(_absolute(folder / ref)) if ref.endswith(".py") else ref for ref in refs]
        return self.model_copy(update=update)

    def with_options(self, **options: Any) -> TaskSpec:
        """A copy with the options that are not None set (validated again): a face's overrides."""
        given = {k: v for k, v in options.items() if v is not None}
        if not given:
            return self
        data = {**self.model_dump(by_alias=True, exclude_unset=True), **_aliased(given)}
        return type(self).parse(data)

    # --- what a run needs -----------------------------------------------------------------------------

    @property
    def budget(self) -> Budget:
        """The run's resource limits. Reflection off is a quota of no reflector calls."""
        return Budget(max_tokens=self.max_tokens, max_calls=self.max_calls, max_seconds=self.max_seconds,
                      max_reflections=0 if not self.reflect else self.max_reflections)

    @property
    def out_file(self) -> str:
        """The candidate's file name (the module a pytest file imports is its stem)."""
        return self.out or "solution.py"

    def check_setup(self) -> CheckSetup:
        """What the spec's checks are built with: the candidate's file, the working folder, the time limit."""
        return CheckSetup(self.out_file, Path(self.workdir or "."), self.timeout, self.show_values)

    def path_fields(self) -> tuple[str, ...]:
        """The fields that name a file or folder, relative to `workdir`: PATHS, `plan`, and the check kinds
        that name one (`tests`; `json_schema` when it is a file)."""
        return (*PATHS, "plan", *(name for name, kind in kinds().items() if kind.path))

    def path(self, name: str) -> Path | None:
        """A path field (or a check kind's), read against `workdir`."""
        value = self.checks.get(name) if name in kinds() else getattr(self, name)
        if not isinstance(value, str) or not value:
            return None
        return Path(self.workdir or ".") / value

    def problems(self) -> list[str]:
        """What the file system says is wrong: missing files, a database that is not one, a check that
        cannot run. Empty when the spec can run."""
        from .inputs import problems

        # Paths as they were given: relative to the working folder.
        prefix = f"{self.workdir.rstrip('/')}/" if self.workdir else None
        return [p.replace(prefix, "") if prefix else p for p in problems(self)]

    def checked(self) -> TaskSpec:
        """The spec, or a ConfigError naming every problem it has."""
        if problems := self.problems():
            raise ConfigError(f"the {self.loop} task cannot run: " + "; ".join(problems[:MAX_ERRORS]))
        return self

    def run(self, session: Any = None, *, resume: str | None = None, meta: dict[str, Any] | None = None) -> Any:
        """Run the task in `session` (a `Session`; by default one on the spec's model) and return the
        loop's Result. The run stores this spec, so `resume` rebuilds exactly what ran. `meta` is stored
        with the run besides it (a batch names its task)."""
        from .run import run_spec

        return run_spec(self, session, resume=resume, meta=meta)


def _loop_errors(spec: TaskSpec) -> list[str]:
    """What a spec lacks for its loop, beyond the field types (no file system)."""
    errors: list[str] = []
    if spec.loop == "refine":
        if not any(is_set(kinds()[name], value) for name, value in spec.checks.items()):
            errors.append(f"a refine task needs a check: one of {', '.join(kinds())}")
        if spec.out is not None:
            out = Path(spec.out)
            if out.is_absolute() or ".." in out.parts:
                errors.append(f"out: must be a relative path inside the working folder, got {spec.out}")
            elif not out.suffix or spec.out.endswith("/"):
                errors.append(f"out: must name a file (e.g. solution.py), got {spec.out}")
    if spec.loop in ("react", "trials", "plan") and not (spec.db or spec.tools or spec.mcp):
        errors.append(f"a {spec.loop} task needs tools: db (an SQLite file), tools or mcp")
    if any(not ref.strip() for ref in [*spec.tools, *spec.mcp]):
        errors.append("tools, mcp: an empty entry")
    if spec.validate_ is not None and not spec.validate_.strip():
        errors.append("validate: empty")
    if spec.loop == "research" and spec.search == "local" and not spec.corpus:
        errors.append("corpus: required for research with search 'local' (a folder of documents)")
    return errors


def _absolute(path: Path) -> Path:
    """`path` resolved; a link that loops, or that cannot be followed, stays as written (made absolute), so
    the file system check names the problem instead of failing on it."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


def _aliased(options: dict[str, Any]) -> dict[str, Any]:
    return {("validate" if k == "validate_" else k): v for k, v in options.items()}


def _relative(path: Path, folder: Path) -> str:
    try:
        return str(path.relative_to(folder)) or "."
    except ValueError:
        return str(path)


def field_errors(exc: ValidationError) -> list[str]:
    """One line per problem pydantic found: the field, then what is wrong."""
    out = []
    for error in exc.errors():
        # A check kind's value is a field of its own in a file: `regex: ...`, not `checks: regex: ...`.
        where = ".".join(str(p) for p in error["loc"] if p != "checks")
        message = "unknown field" if error["type"] == "extra_forbid" or error["type"] == "extra_forbidden" \
            else str(error["msg"]).removeprefix("Value error, ")
        out.append(f"{where}: {message}" if where else message)
    return out
