"""The Python API forgives a newcomer: a plain function is a check, any check may pinpoint its failure, every
loop's first argument is `task`, and the test model answers each role from its own script."""

import functools
import inspect
import json

import pytest

from reflexa import (
    ConfigError,
    ModelError,
    RegexCheck,
    ScriptedModel,
    Session,
    Signal,
    StopReason,
    plan,
    react,
    refine,
    research,
    tool,
    trials,
)
from reflexa.models.scripted import ScriptedCall
from reflexa.types import ErrorCode

GOOD = "```python\ndef add(a, b):\n    return a + b\n```"
BAD = "```python\ndef add(a, b):\n    return a - b\n```"
LESSON = {"failure_step": "attempt 1", "observed_mismatch": "add(2, 3) gave -1", "root_cause": "it subtracts",
          "correction": "return a + b"}


def adds(candidate: str):
    """A check as a plain function: a string says what is wrong."""
    namespace: dict = {}
    exec(candidate, namespace)  # noqa: S102 - the test's own candidates
    return None if namespace["add"](2, 3) == 5 else f"add(2, 3) returned {namespace['add'](2, 3)}"


def test_a_plain_function_is_a_check():
    """A function once failed deep inside with AttributeError: 'function' object has no attribute 'name'."""
    model = ScriptedModel(generator=[BAD, GOOD], reflector=[LESSON])
    result = refine("Write add(a, b).", [adds], session=Session(model=model))
    assert result.passed and result.iterations == 2
    assert result.verdict.signals[0].source == "adds"
    feedback = model.prompts[2][-1]["content"]  # the second attempt is told what the function said
    assert "add(2, 3) returned -1" in feedback


@pytest.mark.parametrize(("check", "ok", "message"), [
    (lambda c: True, True, ""),
    (lambda c: None, True, ""),
    (lambda c: False, False, "check returned False"),
    (lambda c: "too short", False, "too short"),
    (lambda c: Signal("mine", False, ErrorCode.NO_MATCH, "no match"), False, "no match"),
    (lambda c: 1 / 0, False, "ZeroDivisionError: division by zero"),
])
def test_what_a_function_check_returns(check, ok, message):
    from reflexa.evaluate.checks import CheckContext, as_check

    signal = as_check(check).run("x", CheckContext())
    assert signal.ok is ok and message in signal.message


def test_something_that_is_no_check_is_a_clear_error():
    with pytest.raises(ConfigError, match="not a check: 42"):
        refine("t", [42], session=Session(model=ScriptedModel([GOOD])))


def test_one_check_needs_no_list_and_a_string_is_no_check():
    """A lone check was iterated (`'RegexCheck' object is not iterable`), a string read letter by letter."""
    assert refine("t", RegexCheck("a \\+ b"), session=Session(model=ScriptedModel([GOOD]))).passed
    assert refine("t", adds, session=Session(model=ScriptedModel([GOOD]))).passed
    with pytest.raises(ConfigError, match="not a check: 'x'"):
        refine("t", "x", session=Session(model=ScriptedModel([GOOD])))


def test_a_check_function_that_cannot_take_the_candidate_is_refused_before_any_call():
    """It was taken for a failing candidate, every attempt, calls spent."""
    model = ScriptedModel([GOOD])
    with pytest.raises(ConfigError, match="does not take one argument, the candidate"):
        refine("t", [lambda candidate, context: True], session=Session(model=model))
    assert model.prompts == []


def test_a_check_function_returning_something_else_is_a_clear_error():
    with pytest.raises(ConfigError, match="the check function check returned int"):
        refine("t", [lambda c: 1], session=Session(model=ScriptedModel([GOOD])))


@pytest.mark.parametrize(("given", "error"), [
    (42, "not a check: 42"),
    (RegexCheck, "RegexCheck is a class, not a check"),
    ([RegexCheck], "RegexCheck is a class, not a check"),
    (lambda: True, "does not take one argument"),
])
def test_what_is_no_check_is_refused_before_any_call(given, error):
    model = ScriptedModel([GOOD])
    with pytest.raises(ConfigError, match=error):
        refine("t", given, session=Session(model=model))
    assert model.prompts == []


def test_an_async_check_is_refused_and_a_wrapped_one_is_called_as_it_is_given():
    async def later(candidate):
        return True

    with pytest.raises(ConfigError, match="is async"):
        refine("t", later, session=Session(model=ScriptedModel([GOOD])))

    def with_the_sum(check):
        @functools.wraps(check)
        def checked(candidate):
            return check(candidate, 5)
        return checked

    @with_the_sum
    def adds_to(candidate, total):
        return "a + b" in candidate and total == 5

    assert refine("t", adds_to, session=Session(model=ScriptedModel([GOOD]))).passed


def _answers(answer: str) -> dict:
    return {"action": {"thought": "done", "tool": "final_answer", "args": {"answer": answer}, "confidence": 0.9}}


@tool
def count() -> str:
    """How many orders there are."""
    return "400"


