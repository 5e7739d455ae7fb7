"""One run's plumbing, below the engine: model calls under the budget, and the trace.

Every step is written to the store before the next one starts, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import aio, structured
from .budget import Meter
from .errors import ConfigError, ModelError
from .models.base import TIME_UP, Completion, Model
from .structured import Message, Schema
from .trace.store import LEASE_TTL, MemoryStore, RunRecord, Store
from .types import UNFINISHED, Budget, Payload, Result, Role, Step, StopReason, Usage, Verdict, payload

Observer = Callable[[str, Any], None]
"""Called with ("run", RunStarted) once the run is open in the store (new or resumed), ("call", role) before
a model call, ("token", text) while a reply streams where the backend can, ("status", text) while a check
or tool runs, ("step", Step) after each step is stored, and ("finish", Result) when the run is closed.
An observer ignores events it does not know. One whose `tokens` attribute is False gets no token events,
and a call made for it alone does not stream (telemetry has no use for them). One with a `reads` set of
event names gets only those (a run does not even send the others to it)."""

LENGTH_REASK_GROWTH = 2
"""A structured reply cut off at max_tokens is asked once more with this many times the tokens, unless it
ends in a loop (`structured.looping`)."""


class RunStarted(str):
    """What ("run", ...) carries: the run's id, as a plain string (what a live view or a batch worker
    needs), with what a tracer needs to open the run's span besides."""

    loop: str
    task: str
    model: str
    started_at: float
    """Wall-clock seconds (time.time()), like a step's started_at."""
    resumed: bool

    def __new__(cls, run_id: str, loop: str, task: str, model: str, started_at: float,
                resumed: bool = False) -> RunStarted:
        started = super().__new__(cls, run_id)
        started.loop, started.task, started.model = loop, task, model
        started.started_at, started.resumed = started_at, resumed
        return started

    @property
    def run_id(self) -> str:
        return str.__str__(self)


FAILED_CALL = "error"
"""A ModelCall's finish_reason when the call itself failed (its `error` then says why): the backend raised
a ModelError, and there is no reply."""


@payload("model_call")
@dataclass(slots=True)
class ModelCall(Payload):
    """One model call; its messages are in the step's `input`. `error` is why its reply did not fit the
    schema, or, with finish_reason FAILED_CALL, why the call failed."""

    text: str
    value: Any = None
    error: str | None = None
    finish_reason: str = "stop"
    model: str | None = None
    """The name of the model that served the call when it is not the run's own (a reflector on its own
    model); None is the run's model."""

    @property
    def failed(self) -> bool:
        """Whether the call itself failed (no reply), rather than its reply not fitting the schema."""
        return self.finish_reason == FAILED_CALL


@payload("checkpoint")
@dataclass(slots=True)
class Checkpoint(Payload):
    """A loop's whole state and the engine's, as plain data: what a resumed run starts from."""

    state: dict[str, Any]
    engine: dict[str, Any] = field(default_factory=dict)


@payload("stop")
@dataclass(slots=True)
class Stop(Payload):
    """How the run ended."""

    stop_reason: StopReason
    error: str | None = None


def _reflector_meta(model: Model | None) -> dict[str, str]:
    """What a run's record says about a reflector on its own model: its name, and its spec for a resume."""
    if model is None:
        return {}
    return {"reflector_model": model.name, **({"reflector_model_spec": model.spec} if model.spec else {})}


