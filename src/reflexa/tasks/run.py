"""The one place a task becomes a loop call: build the spec's parts (checks, tools, search, validator) and
call its loop with them. Every face comes through here, so a resumed run is rebuilt exactly as it ran."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..evaluate.answer import Validator, answer_validator
from ..evaluate.checks import Check, CheckContext, preluded
from ..loops import Session
from ..search.base import SearchBackend
from ..tools.approval import Approver, defer
from ..tools.registry import ToolRegistry
from ..types import Budget, Lesson, Result, Signal
from .inputs import given_tree
from .kinds import build
from .spec import TaskSpec

log = logging.getLogger(__name__)
Runner = Callable[[TaskSpec, Session, str | None, dict[str, Any]], Result]


def run_spec(spec: TaskSpec, session: Session | None = None, *, resume: str | None = None,
             meta: dict[str, Any] | None = None) -> Result:
    """Run `spec` in `session` (by default a session on the spec's model and reflector) and return its
    Result; the run's record keeps the spec."""
    spec = spec.checked()
    session = session or spec_session(spec)
    if spec.loop in ("react", "trials", "plan"):
        session = replace(session, approver=approver(spec, session))
    if spec.seed is not None:
        session = replace(session, model=session.resolved_model(spec.loop).reseeded(spec.seed))
    return RUNNERS[spec.loop](spec, session, resume, {"spec": _pinned(spec, session).dump(), **(meta or {})})


def _pinned(spec: TaskSpec, session: Session) -> TaskSpec:
    """The spec as it runs in `session`: the models it left to the configuration named, so a resume runs on
    the same ones whatever the configuration says by then."""
    model = session.resolved_model(spec.loop)
    reflector = session.reflector_model if session.reflector_model is not model else None
    pins = {"model": model.spec if spec.model is None else None,
            "reflector_model": (reflector.spec if reflector is not None else "") if spec.reflector_model is None
            else None}
    return spec.with_options(**pins)


def spec_session(spec: TaskSpec) -> Session:
    """A session on the spec's model (the configured one when it names none) and its reflector."""
    from ..models.spec import resolve, resolve_reflector

    model = resolve(spec.model, loop=spec.loop)
    return Session(model=model, reflector_model=resolve_reflector(spec.reflector_model, model))


# --- the parts a spec names -------------------------------------------------------------------------------

def checks(spec: TaskSpec, values: dict[str, Any] | None = None) -> list[Check]:
    """The checks of a refine spec (or those `values` name, by check kind: an eval's score), each run on the
    spec's prelude and the candidate, in a sandbox with the spec's timeout."""
    found = build(spec.checks if values is None else values, spec.check_setup())
    return [Preluded(check, spec.prelude) for check in found] if spec.prelude else found


class Preluded:
    """`inner`, run on `prelude` + the candidate: a task's stub or imports in front of the reply."""

    def __init__(self, inner: Check, prelude: str) -> None:
        self.inner, self.prelude = inner, prelude
        self.name, self.subjective = inner.name, inner.subjective

    def run(self, candidate: str, context: CheckContext) -> Signal:
        return self.inner.run(preluded(self.prelude, candidate), context)


@contextmanager
def tools(spec: TaskSpec) -> Iterator[ToolRegistry]:
    """The spec's tools, for the length of a run: the bundled SQL toolset on its database, the user's own
    tools, and each MCP server's (started here and stopped when the run ends)."""
    from ..tools.load import load_tools
    from ..tools.mcp import MCPClient
    from ..tools.sql import sql_tools

    workdir = Path(spec.workdir or ".")
    found = [*(sql_tools(db, write=spec.write) if (db := spec.path("db")) else []), *load_tools(spec.tools, workdir)]
    with ExitStack() as servers:
        for target in spec.mcp:
            server = servers.enter_context(MCPClient(target, cwd=workdir))
            found += server.tools()
            for skipped in server.skipped:
                log.warning("MCP server %s: tool %s", server.name, skipped)
        yield ToolRegistry(found)


def approver(spec: TaskSpec, session: Session) -> Approver | None:
    """Who decides on side-effecting calls: the session's approver, else the spec's `approve`."""
    if session.approver is not None or spec.approve == "off":
        return session.approver
    if spec.approve == "defer":
        return defer
    raise ConfigError("approve 'ask' needs someone to ask: the command line asks in the terminal",
                      hint="from Python, pass Session(approver=...); or use approve 'defer'")


def validator(spec: TaskSpec) -> Validator | None:
    """The final answer's check (`validate`), or None."""
    if spec.validate_ is None:
        return None
    return answer_validator(spec.validate_, spec.path("db"), cwd=Path(spec.workdir) if spec.workdir else None)


def search_backend(spec: TaskSpec) -> SearchBackend:
    """The spec's search backend; a local corpus is indexed now (only changed files are read again)."""
    if spec.search == "local":
        from ..search import LocalCorpus

        corpus = spec.path("corpus") or Path()
        local = LocalCorpus.for_folder(corpus)
        local.index(corpus)
        return local
    from ..search.web import backend

    return backend(spec.search)


# --- one runner per loop ----------------------------------------------------------------------------------

def _refine(spec: TaskSpec, session: Session, resume: str | None, meta: dict[str, Any]) -> Result:
    from ..loops.refine import MAX_ATTEMPTS, refine

    return refine(spec.task, checks(spec), session=session, budget=spec.budget,
                  max_attempts=spec.max_attempts or MAX_ATTEMPTS, context=spec.context, temperature=spec.temperature,
                  repairs=spec.repairs, max_reply_tokens=spec.max_reply_tokens, select=spec.select,
                  prelude=spec.prelude or "", meta=meta, resume=resume)


def _react(spec: TaskSpec, session: Session, resume: str | None, meta: dict[str, Any]) -> Result:
    with tools(spec) as registry:
        return _react_with(registry, spec, session, resume, meta)


def _react_with(registry: ToolRegistry, spec: TaskSpec, session: Session, resume: str | None,
                meta: dict[str, Any], lessons: Sequence[Lesson] = (), budget: Budget | None = None,
                sampling: tuple[float, int] = (0.0, 0)) -> Result:
    from ..loops.react import MAX_STEPS, react

    return react(spec.task, registry, session=session, budget=budget or spec.budget, validator=validator(spec),
                 max_steps=spec.max_steps or MAX_STEPS, lessons=lessons, temperature=sampling[0], seed=sampling[1],
                 meta=meta, resume=resume)


def _trials(spec: TaskSpec, session: Session, resume: str | None, meta: dict[str, Any]) -> Result:
    from ..loops.trials import MAX_TRIALS, TrialCall, trials

    labels = {key: value for key, value in meta.items() if key != "spec"}  # a trial is no trials run to resume
    with tools(spec) as registry:  # one set of tools (one start of each MCP server) for every trial

        def trial(call: TrialCall) -> Result:
            return _react_with(registry, spec, session, call.resume, {**labels, **call.meta}, call.lessons,
                               call.budget, (call.temperature, call.seed))

        return trials(spec.task, trial, session=session, max_trials=spec.max_trials or MAX_TRIALS,
                      budget=spec.budget, meta=meta, resume=resume)


def _research(spec: TaskSpec, session: Session, resume: str | None, meta: dict[str, Any]) -> Result:
    from ..loops.research import ROUNDS, research
    from ..search import SearchCache

    return research(spec.task, search_backend(spec), session=session, budget=spec.budget,
                    max_rounds=spec.max_rounds or ROUNDS, cache=SearchCache(session.store), meta=meta,
                    resume=resume)


def _plan(spec: TaskSpec, session: Session, resume: str | None, meta: dict[str, Any]) -> Result:
    from ..loops.plan import plan
    from ..loops.react import MAX_STEPS

    search = search_backend(spec) if spec.corpus or spec.search != "local" else None
    with tools(spec) as registry:
        return plan(spec.task, registry, session=session, budget=spec.budget, tree=given_tree(spec),
                    max_steps=spec.max_steps or MAX_STEPS, validator=validator(spec), facts=spec.facts,
                    db=spec.path("db"), search=search, replan=spec.replan, meta=meta, resume=resume)


RUNNERS: dict[str, Runner] = {"refine": _refine, "react": _react, "trials": _trials, "research": _research,
                              "plan": _plan}
