"""Human approval of side-effecting tool calls.

With an approver, no side-effecting call runs before a decision on it: approve (as asked, or with edited
arguments), deny with a reason, or defer. A deferred call stops the run (AWAITING_APPROVAL) with the call
stored as pending; `reflexa approve RUN_ID` (or `decide`) records the decision and a resume carries it out.
Decisions live in the store under the call's idempotency key, so a kill at any point neither loses a
decision nor runs an approved effect twice (the effect record does that, as for every side effect).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConfigError

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
                                      decision.reason, decision.args).to_dict())


def pending(store: Any, run_ids: set[str]) -> list[Pending]:
    """The calls of these runs that still wait for a decision, oldest first."""
    found = [Pending.read(key, data) for key, data in store.items(NAMESPACE)]
    return sorted((p for p in found if p.status == "pending" and p.run_id in run_ids), key=lambda p: p.at)


def decide(store: Any, call: Pending, decision: Decision) -> Pending:
    """Record a human's decision on a pending call; a call decided already is a ConfigError."""
    if call.status != "pending":
        raise ConfigError(f"the call to {call.tool} was {call.status} already")
    if decision.verdict == "defer":
        return call
    call.status = "approved" if decision.verdict == "approve" else "denied"
    call.reason, call.edited, call.at = decision.reason, decision.args, time.time()
    store.put(NAMESPACE, call.key, call.to_dict())
    return call


FAMILY_SCAN = 1000
"""Runs looked through (newest first, since the run started) for the child runs of a plan or trials run."""


def waiting(store: Any, run_id: str) -> list[Pending]:
    """The calls waiting for a decision in a run or any of its child runs (a plan's sub-goals, trials)."""
    root = store.get_run(run_id)
    family = {run_id}
    if root is not None:
        later = store.runs(FAMILY_SCAN, since=root.started_at)
        grew = True
        while grew:  # children, then their children (a plan's trials)
            more = {r.run_id for r in later if str(r.meta.get("parent")) in family} - family
            family |= more
            grew = bool(more)
    return pending(store, family)