@pytest.mark.parametrize("validator", [
    lambda answer: answer == "400",
    lambda answer: Signal("mine", answer == "400", None if answer == "400" else ErrorCode.NO_MATCH, "not 400"),
    lambda answer: None if answer == "400" else "not 400",
    "regex",
])
def test_react_and_plan_take_any_check_as_their_validator(validator):
    """react's validator took only `answer -> str | None`: a bool crashed with AttributeError, a Check was
    not callable."""
    validator = RegexCheck("^400$") if validator == "regex" else validator

    passed = react("How many orders?", [count], validator=validator, session=Session(model=ScriptedModel(
        [_answers("400")])))
    assert passed.stop_reason is StopReason.PASSED
    model = ScriptedModel(generator=[_answers("399"), _answers("400")], reflector=[LESSON])
    corrected = react("How many orders?", [count], validator=validator, session=Session(model=model))
    assert corrected.stop_reason is StopReason.PASSED and corrected.iterations == 2
    tree = {"goal": "How many orders?", "subgoals": [{"name": "count", "task": "How many orders?"}]}
    planned = plan("How many orders?", [count], tree=tree, validator=validator,
                   session=Session(model=ScriptedModel([_answers("400")])))
    assert planned.stop_reason is StopReason.PASSED


def test_a_validator_that_raises_ends_the_run_error_and_a_check_without_subjective_serves():
    def broken(answer):
        raise RuntimeError("the validator's own bug")

    with pytest.raises(RuntimeError, match="own bug"):
        react("How many orders?", [count], validator=broken, session=Session(model=ScriptedModel([_answers("400")])))

    class Minimal:
        name = "minimal"

        def run(self, candidate, context):
            return Signal(self.name, candidate == "400" and context.task == "How many orders?")

    result = react("How many orders?", [count], validator=Minimal(),
                   session=Session(model=ScriptedModel([_answers("400")])))
    assert result.stop_reason is StopReason.PASSED


def test_a_subjective_check_cannot_be_a_validator():
    from reflexa import LLMJudge

    with pytest.raises(ConfigError, match="subjective"):
        react("q", [], validator=LLMJudge(), session=Session(model=ScriptedModel([])))


def test_any_check_may_pinpoint_its_failure_and_is_then_revised_by_rule():
    """`pinpointed` was ignored unless the code was TEST_FAILED."""
    def names_the_value(candidate):
        if "a + b" in candidate:
            return True
        return Signal("names_the_value", False, ErrorCode.VALIDATION_FAILED, "add(2, 3) returned -1, not 5",
                      pinpointed=True)

    model = ScriptedModel(generator=[BAD, GOOD])  # no reflector script: a reflector call would fail the run
    result = refine("Write add(a, b).", [names_the_value], session=Session(model=model))
    assert result.passed and result.counters["rule_repairs"] == 1 and result.counters["reflector_calls"] == 0


def test_every_loop_takes_the_task_first_under_one_name():
    for loop in (refine, react, research, plan, trials):
        assert next(iter(inspect.signature(loop).parameters)) == "task", loop.__name__


def test_the_test_model_answers_each_role_from_its_own_script():
    """A two-reply script for a custom-check refine once ended `no replies left`: the reflector took the
    second reply as its lesson. With a script per role, each role takes its own."""
    model = ScriptedModel(generator=[BAD, GOOD], reflector=[LESSON])
    result = refine("Write add(a, b).", [adds], session=Session(model=model))
    assert result.passed and model.roles == ["generator", "reflector", "generator"]
    assert result.usage["reflector"].calls == 1


def test_a_role_without_a_script_takes_from_the_shared_one_and_a_used_up_script_names_its_role():
    model = ScriptedModel(["shared"], generator=["mine"])
    assert model.complete([{"role": "user", "content": "q"}], role="generator").text == "mine"
    assert model.complete([{"role": "user", "content": "q"}], role="reflector").text == "shared"
    with pytest.raises(ModelError, match="no replies left in the generator's script"):
        model.complete([{"role": "user", "content": "q"}], role="generator")


def test_the_test_model_can_answer_with_a_function_per_call():
    seen: list[ScriptedCall] = []

    def answer(call: ScriptedCall):
        seen.append(call)
        return LESSON if call.role == "reflector" else (BAD if call.number == 1 else GOOD)

    result = refine("Write add(a, b).", [adds], session=Session(model=ScriptedModel(function=answer)))
    assert result.passed and [c.role for c in seen] == ["generator", "reflector", "generator"]
    assert seen[1].schema is not None and "correction" in json.dumps(seen[1].schema)


def test_the_old_single_queue_still_serves_every_role_in_call_order():
    model = ScriptedModel([BAD, LESSON, GOOD])
    assert refine("Write add(a, b).", [adds], session=Session(model=model)).passed


def test_a_scripts_file_takes_a_script_per_role(tmp_path):
    path = tmp_path / "scripts.json"
    path.write_text(json.dumps({"generator": [BAD, GOOD], "reflector": [LESSON], "delay": 0}))
    result = refine("Write add(a, b).", [adds], session=Session(model=ScriptedModel.from_file(path)))
    assert result.stop_reason is StopReason.PASSED
    path.write_text(json.dumps({"generator": "not a list"}))
    with pytest.raises(ConfigError, match="must be a JSON list of replies"):
        ScriptedModel.from_file(path)
    for role in ("narrator", "search"):  # a search calls no model: a script for it was a TypeError
        path.write_text(json.dumps({role: []}))
        with pytest.raises(ConfigError, match=f"has no such script: {role}"):
            ScriptedModel.from_file(path)
