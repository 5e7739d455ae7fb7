"""One run's plumbing shared by every loop: model calls under the budget, and the trace."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from . import structured
from .errors import ConfigError
from .budget import Meter
from .models.base import Completion, Model
from .structured import Message, Schema
from .trace.store import MemoryStore, RunRecord, Store
from .types import Budget, Result, Role, StopReason, Step, Usage, Verdict

Observer = Callable[[str, Any], None]
"""Called with ("call", role) before a model call and ("step", Step) after each step is stored."""


class Run:
    """A run in progress. Every step is written to the store before the next one starts."""

    def __init__(
        self,
        loop: str,
        task: str,
        model: Model,
        *,
        budget: Budget,
        store: Store | None = None,
        observer: Observer | None = None,
        meta: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        resume: str | None = None,
    ) -> None:
        """Start a run, or with `resume=RUN_ID` reopen a stored one: its step numbering and the usage its
        stored steps already spent carry on; its steps are in `self.resumed_steps`."""
        self.model = model
        self.meter = Meter(budget, clock)
        self.store: Store = store if store is not None else MemoryStore()
        self.observer = observer
        self.budget_stop: StopReason | None = None
        self.resumed_steps: list[Step] = []
        if resume is None:
            self.run_id = uuid.uuid4().hex
            self.next_step = 1
            self.store.start_run(RunRecord(self.run_id, loop, task, started_at=time.time(),
                                           meta={"model": model.name, "budget": budget, **(meta or {})}))
            return
        record = self.store.get_run(resume)
        if record is None:
            raise ConfigError(f"no single run matches {resume!r}", hint="list runs with `reflexa runs`")
        if record.status == "finished":
            raise ConfigError(f"run {record.run_id[:12]} already finished ({record.stop_reason})")
        self.run_id = record.run_id
        self.resumed_steps = self.store.steps(record.run_id)
        self.next_step = (self.resumed_steps[-1].step_id + 1) if self.resumed_steps else 1
        for step in self.resumed_steps:
            if step.role and step.usage.calls:
                self.meter.record(step.role, step.usage)

    def record(self, kind: str, role: str | None = None, input: Any = None, output: Any = None,
               usage: Usage | None = None, started_at: float | None = None) -> Step:
        now = time.time()
        step = Step(self.run_id, self.next_step, kind, role, input, output, usage or Usage(),
                    started_at if started_at is not None else now, now)
        self.store.add_step(step)
        self.next_step += 1
        if self.observer:
            self.observer("step", step)
        return step

    def call(self, role: Role, messages: list[Message], *, schema: Schema | None = None,
             max_tokens: int = 512, temperature: float = 0.0, reask: bool = True) -> Completion | None:
        """One model call (plus, with a schema and `reask`, at most one re-ask), each checked against the
        budget first. Returns None when the budget is spent; `budget_stop` then says which limit."""

        def once(msgs: list[Message]) -> Completion | None:
            if (stop := self.meter.check()) is not None:
                self.budget_stop = stop
                return None
            if self.observer:
                self.observer("call", role)
            started = time.time()
            completion = self.model.complete(msgs, schema=schema, max_tokens=self.meter.allowance(max_tokens),
                                             temperature=temperature)
            self.meter.record(role, completion.usage)
            self.record("model_call", role, {"messages": msgs},
                        {"text": completion.text, "value": completion.value, "error": completion.error,
                         "finish_reason": completion.finish_reason}, completion.usage, started)
            return completion

        return structured.ask(once, messages) if schema is not None and reask else once(messages)

    def finish(self, stop_reason: StopReason, *, output: str | None, best: str | None,
               verdict: Verdict | None, iterations: int, error: str | None = None,
               counters: dict[str, Any] | None = None, notes: list[str] | None = None,
               details: dict[str, Any] | None = None) -> Result:
        result = Result(output=output, best=best, verdict=verdict, stop_reason=stop_reason,
                        usage={role: u for role, u in self.meter.by_role.items()}, run_id=self.run_id,
                        iterations=iterations, error=error, counters=counters or {},
                        notes=notes or [], details=details or {})
        self.record("stop", None, None, {"stop_reason": stop_reason, "error": error})
        result.steps = self.next_step - 1
        self.store.finish_run(self.run_id, stop_reason, time.time(), result.to_dict())
        return result
