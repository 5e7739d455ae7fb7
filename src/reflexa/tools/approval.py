"""Human approval of side-effecting tool calls.

With an approver, no side-effecting call runs before a decision on it: approve (as asked, or with edited
arguments), deny with a reason, or defer. A deferred call stops the run (AWAITING_APPROVAL) with the call
stored as pending; `reflexa approve RUN_ID` (or `decide`) records the decision and a resume carries it out.
Decisions live in the store under the call's idempotency key, so a kill at any point neither loses a
decision nor runs an approved effect twice (the effect record does that, as for every side effect).

Every decision is a compare-and-set on that record: of two people deciding at once, the second is refused,
and a decision is changed only on purpose (`reflexa approve RUN_ID --change`) and only until the resumed
run takes it. Edited arguments are checked against the tool's JSON schema when they are entered.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConfigError
from ..structured import schema_error

NAMESPACE = "approvals"
"""The store namespace of decisions, keyed by the call's effect key (run:step:tool:digest)."""


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """One side-effecting call waiting for a decision."""

    run_id: str
    step: int
    tool: str
    args: dict[str, Any]
    description: str = ""
    schema: dict[str, Any] = field(default_factory=dict)
    """The tool's arguments as a JSON schema: edited arguments are checked against it when entered."""


def invalid_args(schema: dict[str, Any], args: dict[str, Any]) -> str | None:
    """Why `args` do not fit a tool's JSON schema (the most telling error), or None when they do."""
    return schema_error(schema, args) if schema else None


@dataclass(frozen=True, slots=True)
class Decision:
    """A human's answer to an ApprovalRequest."""

    verdict: Literal["approve", "deny", "defer"]
    reason: str = ""
    """Why a call is denied: the agent sees it as the PERMISSION signal's message."""
    args: dict[str, Any] | None = None
    """Edited arguments an approved call runs with instead of the proposed ones."""

    @classmethod
    def approve(cls, args: dict[str, Any] | None = None) -> Decision:
        return cls("approve", args=args)

    @classmethod
    def deny(cls, reason: str = "") -> Decision:
        return cls("deny", reason=reason or "denied by a human")

    @classmethod
    def defer(cls) -> Decision:
        return cls("defer")


Approver = Callable[[ApprovalRequest], Decision]
"""Decides on a side-effecting call before it runs; `defer` stops the run until `reflexa approve`."""


def defer(request: ApprovalRequest) -> Decision:
    """The approver of `--approve defer`: every side-effecting call waits for `reflexa approve`."""
    return Decision.defer()


class AwaitingApproval(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Raised by a tool session when a call is deferred: the loop stops AWAITING_APPROVAL and a resume
    takes the same call again, which then finds its decision."""

    def __init__(self, request: ApprovalRequest) -> None:
        super().__init__(f"{request.tool} waits for approval: reflexa approve {request.run_id[:12]}")
        self.request = request


@dataclass(slots=True)
class Pending:
    """A stored approval record: the call, and the decision once there is one."""

    key: str
    run_id: str
    step: int
    tool: str
    args: dict[str, Any]
    status: Literal["pending", "approved", "denied"] = "pending"
    reason: str = ""
    edited: dict[str, Any] | None = None
    at: float = field(default_factory=time.time)
    schema: dict[str, Any] = field(default_factory=dict)
    used: bool = False
    """Set when the resumed run takes the decision: from then on it can no longer be changed."""

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__ if name != "key"}

    @classmethod
    def read(cls, key: str, data: dict[str, Any]) -> Pending:
        return cls(key, **{name: data[name] for name in cls.__slots__ if name != "key" and name in data})

    def decision(self) -> Decision | None:
        if self.status == "approved":
            return Decision.approve(self.edited)
        if self.status == "denied":
            return Decision.deny(self.reason)
        return None


def stored(store: Any, key: str) -> Pending | None:
    """The approval record of a call, or None."""
    data = store.get(NAMESPACE, key)
    return Pending.read(key, data) if data is not None else None


def record(store: Any, key: str, request: ApprovalRequest, decision: Decision) -> None:
    """Store a call with its decision (pending for a deferral) before anything else happens to it."""
    status: Literal["pending", "approved", "denied"] = (
        "approved" if decision.verdict == "approve" else "denied" if decision.verdict == "deny" else "pending")
    store.put(NAMESPACE, key, Pending(key, request.run_id, request.step, request.tool, request.args, status,
                                      decision.reason, decision.args, schema=request.schema,
                                      used=status != "pending").to_dict())


def take(store: Any, key: str) -> Pending | None:
    """The decided record of a call, marked used in the same step (so no correction lands after the run
    has acted on it); None when there is no record or no decision yet."""
    def used(data: dict[str, Any]) -> dict[str, Any] | None:
        return {**data, "used": True} if data.get("status") != "pending" else None

    if (data := store.update(NAMESPACE, key, used)) is not None:
        return Pending.read(key, data)
    return stored(store, key)


def pending(store: Any, run_ids: set[str], *, decided: bool = False) -> list[Pending]:
    """The calls of these runs that still wait for a decision, oldest first; with `decided`, those decided
    but not yet taken."""
    found = [Pending.read(key, data) for key, data in store.items(NAMESPACE) if data.get("run_id") in run_ids]
    return sorted((p for p in found if (p.status != "pending" and not p.used if decided else p.status == "pending")),
                  key=lambda p: p.at)


def decide(store: Any, call: Pending, decision: Decision, *, change: bool = False) -> Pending:
    """Record a human's decision on a call, as one compare-and-set on its stored record. Without `change`
    the call must still be pending (the second of two racing decisions is refused); with it, a decision is
    replaced until the resumed run has taken it. Edited arguments that do not fit the tool's schema are
    refused before anything is written. Every refusal is a ConfigError."""
    if decision.verdict == "defer":
        return call
    if decision.args is not None and (why := invalid_args(call.schema, decision.args)):
        raise ConfigError(f"the edited arguments do not fit {call.tool}: {why}")
    refused: list[str] = []

    def decided(data: dict[str, Any]) -> dict[str, Any] | None:
        now = Pending.read(call.key, data)
        if now.used:
            refused.append(f"the call to {call.tool} was {now.status} and the run has carried that out")
        elif now.status != "pending" and not change:
            refused.append(f"the call to {call.tool} was {now.status} already (--change corrects a decision "
                           "until the run resumes)")
        if refused:
            return None
        now.status = "approved" if decision.verdict == "approve" else "denied"
        now.reason, now.edited, now.at = decision.reason, decision.args, time.time()
        return now.to_dict()

    written = store.update(NAMESPACE, call.key, decided)
    if written is None:
        raise ConfigError(refused[0] if refused else f"the call to {call.tool} has no stored record")
    return Pending.read(call.key, written)


FAMILY_SCAN = 1000
"""Runs looked through (newest first, since the run started) for the child runs of a plan or trials run."""


def waiting(store: Any, run_id: str, *, decided: bool = False) -> list[Pending]:
    """The calls waiting for a decision in a run or any of its child runs (a plan's sub-goals, trials);
    with `decided`, instead the calls decided but not yet taken by a resumed run (those `--change` may
    correct)."""
    root = store.get_run(run_id)
    family = {run_id}
    if root is not None:
        later = store.runs(FAMILY_SCAN, since=root.started_at)
        grew = True
        while grew:  # children, then their children (a plan's trials)
            more = {r.run_id for r in later if str(r.meta.get("parent")) in family} - family
            family |= more
            grew = bool(more)
    return pending(store, family, decided=decided)
