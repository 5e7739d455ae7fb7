import sys
from pathlib import Path

import pytest

from reflexa import ScriptedModel
from reflexa.evaluate.checks import (
    CheckContext,
    CommandCheck,
    JsonSchemaCheck,
    LLMJudge,
    PytestCheck,
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


def test_regex_check():
    assert RegexCheck(r"def \w+\(").run("def f(): pass", CheckContext()).ok
    assert RegexCheck(r"import os").run("print(1)", CheckContext()).code is ErrorCode.NO_MATCH
    assert not RegexCheck(r"eval\(", must_match=False).run("eval('1')", CheckContext()).ok


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
