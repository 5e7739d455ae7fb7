import sys
from pathlib import Path

import pytest

from reflexa import ScriptedModel
from reflexa.errors import ConfigError
from reflexa.evaluate.checks import (
    CheckContext,
    CommandCheck,
    JsonSchemaCheck,
    LLMJudge,
    PytestCheck,
    PythonScriptCheck,
    RegexCheck,
    pytest_score,
    run_checks,
)
from reflexa.runtime import Run
from reflexa.types import Budget, ErrorCode, Status

EXAMPLE = Path(__file__).parent.parent / "examples" / "is_prime"
GOOD = "def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))\n"


def test_pytest_check_passes_a_correct_candidate():
    signal = PytestCheck(EXAMPLE / "test_solution.py").run(GOOD, CheckContext())
    assert signal.ok and signal.score == 1.0


def test_a_candidate_holding_a_lone_surrogate_is_judged_not_a_crash():
    """What a JSON reply's "\\ud800" decodes to: UTF-8 cannot encode it, and the write must not end the run."""
    signal = PythonScriptCheck("assert f() is not None").run("def f():\n    return '\ud800'\n", CheckContext())
    assert signal.ok


def test_pytest_check_scores_partial_failures():
    signal = PytestCheck(EXAMPLE / "test_solution.py").run("def is_prime(n):\n    return n > 1\n", CheckContext())
    assert not signal.ok and signal.code is ErrorCode.TEST_FAILED
    assert signal.score == pytest.approx(1 / 3)
    assert "2 of 3 tests failed" in signal.message


def test_pytest_check_reports_a_broken_module_as_wrong_direction():
    signal = PytestCheck(EXAMPLE / "test_solution.py").run("def is_prime(n) return", CheckContext())
    assert not signal.ok and signal.score == 0.0


def test_pytest_check_uses_the_named_module():
    signal = PytestCheck(EXAMPLE / "test_solution.py", module="other").run(GOOD, CheckContext())
    assert not signal.ok  # the tests import `solution`, which does not exist


def test_pytest_score_reads_the_closing_line():
    assert pytest_score("== 3 passed, 1 failed, 2 errors in 0.1s ==") == (3, 6)
    assert pytest_score("nothing") is None


def test_command_check_runs_in_a_scratch_copy(tmp_path, monkeypatch):
    (tmp_path / "data.txt").write_text("hello")
    check = CommandCheck(
        f"{sys.executable} answer.py > result.txt && grep -q hello data.txt && cat result.txt",
        out="answer.py",
        workdir=tmp_path,
    )
    assert check.run("print('hi')", CheckContext()).ok
    failing = check.run("raise SystemExit(3)", CheckContext())
    assert not failing.ok and failing.code is ErrorCode.COMMAND_FAILED and "exited" in failing.message
    assert not (tmp_path / "answer.py").exists() and not (tmp_path / "result.txt").exists()


