"""SIGKILL at every step boundary of refine, react, research and plan, then resume: the resumed run reads back
what was stored and redoes nothing of it. Model calls, checks and searches of a killed-and-resumed run add up
to those of an uninterrupted run (a kill at a boundary leaves nothing in flight, so not even one more), and no
side effect is repeated.

A child process runs the loop on a deterministic model (a greedy model's stand-in) that appends each call's
role to a ledger, with a check, a search backend and a side-effecting tool that do the same; an observer
SIGKILLs it after its Nth stored step. `bench/soak/kill_soak.py` runs the same at more points and seeds.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

CHILD = textwrap.dedent('''
    import json, os, signal, sys, threading, time
    from pathlib import Path
    from reflexa import Model, Session, SQLiteStore, plan, react, refine, research, tool
    from reflexa.models.base import Generation
    from reflexa.search import Evidence

    # KILL: N (SIGKILL after the Nth stored step), tS (after S seconds, wherever the run is), 0 (never).
    loop, trace, ledger, kill = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
    kill_at = 0 if kill.startswith("t") else int(kill)
    started = time.monotonic()
    if kill.startswith("t"):
        timer = threading.Timer(float(kill[1:]), lambda: os.kill(os.getpid(), signal.SIGKILL))
        timer.daemon = True
        timer.start()

    def log(what):
        with ledger.open("a") as handle:
            handle.write(what + "\\n")

    LESSON = {"failure_step": "attempt 1", "observed_mismatch": "got BAD", "root_cause": "wrong word",
              "correction": "answer GOOD"}

    class Policy(Model):
        """Deterministic: what it answers depends only on the prompt, as greedy decoding does."""
        name = "policy"
        answers_by_role = True

        def _generate(self, messages, json_schema, max_tokens, temperature, role=None):
            log(f"call:{role}")
            seen = " ".join(m["content"] for m in messages)
            if role == "reflector":
                reply = LESSON
            elif loop == "refine":
                reply = "GOOD" if "got BAD" in seen else "BAD"
            elif loop == "research":
                reply = ({"evidence_used": [1], "quote": "The Eiffel Tower is a wrought-iron lattice tower in Paris",
                          "answer": "The Eiffel Tower is in Paris [1].",
                          "reflection": {"missing": [], "superfluous": []}, "search_queries": []}
                         if "[1]" in seen else
                         {"answer": "[UNCERTAIN: in France]", "search_queries": ["Eiffel Tower city"],
                          "reflection": {"missing": ["city of the Eiffel Tower"], "superfluous": []}})
            else:
                goal = next(line for line in seen.splitlines() if "Pay order" in line)
                todo = [n for n in (1, 2) if str(n) in goal and f"paid order {n}" not in seen]
                step = ({"tool": "pay", "args": {"order_id": todo[0]}} if todo
                        else {"tool": "final_answer", "args": {"answer": "done"}})
                reply = {"action": {"thought": f"next: {step['args']}", **step}}
            text = reply if isinstance(reply, str) else json.dumps(reply)
            return Generation(text, 10, 10)

    @tool(side_effect=True)
    def pay(order_id: int) -> str:
        """Pay one order."""
        log(f"effect:{order_id}")
        return f"paid order {order_id}"

    def check(candidate):
        log("check")
        return None if "GOOD" in candidate else f"got {candidate.strip()}, not the word asked for"

    class Corpus:
        name = "corpus"
        def search(self, query, k):
            log("search")
            return [Evidence("e1", "eiffel.md#1", "Eiffel Tower",
                             "The Eiffel Tower is a wrought-iron lattice tower in Paris.")]

    seen = 0
    def observer(event, data):
        global seen
        if event == "step":
            seen += 1
            if seen == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    store = SQLiteStore(trace)
    runs = [r for r in store.runs(50) if "parent" not in r.meta]
    resume = runs[0].run_id if runs else None
    session = Session(model=Policy(), store=store, observer=observer)
    if loop == "refine":
        result = refine("Reply with the word GOOD.", [check], session=session, resume=resume)
    elif loop == "react":
        result = react("Pay orders 1 and 2", [pay], validator=lambda a: None, session=session, resume=resume)
    elif loop == "research":
        result = research("Where is the Eiffel Tower?", Corpus(), session=session, resume=resume)
    else:
        done = {"regex": "done"}
        tree = {"goal": "pay both", "subgoals": [{"name": "one", "task": "Pay order 1", "check": done},
                                                 {"name": "two", "task": "Pay order 2", "depends_on": ["one"],
                                                  "check": done}]}
        result = plan("Pay orders 1 and 2", [pay], tree=tree, validator=lambda a: None, session=session,
                      resume=resume)
    print(json.dumps({"stop": result.stop_reason.value, "steps": seen, "seconds": time.monotonic() - started}))
''')


def child(tmp: Path, loop: str, kill: int | str) -> subprocess.CompletedProcess[str]:
    """Run CHILD in `tmp` (its trace and ledger live there); `kill` as CHILD reads it."""
    script = tmp / "child.py"
    script.write_text(CHILD)
    return subprocess.run([sys.executable, str(script), loop, str(tmp / "trace.db"), str(tmp / "ledger.txt"),
                           str(kill)], capture_output=True, text=True, timeout=60)


def ledger(case: Path) -> Counter:
    path = case / "ledger.txt"
    return Counter(path.read_text().split()) if path.exists() else Counter()


@pytest.mark.parametrize("loop", ["refine", "react", "research", "plan"])
def test_sigkill_at_every_step_boundary_redoes_nothing_stored(loop, tmp_path):
    clean = tmp_path / "clean"
    clean.mkdir()
    full = child(clean, loop, 0)
    assert full.returncode == 0 and '"stop": "PASSED"' in full.stdout, full.stdout + full.stderr
    boundaries = json.loads(full.stdout)["steps"]
    expected = ledger(clean)
    assert boundaries >= 6 and expected
    extra: dict[int, Counter] = {}
    for kill_at in range(1, boundaries + 1):
        case = tmp_path / f"kill-{kill_at}"
        case.mkdir()
        killed = child(case, loop, kill_at)
        assert killed.returncode == -9, (kill_at, killed.stdout, killed.stderr)
        resumed = child(case, loop, 0)
        assert resumed.returncode == 0 and '"stop": "PASSED"' in resumed.stdout, (kill_at, resumed.stdout,
                                                                                 resumed.stderr)
        done = ledger(case)
        if done != expected:
            extra[kill_at] = done - expected
        assert all(count == 1 for what, count in done.items() if what.startswith("effect:")), (kill_at, done)
    print(f"{loop}: SIGKILL at {boundaries} step boundaries, {len(extra)} redid work: {extra}")
    assert not extra


def test_ctrl_c_during_the_reflector_s_call_then_resume_calls_the_generator_once_per_attempt(tmp_path):
    """Interrupted in the reflector's call, a resumed refine once asked the generator for attempt 1 again
    (3 generator calls for 2 attempts)."""
    from reflexa import ScriptedModel, Session, SQLiteStore, refine
    from reflexa.errors import RunInterrupted

    lesson = {"failure_step": "attempt 1", "observed_mismatch": "got BAD", "root_cause": "wrong word",
              "correction": "answer GOOD"}

    def check(candidate):
        return None if "GOOD" in candidate else "got BAD, not the word asked for"

    def interrupting(call):
        if call.role == "reflector":
            raise KeyboardInterrupt
        return "BAD"

    store = SQLiteStore(tmp_path / "t.db")
    with pytest.raises(RunInterrupted) as stopped:
        refine("Reply with the word.", [check], session=Session(model=ScriptedModel(function=interrupting),
                                                                store=store))
    model = ScriptedModel(generator=["GOOD"], reflector=[lesson])
    result = refine("Reply with the word.", [check], session=Session(model=model, store=store),
                    resume=stopped.value.run_id)
    assert result.passed and model.roles == ["reflector", "generator"]
    calls = [s.role for s in store.steps(result.run_id) if s.kind == "model_call"]
    assert calls == ["generator", "reflector", "generator"]
