"""SIGKILL at every step boundary of a react run with a side-effecting tool, then `resume`: no effect is
lost and none is repeated. The model is a deterministic policy (it pays the next unpaid order it can see),
as a greedy model would be, so a resumed step chooses what the killed one chose."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

CHILD = textwrap.dedent('''
    import json, os, signal, sys
    from reflexa import Model, Session, SQLiteStore, react, tool
    from reflexa.models.base import Generation

    trace, ledger, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])

    @tool(side_effect=True)
    def pay(order_id: int) -> str:
        """Pay one order."""
        with open(ledger, "a") as handle:
            handle.write(f"{order_id}\\n")
        return f"paid order {order_id}"

    class Policy(Model):
        name = "policy"

        def _generate(self, messages, json_schema, max_tokens, temperature):
            seen = messages[-1]["content"]
            todo = [n for n in (1, 2, 3) if f"paid order {n}" not in seen]
            step = ({"tool": "pay", "args": {"order_id": todo[0]}} if todo
                    else {"tool": "final_answer", "args": {"answer": "paid 1, 2 and 3"}})
            text = json.dumps({"action": {"thought": f"next: {step['args']}", **step}})
            return Generation(text, 10, 10)

    seen = 0

    def observer(event, data):
        global seen
        if event == "step":
            seen += 1
            if seen == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    store = SQLiteStore(trace)
    runs = store.runs()
    resume = runs[0].run_id if runs else None
    result = react("Pay orders 1, 2 and 3", [pay], validator=lambda a: None, resume=resume,
                   session=Session(model=Policy(), store=store, observer=observer))
    print(json.dumps({"stop": result.stop_reason.value, "steps": seen}))
''')


def child(tmp: Path, kill_at: int) -> subprocess.CompletedProcess[str]:
    script = tmp / "child.py"
    script.write_text(CHILD)
    return subprocess.run(
        [sys.executable, str(script), str(tmp / "trace.db"), str(tmp / "ledger.txt"), str(kill_at)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_sigkill_at_every_step_boundary_then_resume(tmp_path):
    clean = tmp_path / "clean"
    clean.mkdir()
    full = child(clean, 0)
    assert full.returncode == 0, full.stderr
    boundaries = int(full.stdout.split('"steps": ')[1].split("}")[0])
    assert boundaries >= 8
    kills = lost = repeated = 0
    for kill_at in range(1, boundaries + 1):
        case = tmp_path / f"kill-{kill_at}"
        case.mkdir()
        killed = child(case, kill_at)
        assert killed.returncode == -9, (kill_at, killed.stderr)
        kills += 1
        resumed = child(case, 0)
        assert resumed.returncode == 0, (kill_at, resumed.stderr)
        assert '"stop": "PASSED"' in resumed.stdout, (kill_at, resumed.stdout)
        paid = (case / "ledger.txt").read_text().split() if (case / "ledger.txt").exists() else []
        lost += len({"1", "2", "3"} - set(paid))
        repeated += len(paid) - len(set(paid))
    print(f"SIGKILL at {kills} step boundaries: {lost} effects lost, {repeated} repeated")
    assert (kills, lost, repeated) == (boundaries, 0, 0)