def test_json_schema_check():
    check = JsonSchemaCheck({"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}})
    assert check.run('{"name": "x"}', CheckContext()).ok
    missing = check.run('{"other": 1}', CheckContext())
    assert missing.code is ErrorCode.SCHEMA and "name" in missing.message
    assert check.run("not json", CheckContext()).score == 0.0
    # The candidate must be a JSON document: JSON inside prose, or followed by more, is not one.
    assert not check.run('{"name": "Ada"} // the user record', CheckContext()).ok
    assert not check.run('{"name": 1}\n{"name": "x"}', CheckContext()).ok
    assert check.run('```json\n{"name": "x"}\n```', CheckContext()).ok
    with pytest.raises(ConfigError, match="not a valid JSON schema"):
        JsonSchemaCheck({"type": "nonsense"})


def test_regex_check():
    assert RegexCheck(r"def \w+\(").run("def f(): pass", CheckContext()).ok
    assert RegexCheck(r"import os").run("print(1)", CheckContext()).code is ErrorCode.NO_MATCH
    assert not RegexCheck(r"eval\(", must_match=False).run("eval('1')", CheckContext()).ok


def test_a_backtracking_regex_ends_as_a_timeout_wherever_a_pattern_is_given():
    """`(a|aa)+$` on 60 characters runs for hours in `re`: in a check, an answer validator and an eval score
    it ends as a failing TIMEOUT instead (each search is bounded; run in a thread so a hang fails the test)."""
    import threading

    from reflexa.eval.dataset import EvalTask, Score
    from reflexa.eval.score import scored
    from reflexa.evaluate.answer import regex_validator
    from reflexa.tasks import TaskSpec

    text, pattern = "a" * 60 + "!", r"(a|aa)+$"
    got: dict[str, object] = {}

    def run() -> None:
        got["check"] = RegexCheck(pattern).run(text, CheckContext())
        got["absent"] = RegexCheck(pattern, must_match=False).run(text, CheckContext())
        got["validator"] = regex_validator(pattern)(text)
        task = EvalTask("t", TaskSpec.parse({"task": "say a", "regex": "a"}), Score.model_validate({"regex": pattern}))
        got["score"] = scored(task, text, True)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(120)
    assert not worker.is_alive(), "a search ran past its limit"
    assert got["check"].code is ErrorCode.TIMEOUT and not got["check"].ok
    assert got["absent"].code is ErrorCode.TIMEOUT  # absence is not shown either
    assert "took longer than" in str(got["validator"]) and got["score"] is False


def test_empty_candidate_skips_the_checks():
    verdict = run_checks([RegexCheck("x")], "  \n", CheckContext())
    assert verdict.status is Status.FAIL and verdict.signals[0].code is ErrorCode.EMPTY


@pytest.mark.parametrize(
    "status,expected", [(" pass ", Status.PASS), ("needs improvement", Status.NEEDS_IMPROVEMENT), ("Fail", Status.FAIL)]
)
def test_llm_judge_is_subjective_and_parses_status_blindly(status, expected):
    model = ScriptedModel([{"status": status, "reason": "because"}])
    run = Run("test", "task", model, budget=Budget())
    verdict = run_checks([LLMJudge()], "an answer", CheckContext("task", ask=run.call))
    assert verdict.status is expected and verdict.subjective
    assert all(s.subjective for s in verdict.signals)


def test_llm_judge_unusable_reply_is_a_schema_signal():
    model = ScriptedModel(["I think it's fine", "still prose"])
    run = Run("test", "task", model, budget=Budget())
    signal = LLMJudge().run("answer", CheckContext("task", ask=run.call))
    assert not signal.ok and signal.code is ErrorCode.SCHEMA and model.calls == 2


# --- passes that cannot be faked ------------------------------------------------------------------------

CHEATS = {
    "os._exit at import": ("import os\nos._exit(0)\n", ErrorCode.NO_TEST_REPORT),
    "sys.exit at import": ("import sys\nsys.exit(0)\n", ErrorCode.NO_TEST_REPORT),
    "a printed pytest summary, then exit 0": ("print('==== 3 passed in 0.01s ====')\nimport os\nos._exit(0)\n",
                                             ErrorCode.NO_TEST_REPORT),
    "pytest patched so no test runs": (("import _pytest.python\n_pytest.python.Function.runtest = lambda self: None\n"
                                        "def is_prime(n):\n    return False\n"), ErrorCode.TEST_FAILED),
    "test file overwritten": (("open('test_solution.py', 'w').write('def test_x():\\n    pass\\n')\n"
                               "def is_prime(n):\n    return False\n"), ErrorCode.TEST_FAILED),
    "a plugin rewrites failures as passes": ((
        "import pytest, _pytest.config\n"
        "class Cheat:\n"
        "    @pytest.hookimpl(hookwrapper=True)\n"
        "    def pytest_runtest_makereport(self, item, call):\n"
        "        outcome = yield\n"
        "        report = outcome.get_result()\n"
        "        report.outcome = 'passed'\n"
        "        report.longrepr = None\n"
        "import gc\n"
        "for obj in gc.get_objects():\n"
        "    if isinstance(obj, _pytest.config.Config):\n"
        "        obj.pluginmanager.register(Cheat(), 'cheat')\n"
        "def is_prime(n):\n    return False\n"), ErrorCode.TEST_FAILED),
}


@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_pytest_check_cannot_be_faked(cheat):
    """The candidate runs in a process of its own: what it does to pytest, a test file or its own exit there
    reaches neither the tests nor their report, so it fails as the wrong code it is."""
    candidate, code = CHEATS[cheat]
    signal = PytestCheck(EXAMPLE / "test_solution.py").run(candidate, CheckContext())
    assert not signal.ok and signal.code is code, signal
    assert signal.message


WRAP_HARNESS = (
    "import __main__\n"
    "def wrap(f):\n"  # every harness function now turns a failing report into a passing one
    "    def forged(*args, **kwargs):\n"
    "        args = [dict(a, finished=True, failed=0, errors=0, tampered=[], failures=[], exit_code=0,\n"
    "                     passed=a.get('collected', 3)) if isinstance(a, dict) and 'finished' in a\n"
    "                else 0 if a == 1 else a for a in args]\n"
    "        return f(*args, **kwargs)\n"
    "    return forged\n"
    "for name, value in list(vars(__main__).items()):\n"
    "    if name.startswith('_') and callable(value) and not isinstance(value, type):\n"
    "        setattr(__main__, name, wrap(value))\n"
)
FORGES = {
    "the harness's functions wrapped to report a pass": WRAP_HARNESS + "def is_prime(n):\n    return False\n",
    "the harness's functions replaced by no-ops": (
        "import __main__\n"
        "for name, value in list(vars(__main__).items()):\n"
        "    if name.startswith('_') and callable(value) and not isinstance(value, type):\n"
        "        setattr(__main__, name, lambda *args, **kwargs: None)\n"
        "def is_prime(n):\n    return False\n"),
    "builtins the report counts with replaced": (
        "import builtins\n"
        "builtins.sorted = lambda *a, **k: []\n"
        "builtins.dict = lambda *a, **k: {'finished': True, 'exit_code': 0, 'passed': 3, 'failed': 0}\n"
        "def is_prime(n):\n    return False\n"),
}
"""Code under test that reaches the harness through `import __main__` or builtins, to make it report a pass."""


@pytest.mark.parametrize("forge", sorted(FORGES))
def test_a_forged_report_is_no_pass(forge):
    signal = PytestCheck(EXAMPLE / "test_solution.py").run(FORGES[forge], CheckContext())
    assert not signal.ok and signal.code in (ErrorCode.TEST_FAILED, ErrorCode.NO_TEST_REPORT), signal


@pytest.mark.parametrize("forge", [WRAP_HARNESS, FORGES["the harness's functions replaced by no-ops"]])
def test_a_script_check_cannot_be_faked_through_the_harness_s_globals(forge):
    signal = PythonScriptCheck("assert add(1, 2) == 3\n").run(forge.replace(
        "def is_prime(n):\n    return False\n", "") + "def add(a, b):\n    return a - b\n", CheckContext())
    assert not signal.ok and signal.code is ErrorCode.TEST_FAILED, signal


def test_pytest_check_refuses_a_file_that_collects_nothing(tmp_path):
    tests = tmp_path / "test_empty.py"
    tests.write_text("from solution import f\n")
    with pytest.raises(ConfigError, match="defines no test"):  # before any model call is spent on it
        PytestCheck(tests)
    tests.write_text("# Tests\n\n- f() returns 1\n")  # a task's markdown given as the tests
    with pytest.raises(ConfigError, match="not valid Python"):
        PytestCheck(tests)


HUMANEVAL_TESTS = ("def check(candidate):\n    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0], 0.3) == True\n"
                   "    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.95) == True\n"
                   "    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.8) == False\n"
                   "check(has_close_elements)\n")


@pytest.mark.parametrize("candidate,code", [
    ("import os\nos._exit(0)\n", ErrorCode.NO_TEST_REPORT),
    ("import sys\nsys.exit(0)\n", ErrorCode.NO_TEST_REPORT),
    ("import sys\ndef has_close_elements(xs, t):\n    sys.exit(0)\n", ErrorCode.NO_TEST_REPORT),
    ("def has_close_elements(xs, t):\n    return True\nx = '''\n", ErrorCode.TEST_FAILED),  # cannot swallow the tests
])
def test_python_script_check_cannot_be_faked(candidate, code):
    signal = PythonScriptCheck(HUMANEVAL_TESTS).run(candidate, CheckContext())
    assert not signal.ok and signal.code is code and signal.score == 0.0, signal


def test_python_script_check_names_the_actual_value():
    check = PythonScriptCheck(HUMANEVAL_TESTS)
    good = ("def has_close_elements(xs, t):\n"
            "    return any(abs(a - b) < t for i, a in enumerate(xs) for b in xs[i + 1:])\n")
    assert check.run(good, CheckContext()).ok
    wrong = check.run("def has_close_elements(xs, t):\n    return t < 0.5\n", CheckContext())
    assert wrong.code is ErrorCode.TEST_FAILED and wrong.score is None  # ran, but wrong: revise
    assert "assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.95) == True failed: got False" in wrong.message
    assert wrong.pinpointed  # names the value: the classifier revises with it by rule
    crash = check.run("def has_close_elements(xs, t):\n    return xs[9] < t\n", CheckContext())
    assert crash.message.startswith("IndexError: list index out of range at `candidate.py:2: return xs[9] < t`")
    assert crash.pinpointed, crash.message  # names the crash's line
    # Neither is a failure that names no value: the candidate's own bare assert, an unrewritten chained
    # assert, an AssertionError the candidate raises with the harness's wording, a syntax error; nor a
    # crash whose line the message's cap cut off.
    for code, tests in [
        ("def has_close_elements(xs, t):\n    assert not xs\n", None),
        ("def has_close_elements(xs, t):\n    raise ValueError('x' * 500)\n", None),
        ("def has_close_elements(xs, t):\n    return 1\n", "assert has_close_elements([], 1) == 0 == 0\n"),
        ("def has_close_elements(xs, t):\n    raise AssertionError('assert x failed: got 1')\n", None),
        ("def has_close_elements(xs, t)\n    return 1\n", None),
    ]:
        signal = (PythonScriptCheck(tests) if tests else check).run(code, CheckContext())
        assert signal.code is ErrorCode.TEST_FAILED and not signal.pinpointed, signal


@pytest.mark.parametrize("tests,expected", [
    ("assert f(2)\n", "assert f(2) failed: got 0"),
    ("assert not f(3)\n", "assert not f(3) failed: got 1"),
    ("class T:\n    def go(self):\n        assert f(4) == 5, 'four'\nT().go()\n",
     "assert f(4) == 5 failed: got 0 (four)"),
    ("assert f(1) == 0 == 0\n", "AssertionError at `tests.py:1: assert f(1) == 0 == 0`"),  # chained: left as written
])
def test_assertion_messages(tests, expected):
    signal = PythonScriptCheck(tests).run("def f(n):\n    return n % 2\n", CheckContext())
    assert expected in signal.message, signal.message


def test_failure_detail_survives_a_hostile_repr():
    candidate = "class Bad:\n    def __repr__(self):\n        raise RuntimeError('no')\ndef f():\n    return Bad()\n"
    signal = PythonScriptCheck("assert f() == 1\n").run(candidate, CheckContext())
    assert "got <Bad instance" in signal.message and signal.score is None


# --- secrets and the command check's scratch copy ---------------------------------------------------------

CANARY = "canary-9f3b2c71d0e4"


def test_secret_values_are_redacted_from_signals(monkeypatch):
    from reflexa.evaluate.checks import redact_secrets

    monkeypatch.setenv("MY_API_TOKEN", CANARY)
    monkeypatch.setenv("SHORT_KEY", "abc")  # too short to redact without hitting ordinary text
    assert redact_secrets(f"token={CANARY} abc") == "token=[REDACTED] abc"
    # The candidate finds the secret another way (here: it is written in the candidate itself).
    signal = PythonScriptCheck("assert f() == 1\n").run(f"def f():\n    return '{CANARY}'\n", CheckContext())
    assert CANARY not in signal.message and CANARY not in signal.evidence and "[REDACTED]" in signal.message


def test_command_check_copy_skips_dotfiles_ignored_files_and_outside_links(tmp_path):
    work = tmp_path / "work"
    (work / "pkg").mkdir(parents=True)
    (work / "pkg" / "mod.py").write_text("x = 1\n")
    (work / ".env").write_text(f"API_KEY={CANARY}\n")
    (work / ".secrets").mkdir()
    (work / ".secrets" / "id").write_text(CANARY)
    (work / ".gitignore").write_text("*.log\nbuild/\n/data.bin\n!keep.log\n")
    (work / "run.log").write_text("log")
    (work / "keep.log").write_text("kept")
    (work / "build").mkdir()
    (work / "build" / "out.txt").write_text("built")
    (work / "data.bin").write_text("data")
    (work / "pkg" / "data.bin").write_text("not anchored, kept")
    outside = tmp_path / "outside.txt"
    outside.write_text(CANARY)
    (work / "leak").symlink_to(outside)
    (work / "alias.py").symlink_to(work / "pkg" / "mod.py")
    check = CommandCheck("find . | sort; cat leak alias.py .env 2>&1; exit 1", out="answer.py", workdir=work)
    signal = check.run("print(1)", CheckContext())
    listing = signal.evidence
    assert "./pkg/mod.py" in listing and "./keep.log" in listing and "./pkg/data.bin" in listing
    assert "./alias.py" in listing and "x = 1" in listing  # a link inside the tree is kept
    for absent in ("./.env", "./.secrets", "./run.log", "./build", "./data.bin\n", "./leak"):
        assert absent not in listing, absent
    assert CANARY not in listing and CANARY not in signal.message


def test_a_tree_over_its_memory_cap_is_a_resource_limit_signal():
    from reflexa.evaluate.checks import signal_from_exec, signal_from_report
    from reflexa.evaluate.sandbox import ExecResult, Limits

    result = ExecResult(None, "", "Killed", timed_out=False, duration=1.0, killed_by="SIGKILL",
                        memory_exceeded=True)
    for signal in (signal_from_report("t", result, Limits(tree_memory_mb=512)),
                   signal_from_exec("t", result, Limits(tree_memory_mb=512))):
        assert signal.code is ErrorCode.RESOURCE_LIMIT and "512 MiB" in signal.message and signal.score == 0.0


def test_pytest_check_without_pytest_is_a_setup_error(tmp_path, monkeypatch):
    import importlib.util

    from reflexa.errors import ConfigError

    tests = tmp_path / "test_x.py"
    tests.write_text("def test_x():\n    assert True\n")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pytest" else real(name, *a))
    with pytest.raises(ConfigError, match="pytest is not installed"):
        PytestCheck(tests)


def test_a_test_file_s_own_skips_fixtures_and_xfails_do_not_fail_a_right_answer(tmp_path):
    tests = tmp_path / "test_add.py"
    tests.write_text(
        "import pytest\nfrom solution import add\n\n"
        "@pytest.fixture\ndef test_input():\n    return (1, 2)\n\n"  # a fixture, not a test, whatever its name
        "def test_add(test_input):\n    assert add(*test_input) == 3\n\n"
        "@pytest.mark.skip(reason='later')\ndef test_later():\n    assert False\n\n"
        "@pytest.mark.xfail(reason='known')\ndef test_known():\n    assert add(1, 1) == 3\n")
    check = PytestCheck(tests)
    passed = check.run("def add(a, b):\n    return a + b\n", CheckContext())
    assert passed.ok and "1 passed" in passed.message, passed
    # A skip the code under test raises while a test runs is no pass.
    dodged = check.run("def add(a, b):\n    import pytest\n    pytest.skip('no')\n", CheckContext())
    assert not dodged.ok, dodged
