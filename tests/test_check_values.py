"""PythonScriptCheck's `values` mode: a failing assert's call runs once more, traced in the candidate's own
process, and the message shows the lines it ran with the values that changed. The verdict never depends on it."""

import json

import pytest

from reflexa import ScriptedModel, Session, refine
from reflexa.evaluate.checks import CheckContext, PythonScriptCheck
from reflexa.tasks import TaskSpec
from reflexa.tasks.run import checks
from reflexa.types import ErrorCode, StopReason

RUNNING_MAX = ("def running_max(xs):\n    best = 0\n    out = []\n    for x in xs:\n        if x > best:\n"
               "            best = x\n        out.append(best)\n    return out\n")
TEST = "assert running_max([-3, -1, -2]) == [-3, -1, -1]\n"


def test_a_failing_call_shows_the_lines_it_ran_and_the_values_that_changed():
    plain = PythonScriptCheck(TEST).run(RUNNING_MAX, CheckContext())
    traced = PythonScriptCheck(TEST, values=True).run(RUNNING_MAX, CheckContext())
    assert plain.code is traced.code is ErrorCode.TEST_FAILED and plain.pinpointed and traced.pinpointed
    assert "computed on the way" not in plain.message
    assert traced.message.startswith(plain.message)
    assert "What running_max([-3, -1, -2]) computed on the way" in traced.message
    assert "`best = 0` with xs=[-3, -1, -2]" in traced.message  # the first line, with the argument it starts from
    assert "`if x > best:` with x=-3" in traced.message  # only what changed
    assert traced.message.rstrip().endswith("returns [0, 0, 0]")  # the last lines are kept, the middle counted
    assert "more" in traced.message


def test_a_humaneval_check_function_is_traced_and_a_passing_candidate_is_untouched():
    tests = "def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(3) == 9\n\ncheck(square)\n"
    wrong = PythonScriptCheck(tests, values=True).run("def square(n):\n    m = n + n\n    return m\n",
                                                      CheckContext())
    assert "assert candidate(3) == 9 failed: got 6" in wrong.message
    assert "What square(3) computed" in wrong.message and "`return m` with m=6" in wrong.message
    assert PythonScriptCheck(tests, values=True).run("def square(n):\n    return n * n\n", CheckContext()).ok


def test_a_long_loop_is_cut_and_the_trace_stops_it():
    tests = "assert spin(10 ** 6) == 0\n"  # fast enough untraced to be run again even on a busy machine
    candidate = "def spin(n):\n    total = 0\n    for i in range(n):\n        total += 1\n    return total\n"
    signal = PythonScriptCheck(tests, values=True).run(candidate, CheckContext())
    assert signal.code is ErrorCode.TEST_FAILED and "failed: got 1000000" in signal.message
    assert "stopped after 5000 lines" in signal.message
    assert len(signal.message) < 1600


@pytest.mark.parametrize("second_call", [
    "raise ValueError('only once')",
    "import sys; sys.settrace(None); return 7",
    "import sys; sys.exit(3)",
    "import os; os._exit(0)",
    "while True: pass",
])
def test_whatever_the_traced_rerun_does_the_verdict_stands(second_call):
    """A candidate that behaves otherwise when called again (raises, untraces itself, exits, kills its own
    process, loops) still fails the way the first call failed."""
    candidate = ("CALLS = []\n\ndef f():\n    CALLS.append(1)\n    if len(CALLS) > 1:\n"
                 f"        {second_call}\n    return 1\n")
    signal = PythonScriptCheck("assert f() == 2\n", values=True).run(candidate, CheckContext())
    assert not signal.ok and signal.code is ErrorCode.TEST_FAILED
    assert "assert f() == 2 failed: got 1" in signal.message


def test_show_values_in_a_spec_turns_it_on_and_the_revision_sees_the_values():
    spec = {"task": "Write running_max(xs).", "test_code": TEST}
    assert [c.values for c in checks(TaskSpec.parse({**spec, "show_values": True}))] == [True]
    assert [c.values for c in checks(TaskSpec.parse(spec))] == [False]
    fixed = ("def running_max(xs):\n    out = []\n    for x in xs:\n"
             "        out.append(max(out[-1], x) if out else x)\n    return out\n")
    model = ScriptedModel([f"```python\n{RUNNING_MAX}```", f"```python\n{fixed}```"])
    result = refine("Write running_max(xs).", PythonScriptCheck(TEST, values=True), session=Session(model=model))
    assert result.stop_reason is StopReason.PASSED
    assert "`out.append(best)`" in model.prompts[1][-1]["content"]


def test_a_slow_call_is_not_run_again():
    """Run twice, a call that took most of the check's time could take it past its limit."""
    candidate = "import time\n\ndef f():\n    time.sleep(0.6)\n    return 1\n"
    signal = PythonScriptCheck("assert f() == 2\n", values=True).run(candidate, CheckContext())
    assert signal.code is ErrorCode.TEST_FAILED and "failed: got 1" in signal.message
    assert "not run again: it took 0.6 s" in signal.message


def test_show_values_is_a_refine_flag_stored_in_the_spec(tmp_path):
    from typer.testing import CliRunner

    from reflexa import SQLiteStore
    from reflexa.cli.app import app

    (tmp_path / "r.json").write_text(json.dumps([f"```python\n{RUNNING_MAX}```"]))
    done = CliRunner().invoke(app, ["refine", "Write running_max(xs).", "--test-code", TEST, "--show-values",
                                    "--max-attempts", "1", "--model", f"scripted:{tmp_path / 'r.json'}",
                                    "--trace", str(tmp_path / "t.db"), "--verbose"])
    assert done.exit_code != 0 and "Traceback" not in done.output
    assert "computed on the way" in done.output
    assert SQLiteStore(tmp_path / "t.db").runs(1)[0].meta["spec"]["show_values"] is True
