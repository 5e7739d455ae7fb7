"""Approval across kills: a react run under `--approve defer` pays two orders, each call waiting for a decision.
SIGKILL after every stored step of every invocation (the first run, and each resume after an approval), then
go on (approve what waits, resume): each approved effect happens exactly once, and the run ends."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

CHILD = textwrap.dedent('''
    import json, os, signal, sys
    from pathlib import Path
    from reflexa import Model, Session, SQLiteStore, react, tool
    from reflexa.models.base import Generation
    from reflexa.tools.approval import defer

    trace, ledger, kill_at = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])

    class Policy(Model):
        """Deterministic: pays the orders its prompt does not show as paid, then answers."""
        name = "policy"

        def _generate(self, messages, json_schema, max_tokens, temperature, role=None):
            seen = " ".join(m["content"] for m in messages)
            todo = [n for n in (1, 2) if f"paid order {n}" not in seen]
            step = ({"tool": "pay", "args": {"order_id": todo[0]}} if todo
                    else {"tool": "final_answer", "args": {"answer": "done"}})
            return Generation(json.dumps({"action": {"thought": f"next {todo}", **step}}), 10, 10)

    @tool(side_effect=True)
    def pay(order_id: int) -> str:
        """Pay one order."""
        with ledger.open("a") as handle:
            handle.write(f"effect:{order_id}\\n")
        return f"paid order {order_id}"

    seen = 0
    def observer(event, data):
        global seen
        if event == "step":
            seen += 1
            if seen == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    store = SQLiteStore(trace)
    runs = store.runs(1)
    session = Session(model=Policy(), store=store, observer=observer, approver=defer)
    result = react("Pay orders 1 and 2", [pay], session=session, resume=runs[0].run_id if runs else None)
    print(json.dumps({"stop": result.stop_reason.value, "steps": seen}))
''')


def invoke(case: Path, kill_at: int) -> subprocess.CompletedProcess[str]:
    script = case / "child.py"
    script.write_text(CHILD)
    return subprocess.run([sys.executable, str(script), str(case / "trace.db"), str(case / "ledger.txt"),
                           str(kill_at)], capture_output=True, text=True, timeout=60)


def until_done(case: Path, kill: tuple[int, int] | None) -> list[tuple[str, int]]:
    """Invoke, approve what waits, resume, until the run ends; `kill` = (invocation, Nth step) to SIGKILL at.
    Returns each invocation's outcome ("killed" or its stop reason) and the steps it stored."""
    from reflexa import Decision, SQLiteStore
    from reflexa.tools.approval import decide, waiting

    outcomes: list[tuple[str, int]] = []
    for number in range(12):
        done = invoke(case, kill[1] if kill is not None and kill[0] == number else 0)
        assert done.returncode in (0, -9), done.stderr
        said = json.loads(done.stdout) if done.returncode == 0 else {"stop": "killed", "steps": 0}
        outcomes.append((said["stop"], said["steps"]))
        store = SQLiteStore(case / "trace.db")
        record = store.runs(1)[0]
        if record.status == "finished":
            return outcomes
        for call in waiting(store, record.run_id):
            decide(store, call, Decision.approve())
    raise AssertionError(f"the run never ended: {outcomes}")


def effects(case: Path) -> Counter:
    path = case / "ledger.txt"
    return Counter(path.read_text().split()) if path.exists() else Counter()


def test_sigkill_at_every_boundary_of_every_invocation_repeats_no_approved_effect(tmp_path):
    clean = tmp_path / "clean"
    clean.mkdir()
    outcomes = until_done(clean, None)
    assert [stop for stop, _ in outcomes] == ["AWAITING_APPROVAL", "AWAITING_APPROVAL", "ANSWERED_UNVERIFIED"]
    assert effects(clean) == Counter({"effect:1": 1, "effect:2": 1})
    for invocation, (_, steps) in enumerate(outcomes):
        for kill_at in range(1, steps + 1):  # after each step the invocation stores, its stop included
            case = tmp_path / f"kill-{invocation}-{kill_at}"
            case.mkdir()
            seen = until_done(case, (invocation, kill_at))
            assert seen[invocation][0] == "killed" and seen[-1][0] == "ANSWERED_UNVERIFIED", (invocation, kill_at,
                                                                                            seen)
            assert effects(case) == Counter({"effect:1": 1, "effect:2": 1}), (invocation, kill_at, seen)


@pytest.mark.parametrize("decision", ["deny"])
def test_a_denied_call_never_runs_and_the_run_goes_on(tmp_path, decision):
    from reflexa import Decision, SQLiteStore
    from reflexa.tools.approval import decide, waiting

    invoke(tmp_path, 0)
    store = SQLiteStore(tmp_path / "trace.db")
    [call] = waiting(store, store.runs(1)[0].run_id)
    decide(store, call, Decision.deny("order 1 is disputed"))
    resumed = invoke(tmp_path, 0)
    assert resumed.returncode == 0, resumed.stderr
    assert "effect:1" not in effects(tmp_path)
    steps = [s.output for s in store.steps(store.runs(1)[0].run_id) if s.kind == "react"]
    assert any("order 1 is disputed" in json.dumps(output) for output in steps)