class Run:
    """A run in progress: its trace, its budget meter and its model calls."""

    def __init__(self, loop: str, task: str, model: Model, *, budget: Budget, store: Store | None = None,
                 observer: Observer | None = None, meta: dict[str, Any] | None = None,
                 clock: Callable[[], float] = time.monotonic, resume: str | None = None,
                 reflector_model: Model | None = None) -> None:
        """Start a run, or with `resume=RUN_ID` reopen a stored one: its step numbering and the usage its
        stored steps already spent carry on; its steps are in `self.resumed_steps`. `reflector_model`, when
        given, serves the reflector's calls instead of `model`."""
        self.model = model
        self.reflector_model = reflector_model if reflector_model is not model else None
        self.loop, self.task, self.resumed = loop, task, resume is not None
        self.meter = Meter(budget, clock)
        self.store: Store = store if store is not None else MemoryStore()
        self.observer = observer
        reads = getattr(observer, "reads", None)
        # Events nobody reads are not sent: a run traced and not watched reads no "call" or "status".
        self._tell_calls = observer is not None and (reads is None or "call" in reads)
        self._tell_status = observer is not None and (reads is None or "status" in reads)
        self.budget_stop: StopReason | None = None
        self.resumed_steps: list[Step] = []
        self._replay: deque[Step] = deque()
        """A resumed run's stored steps after its last checkpoint, read back in order instead of redone."""
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        """Who holds this run's lease: a second process that tries to resume it meanwhile is refused."""
        self._renew_every = getattr(self.store, "lease_ttl", LEASE_TTL) / 4
        """Seconds between renewals of the lease while the run works: a quarter of the store's TTL."""
        if resume is None:
            self.run_id = uuid.uuid4().hex
            self.next_step = 1
            self.store.start_run(RunRecord(self.run_id, loop, task, started_at=time.time(),
                                           meta={"model": model.name, "budget": budget,
                                                 **({"model_spec": model.spec} if model.spec else {}),
                                                 **_reflector_meta(self.reflector_model), **(meta or {})}))
            self.store.acquire_lease(self.run_id, self.owner, os.getpid())
            self._leased_at = time.monotonic()
            return
        record = self.store.get_run(resume)
        if record is None:
            raise ConfigError(f"no run matches {resume!r}", hint="list runs with `reflexa runs`")
        if record.status == "finished":
            raise ConfigError(f"run {record.run_id[:12]} already finished ({record.stop_reason})")
        if record.loop != loop:
            raise ConfigError(f"run {record.run_id[:12]} is a {record.loop} run, not {loop}")
        self.store.acquire_lease(record.run_id, self.owner, os.getpid())  # RunLeased if another process works on it
        self._leased_at = time.monotonic()
        self.store.reopen_run(record.run_id)
        self.run_id = record.run_id
        self.resumed_steps = self.store.steps(record.run_id)
        self.next_step = (self.resumed_steps[-1].step_id + 1) if self.resumed_steps else 1
        for step in self.resumed_steps:
            if step.role and step.usage.calls:
                self.meter.record(step.role, step.usage)
        # The time budget counts what the stored steps took (model calls, checks, tools), not the time the
        # run lay killed: a resumed run does not start its clock afresh.
        self.meter.started -= sum(max(0.0, s.ended_at - s.started_at) for s in self.resumed_steps)

    def announce(self) -> None:
        """Tell the observer the run is open ("run", RunStarted: the run's id, with its loop, task and
        model): a live view names it before any step, a tracer opens the run's span."""
        if self.observer:
            self.observer("run", RunStarted(self.run_id, self.loop, self.task, self.model.name, time.time(),
                                            self.resumed))

    def replay(self, steps: list[Step]) -> None:
        """Read these stored steps back, in order, instead of redoing them: a resumed run's steps after its
        last checkpoint. A model call among them is answered from the store (`call`), a step the loop would
        write again is not written twice (`record`), and `stored` hands a loop what a step held (a verdict,
        a search's passages). The first step that differs ends the replay: from there the run goes on anew."""
        self._replay = deque(step for step in steps if step.kind not in ("stop", "checkpoint"))

    def stored(self, kind: str) -> Payload | None:
        """The next replayed step's payload when it is of `kind` (it stays to be matched by `record`)."""
        if self._replay and self._replay[0].kind == kind:
            return self._replay[0].payload()
        return None

    def _replayed(self, data: Payload) -> Step | None:
        """The stored step `data` repeats, taken off the replay; None (and the replay ends) if it differs."""
        if not self._replay:
            return None
        step = self._replay[0]
        if step.kind == data.KIND and step.payload() == data:
            self._replay.popleft()
            if self.observer:
                self.observer("step", step)
            return step
        self._replay.clear()
        return None

    def record(self, data: Payload, role: Role | str | None = None, *, input: Any = None,
               usage: Usage | None = None, started_at: float | None = None) -> Step:
        """Store one step, committed before this returns (a step a resumed run replays is not stored twice)."""
        if self._replay and (replayed := self._replayed(data)) is not None:
            return replayed
        now = time.time()
        step = Step(self.run_id, self.next_step, data.KIND, str(role) if role else None, input, data,
                    usage or Usage(), started_at if started_at is not None else now, now)
        # The number is taken before the write: a Ctrl-C landing just after the commit must not leave it
        # free for the stop step that the interrupt then writes (a gap in the numbers is harmless).
        self.next_step += 1
        self.store.add_step(step)
        if time.monotonic() - self._leased_at > self._renew_every:
            # Renewed while the run works: a lease held from another host goes stale after its TTL.
            self.store.acquire_lease(self.run_id, self.owner, os.getpid())
            self._leased_at = time.monotonic()
        if self.observer:
            self.observer("step", step)
        return step

    def status(self, text: str) -> None:
        """Tell the observer what is running now (a check, a tool), for a live view."""
        if self._tell_status:
            self.observer("status", text)  # type: ignore[misc]  # _tell_status: there is one

    def call(self, role: Role, messages: list[Message], *, schema: Schema | None = None,
             max_tokens: int = 512, temperature: float = 0.0, reask: bool = True,
             seed_offset: int = 0) -> Completion | None:
        """One model call, each checked against the budget first. With a schema and `reask`, a reply that
        does not validate is asked once more with the error, and one cut off at max_tokens once more with
        more room (unless it ends in a loop). Returns None when the budget is spent; `budget_stop` then says
        which limit. A sampled call's seed is the model's plus `seed_offset`: a run that samples one prompt
        twice gets two samples, not one twice."""

        def once(msgs: list[Message], tokens: int = max_tokens) -> Completion | None:
            return self._once(role, msgs, schema, tokens, temperature, seed_offset)

        if schema is None or not reask:
            return once(messages)
        first = once(messages)
        if first is not None and first.value is None and first.finish_reason == "length":
            if structured.looping(first.text):  # more room would buy the same loop, longer
                first.error = f"{first.error}; it repeats itself, so it was not asked again"
                return first
            # Cut off, not wrong: the same question with more room, not a lecture about the schema.
            return once(messages, max_tokens * LENGTH_REASK_GROWTH) or first
        if first is None or first.value is not None:
            return first
        return structured.ask(lambda msgs: once(msgs), messages, first=first)

    def _once(self, role: Role, messages: list[Message], schema: Schema | None, max_tokens: int,
              temperature: float, seed_offset: int = 0) -> Completion | None:
        """One model call as `call` makes it: read back when replayed, None when the budget is spent."""
        if self._replay and (stored := self._stored_call(role, messages, schema)) is not None:
            return stored
        if (stop := self.meter.check()) is not None:
            self.budget_stop = stop
            return None
        if self._tell_calls:
            self.observer("call", role)  # type: ignore[misc]  # _tell_calls: there is one
        started = time.time()
        observer = self.observer
        on_token = None
        # Only for an observer that reads tokens: asking a backend to stream can change the call.
        if observer is not None and getattr(observer, "tokens", True):
            on_token = lambda text: observer("token", text)  # noqa: E731
        allowed = self.meter.allowance(max_tokens)
        model = self.reflector_model if role == Role.REFLECTOR and self.reflector_model else self.model
        # The serving model's name goes on the step only when it is not the run's own.
        served_by = model.name if model is not self.model else None
        if seed_offset and temperature > 0:
            model = model.reseeded(model.seed + seed_offset)
        try:
            completion = aio.complete(model, messages, schema=schema, max_tokens=allowed, temperature=temperature,
                                      on_token=on_token, role=str(role), time_left=self.meter.time_left())
        except ModelError as exc:
            # A failed call is a step too, so the trace shows its time and its error (a chat span marked as
            # failed); the run then ends ERROR as before.
            self.record(ModelCall("", None, f"{type(exc).__name__}: {exc}"[:500], FAILED_CALL, served_by), role,
                        input={"messages": messages}, started_at=started)
            raise
        self.meter.record(role, completion.usage)
        self.record(ModelCall(completion.text, completion.value, completion.error, completion.finish_reason,
                              served_by),
                    role, input={"messages": messages}, usage=completion.usage, started_at=started)
        if completion.finish_reason == TIME_UP:
            # The backend ended the call at the time budget's end: the reply is unfinished, and no answer.
            self.budget_stop = StopReason.TIMEOUT
            return None
        if allowed < max_tokens and completion.finish_reason == "length":
            # Cut off at what the token budget had left, not at the caller's max_tokens: the budget ran out,
            # and the reply is no answer (nor worth asking again with more room).
            self.budget_stop = StopReason.BUDGET_TOKENS
            return None
        return completion

    def _stored_call(self, role: Role, messages: list[Message], schema: Schema | None) -> Completion | None:
        """A replayed model call's completion, when the next stored step is this very call (same role, same
        messages); its tokens were counted when the run was reopened. Otherwise the replay ends."""
        step = self._replay[0]
        call = step.payload()
        if (step.kind != ModelCall.KIND or step.role != str(role) or not isinstance(call, ModelCall) or call.failed
                or (step.input or {}).get("messages") != messages):
            self._replay.clear()
            return None
        self._replay.popleft()
        if self.observer:
            self.observer("step", step)
        completion = Completion(call.text, usage=step.usage, finish_reason=call.finish_reason)
        if schema is not None:
            completion.value, completion.error = structured.parse(call.text, schema)
        return completion

    def finish(self, stop_reason: StopReason, *, output: str | None, best: str | None,
               verdict: Verdict | None, iterations: int, error: str | None = None,
               counters: dict[str, Any] | None = None, notes: list[str] | None = None,
               details: dict[str, Any] | None = None) -> Result:
        """Write the stop step and the run's result; the run is then finished (or interrupted)."""
        result = Result(output=output, best=best, verdict=verdict, stop_reason=stop_reason,
                        usage=dict(self.meter.by_role), run_id=self.run_id,
                        iterations=iterations, error=error, counters=counters or {},
                        notes=notes or [], details=details or {})
        try:
            self.record(Stop(stop_reason, error))
            result.steps = self.next_step - 1
            status = UNFINISHED.get(stop_reason, "finished")
            self.store.finish_run(self.run_id, stop_reason, time.time(), result.to_dict(), status=status)
        finally:  # released only now: until the run is closed, another process must not take it over
            self.store.release_lease(self.run_id, self.owner)
        if self.observer:
            self.observer("finish", result)
        return result
