"""The option groups every run command shares (model, budget, output, trace), declared once.

A run command is a function from its own flags to a `TaskSpec`; `run_command` adds the shared groups to
its flags, so `reflexa refine --help` and `reflexa plan --help` list the same budget flags with the same
words, and every command runs its spec the same way (`cli/run.py`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any

import typer

from .output import Output


def path_arg(value: str | Path) -> Path:
    """A path typed on the command line (typer's `parser=`), refused when empty: pathlib reads "" as ".", so
    `--db ""` would otherwise name the current folder."""
    if isinstance(value, Path):
        return value
    if not value.strip():
        raise typer.BadParameter("is empty; give a path")
    return Path(value)


def option(metavar: str | None, help: str, *, names: tuple[str, ...] = (), path: bool = False,
           **limits: Any) -> Any:
    """A typer option whose help says its default (none is shown after it); `path` parses a non-empty path."""
    return typer.Option(*names, metavar=metavar, help=help, show_default=False, parser=path_arg if path else None,
                        **limits)


ModelOpt = Annotated[str | None, typer.Option(
    "--model", "-m", metavar="SPEC", show_default=False, help="Model spec: local (Qwen2.5-Coder-0.5B), "
    "local:qwen1.5b, local:PATH.gguf, openai:MODEL, openai:http://HOST:PORT/v1#MODEL, anthropic:MODEL, "
    "scripted:FILE. Default: $REFLEXA_MODEL, reflexa.toml, then the loop's own: local:qwen1.5b for react, "
    "trials and plan, local for refine and research.")]
ReflectorOpt = Annotated[str | None, typer.Option(
    "--reflector-model", metavar="SPEC", show_default=False, help="Model spec for the reflector's calls alone (e.g. "
    "local:qwen1.5b); '' for the run's model. Default: $REFLEXA_REFLECTOR_MODEL, reflexa.toml, else the "
    "run's model.")]
TraceOpt = Annotated[str | None, typer.Option(
    "--trace", metavar="STORE", show_default=False, help="Trace store: a SQLite file, or a postgresql:// URL (pip "
    "install 'reflexa[postgres]'). Default: $REFLEXA_TRACE, else trace.db in the user data folder.")]
# --- the output flags: one declaration, used by every command that has them --------------------------------
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the output as one JSON document (no live view or "
                                       "progress bar).")]
JsonlOpt = Annotated[bool, typer.Option("--jsonl", help="Print a JSON line per stored step, then the result.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No live view; one summary line at the end.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Show every model call.")]


# --- the budget flags: one declaration; each command says whose budget it sets ------------------------------
def budget_flags(whose: str) -> dict[str, Any]:
    """The options --max-tokens, --max-calls, --max-seconds and --max-reflections (the spec's BUDGET_FIELDS),
    their help naming `whose` budget they set ("the run", "each task that sets none")."""
    return {
        "max_tokens": Annotated[int | None, option("N", f"Token budget of {whose} (input + output, every call).",
                                                   min=1)],
        "max_calls": Annotated[int | None, option("N", f"Model-call budget of {whose}.", min=1)],
        "max_seconds": Annotated[float | None, option("SECONDS", f"Wall-clock budget of {whose}; it ends a model "
                                                      "call under way.", min=0.1)],
        "max_reflections": Annotated[int | None, option("N", f"Reflector calls of {whose} at most (default 2).",
                                                        min=0)],
    }


def with_flags(command: Callable[..., Any], flags: dict[str, Any], *, into: str) -> Callable[..., Any]:
    """`command` with `flags` (name -> an Annotated option, each defaulting to None) after its own parameters;
    their values reach it as one dict, its parameter `into`. How a group of flags is declared once and given
    to every command that has it."""
    own = [p.replace(annotation=_evaluated(p.annotation, command))
           for p in inspect.signature(command).parameters.values() if p.name != into]
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)
             for name, annotation in flags.items()]

    @functools.wraps(command)
    def wrapped(**given: Any) -> Any:
        group = {name: given.pop(name) for name in flags}
        return command(**given, **{into: group})

    wrapped.__signature__ = inspect.Signature([*own, *added])  # type: ignore[attr-defined]
    wrapped.__annotations__ = {p.name: p.annotation for p in [*own, *added]}
    del wrapped.__wrapped__  # typer reads the signature above, not command's
    return wrapped


@dataclass(slots=True)
class Shared:
    """The shared option groups of one run command, as typed."""

    model: str | None = None
    reflector_model: str | None = None
    max_tokens: int | None = None
    max_calls: int | None = None
    max_seconds: float | None = None
    max_reflections: int | None = None
    reflect: bool | None = None
    experience: bool | None = None
    """None: the loop's default (EXPERIENCE_DEFAULT)."""
    json: bool = False
    jsonl: bool = False
    quiet: bool = False
    verbose: bool = False
    trace: str | None = None
    save_spec: Path | None = None

    def overrides(self) -> dict[str, Any]:
        """What these options set on a spec (None: leave the spec's own value)."""
        return {"model": self.model, "reflector_model": self.reflector_model, "max_tokens": self.max_tokens,
                "max_calls": self.max_calls, "max_seconds": self.max_seconds,
                "max_reflections": self.max_reflections, "reflect": self.reflect}

    def output(self) -> Output:
        """The output flags, checked: --json and --jsonl exclude each other."""
        from ..errors import ConfigError

        if self.json and self.jsonl:
            raise ConfigError("--json and --jsonl exclude each other",
                              hint="--json prints one document at the end, --jsonl a line per step")
        return Output(json=self.json, jsonl=self.jsonl, quiet=self.quiet, verbose=self.verbose)


_SHARED_OPTIONS: dict[str, Any] = {
    "model": ModelOpt,
    "reflector_model": ReflectorOpt,
    **budget_flags("the run"),
    "reflect": Annotated[bool | None, typer.Option("--reflect/--no-reflect", show_default=False,
                         help="Turn a failure into a lesson with the reflector (default); off, retries see the "
                              "raw signals.")],
    "experience": Annotated[bool | None, typer.Option("--experience/--no-experience", show_default=False,
                            help="Reuse and record repairs in the experience library (default: on for react, "
                                 "trials and plan).")],
    "json": JsonOpt,
    "jsonl": JsonlOpt,
    "quiet": QuietOpt,
    "verbose": VerboseOpt,
    "trace": TraceOpt,
    "save_spec": Annotated[Path | None, typer.Option(
        "--save-spec", parser=path_arg, metavar="FILE", show_default=False,
        help="Write the task as a spec file (JSON) and stop; `reflexa run FILE` runs it.")],
}
assert set(_SHARED_OPTIONS) == {f.name for f in fields(Shared)}


def _evaluated(annotation: Any, function: Callable[..., Any]) -> Any:
    """A parameter's annotation as an object (this package writes annotations as strings)."""
    return eval(annotation, function.__globals__) if isinstance(annotation, str) else annotation  # noqa: S307


def run_command(build: Callable[..., Any], run: Callable[[Any, Shared], None]) -> Callable[..., None]:
    """A typer command from `build` (the command's own flags -> a TaskSpec, or what `run` takes) and `run`
    (how it runs with the shared options). The command's flags are `build`'s, then the shared groups."""
    own = [p.replace(annotation=_evaluated(p.annotation, build)) for p in inspect.signature(build).parameters.values()]
    defaults = {f.name: f.default for f in fields(Shared)}
    shared = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=defaults[name], annotation=option)
              for name, option in _SHARED_OPTIONS.items()]

    @functools.wraps(build)
    def command(**flags: Any) -> None:
        options = Shared(**{name: flags.pop(name) for name in _SHARED_OPTIONS})
        run(functools.partial(build, **flags), options)

    command.__signature__ = inspect.Signature([*own, *shared])  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in [*own, *shared]}
    del command.__wrapped__  # typer reads the signature above, not build's
    return command
