import json
import time

import pytest

from reflexa import Budget, MemoryStore, ScriptedModel, Session, Signal, StopReason, refine
from reflexa.errors import ConfigError, ModelUnavailable
from reflexa.types import ErrorCode


class Expect:
    """A check that passes exactly one answer; a wrong one fails with `score` (0 = FAIL, else revise)."""

    subjective = False

    def __init__(self, good: str, score: float = 0.5, name: str = "expect") -> None:
        self.good, self.score, self.name = good, score, name

    def run(self, candidate, context):
        if candidate.strip() == self.good:
            return Signal(self.name, True, score=1.0)
        return Signal(
            self.name,
            False,
            ErrorCode.TEST_FAILED,
            f"wanted {self.good}, got {candidate.strip()}",
            evidence=f"output for {candidate.strip()}",
            score=self.score,
        )


def answer(text: str, plan: str = "Plan: think") -> str:
    return f"{plan}\n```\n{text}\n```"


LESSON = {
    "failure_step": "attempt 1",
    "observed_mismatch": "wanted good",
    "root_cause": "wrong value",
    "correction": "return the right value",
}


class NewFailures:
    """Fails every candidate with a message of its own (`message(n)` for the n-th check), so no two
    failures look alike and the run goes on to max_attempts."""

    subjective = False

    def __init__(self, name: str, message, score: float) -> None:
        self.name, self.message, self.score, self.n = name, message, score, 0

    def run(self, candidate, context):
        self.n += 1
        return Signal(self.name, False, ErrorCode.TEST_FAILED, self.message(self.n), score=self.score)


def test_pass_on_first_attempt_makes_exactly_one_generator_call():
    model = ScriptedModel([answer("good")])
    result = refine("answer", [Expect("good")], session=Session(model=model))
    assert result.stop_reason is StopReason.PASSED
    assert result.output == result.best == "good"
    assert model.calls == 1
    assert set(result.usage) == {"generator"} and result.usage["generator"].calls == 1


def test_fail_restarts_from_the_task_plus_lessons():
    model = ScriptedModel([answer("one"), LESSON, answer("good")])
    result = refine("the task", [Expect("good", score=0.0)], session=Session(model=model))
    assert result.stop_reason is StopReason.PASSED
    restart = model.prompts[2][-1]["content"]
    assert "the task" in restart and "return the right value" in restart
    assert "Your latest answer" not in restart and "```\none\n```" not in restart


def test_needs_improvement_revises_the_latest_candidate():
    model = ScriptedModel([answer("one"), LESSON, answer("good")])
    result = refine("the task", [Expect("good", score=0.5)], context="latest", session=Session(model=model))
    assert result.stop_reason is StopReason.PASSED
    prompt = model.prompts[2]
    assert prompt[0] == model.prompts[0][0]  # the revision continues the first conversation: a shared prefix
    assert prompt[1] == {"role": "assistant", "content": "```\none\n```"}
    revision = prompt[-1]["content"]
    assert "wanted good, got one" in revision and "return the right value" in revision


def test_evaluator_never_sees_the_plan():
    model = ScriptedModel([answer("one", plan="Plan: SECRET-PLAN"), LESSON, answer("good")])
    refine("task", [Expect("good")], session=Session(model=model))
    assert "SECRET-PLAN" not in json.dumps(model.prompts[1])


def test_identical_candidate_stops_with_no_progress():
    model = ScriptedModel([answer("one"), LESSON, answer("one"), answer("one")])
    store = MemoryStore()
    result = refine("task", [Expect("good")], session=Session(model=model, store=store), max_attempts=5,
                    repairs="revise")
    assert result.stop_reason is StopReason.NO_PROGRESS
    assert model.calls == 4  # the repeated revision gets one sampled attempt, which repeats too
    assert any(s.kind == "no_progress" for s in store.steps(result.run_id))


def test_a_repeated_revision_gets_one_sampled_fresh_attempt():
    model = ScriptedModel([answer("one"), LESSON, answer("one"), answer("good")])
    store = MemoryStore()
    result = refine("task", [Expect("good")], session=Session(model=model, store=store), max_attempts=5)
    assert result.passed and model.calls == 4
    assert len(model.prompts[3]) == 1  # a fresh start from the task, not a revision
    flags = [s.payload().why for s in store.steps(result.run_id) if s.kind == "flag"]
    assert any("sampled" in why for why in flags)


def test_a_sampled_attempt_that_repeats_too_stops():
    model = ScriptedModel([answer("one"), LESSON, answer("one"), answer("one")])
    result = refine("task", [Expect("good")], session=Session(model=model), max_attempts=5)
    assert result.stop_reason is StopReason.NO_PROGRESS and model.calls == 4


def test_same_failure_fingerprint_twice_stops_with_no_progress():
    class SameFailure(Expect):
        def run(self, candidate, context):
            return Signal("t", False, ErrorCode.TEST_FAILED, "assert f(3) == 9 failed", score=0.5)

    model = ScriptedModel([answer("one"), LESSON, answer("two"), answer("three")])
    result = refine("task", [SameFailure("x")], session=Session(model=model), max_attempts=5, repairs="revise")
    assert result.stop_reason is StopReason.NO_PROGRESS and model.calls == 4


def test_a_revision_that_undoes_the_previous_one_is_flagged():
    model = ScriptedModel([answer("one"), LESSON, answer("two"), LESSON, answer("one"), LESSON])
    store = MemoryStore()
    result = refine("task", [Expect("good")], session=Session(model=model, store=store), repairs="revise")
    assert result.stop_reason is StopReason.MAX_ITERATIONS
    flags = [s for s in store.steps(result.run_id) if s.kind == "flag"]
    assert len(flags) == 1 and "undoes" in flags[0].output["why"]


def test_max_iterations_defaults_to_three_and_keeps_the_best():
    class Scored(Expect):
        def run(self, candidate, context):
            scores = {"low": 0.3, "high": 0.5, "mid": 0.4}
            return Signal("s", False, ErrorCode.TEST_FAILED, f"too {candidate}", score=scores[candidate])

    # By default a failed revision is followed by a sampled fresh attempt, which is shown no lesson: none is bought.
    model = ScriptedModel([answer("low"), LESSON, answer("high"), answer("mid")])
    result = refine("task", [Scored("x")], session=Session(model=model))
    assert result.stop_reason is StopReason.MAX_ITERATIONS and model.calls == 4
    assert result.iterations == 3 and result.output == "mid" and result.best == "high"


def test_call_budget_holds():
    model = ScriptedModel(default=answer("one"))
    result = refine("task", [Expect("good")], budget=Budget(max_calls=2), session=Session(model=model), max_attempts=10)
    assert result.stop_reason is StopReason.BUDGET_CALLS
    assert model.calls == 2


def test_token_budget_holds_within_one_call():
    model = ScriptedModel(default=answer("x" * 400))
    limit = 300
    result = refine(
        "task",
        [Expect("good")],
        budget=Budget(max_tokens=limit),
        max_reply_tokens=120,
        session=Session(model=model),
        max_attempts=50,
    )
    assert result.stop_reason is StopReason.BUDGET_TOKENS
    # A limit is checked before each call, and the call's max_tokens is cut to what is left.
    last_input = model.prompts[-1]
    assert result.total_usage.total_tokens <= limit + sum(len(m["content"]) for m in last_input) // 4 + 1


def test_time_budget_holds():
    class Slow(ScriptedModel):
        def _generate(self, *args, **kw):
            time.sleep(0.05)
            return super()._generate(*args, **kw)

    model = Slow(default=answer("one"))
    result = refine(
        "task", [Expect("good")], budget=Budget(max_seconds=0.01), session=Session(model=model), max_attempts=10
    )
    assert result.stop_reason is StopReason.TIMEOUT
    assert model.calls == 1


def test_reflection_budget_falls_back_to_raw_signals():
    model = ScriptedModel([answer("one"), answer("two"), answer("good")])
    result = refine("task", [Expect("good")], budget=Budget(max_reflections=0), session=Session(model=model))
    assert result.stop_reason is StopReason.PASSED
    assert "reflector" not in result.usage
    assert "wanted good, got one" in model.prompts[1][-1]["content"]


def test_unparseable_reflection_is_discarded_not_reasked():
    model = ScriptedModel([answer("one"), "not json at all", answer("good")])
    store = MemoryStore()
    result = refine("task", [Expect("good")], session=Session(model=model, store=store))
    assert result.stop_reason is StopReason.PASSED
    assert result.usage["reflector"].calls == 1
    assert result.counters["lessons_discarded"] == 1
    assert "wanted good, got one" in model.prompts[2][-1]["content"]  # fell back to the raw signal


def test_ungrounded_lesson_is_discarded():
    vague = {"failure_step": "x", "observed_mismatch": "something odd", "root_cause": "unclear", "correction": "try"}
    model = ScriptedModel([answer("one"), vague, answer("good")])
    result = refine("task", [Expect("good")], session=Session(model=model))
    assert result.passed and result.counters["lessons_discarded"] == 1


def test_a_reply_cut_at_its_cap_is_asked_again_shorter_and_never_reflected_on():
    """A reply cut inside its code is REPLY_CUT: not checked, no lesson, the next attempt told to be shorter."""
    checked: list[str] = []

    class Counting(Expect):
        def run(self, candidate, context):
            checked.append(candidate)
            return super().run(candidate, context)

    model = ScriptedModel(["Plan: go\n```python\n" + "x = 1\n" * 200, answer("good")])
    store = MemoryStore()
    result = refine("task", [Counting("good")], max_reply_tokens=40, session=Session(model=model, store=store))
    assert result.stop_reason is StopReason.PASSED and checked == ["good"] and len(model.prompts) == 2
    assert "cut off at 40 tokens" in model.prompts[1][-1]["content"]
    verdicts = [s.payload().verdict for s in store.steps(result.run_id) if s.kind == "verdict"]
    assert verdicts[0].failing[0].code is ErrorCode.REPLY_CUT
    assert result.counters["reflector_calls"] == 0 and result.counters["rule_repairs"] == 1


def test_a_reply_whose_code_ended_before_the_cap_is_checked_as_it_is():
    model = ScriptedModel([answer("good") + "\nThis works because " + "it is right. " * 100])
    result = refine("task", [Expect("good")], max_reply_tokens=40, session=Session(model=model))
    assert result.stop_reason is StopReason.PASSED and len(model.prompts) == 1


def test_the_reply_cap_is_set_from_the_command_line_and_stored_in_the_spec(tmp_path):
    from typer.testing import CliRunner

    from reflexa import SQLiteStore
    from reflexa.cli.app import app

    (tmp_path / "r.json").write_text(json.dumps(["```\n" + "x = 1\n" * 100, "```\nGOOD\n```"]))
    done = CliRunner().invoke(app, ["refine", "say GOOD", "--regex", "GOOD", "--max-reply-tokens", "32", "--model",
                                    f"scripted:{tmp_path / 'r.json'}", "--trace", str(tmp_path / "t.db")])
    assert done.exit_code == 0, done.output
    store = SQLiteStore(tmp_path / "t.db")
    assert store.runs(1)[0].meta["spec"]["max_reply_tokens"] == 32
    bad = CliRunner().invoke(app, ["refine", "t", "--regex", "x", "--max-reply-tokens", "3"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output


def test_reply_without_a_fence_is_the_candidate():
    result = refine("task", [Expect("good")], session=Session(model=ScriptedModel(["Plan: easy\ngood"])))
    assert result.stop_reason is StopReason.PASSED


def test_empty_candidate_is_an_empty_signal():
    model = ScriptedModel(["```\n```", LESSON, answer("good")])
    store = MemoryStore()
    result = refine("task", [Expect("good")], session=Session(model=model, store=store))
    verdict = next(s for s in store.steps(result.run_id) if s.kind == "verdict").payload().verdict
    assert verdict.signals[0].code is ErrorCode.EMPTY and verdict.status == "FAIL"


def test_model_error_stops_with_error_and_keeps_best_so_far():
    model = ScriptedModel([answer("one"), LESSON, ModelUnavailable("server gone", hint="restart it")])
    result = refine("task", [Expect("good")], session=Session(model=model))
    assert result.stop_reason is StopReason.ERROR
    assert result.best == "one" and "server gone" in result.error and "restart it" in result.error


def test_full_history_strategy_shows_every_attempt():
    model = ScriptedModel([answer("one"), LESSON, answer("two"), LESSON, answer("good")])
    refine("task", [Expect("good")], context="full", repairs="revise", session=Session(model=model))
    third = json.dumps(model.prompts[4])
    assert "```\\none\\n```" in third and "```\\ntwo\\n```" in third


def test_feedback_strategy_shows_how_the_attempt_failed_but_not_its_code():
    model = ScriptedModel([answer("one"), LESSON, answer("good")])
    result = refine("task", [Expect("good")], context="feedback", session=Session(model=model))
    assert result.stop_reason is StopReason.PASSED
    (retry,) = model.prompts[2]  # one message: the task and the failure, no conversation
    assert retry["content"].startswith("task") and "wanted good, got one" in retry["content"]
    assert "output for one" in retry["content"] and "```\none\n```" not in retry["content"]


def test_an_unknown_context_strategy_is_refused():
    with pytest.raises(ConfigError, match="feedback, latest, full"):
        refine("task", [Expect("good")], context="weird", session=Session(model=ScriptedModel([])))  # type: ignore[arg-type]


def test_full_history_strategy_starts_fresh_after_a_fail():
    model = ScriptedModel([answer("one"), LESSON, answer("good")])
    refine("task", [Expect("good", score=0.0)], context="full", session=Session(model=model))
    assert len(model.prompts[2]) == 1 and "return the right value" in model.prompts[2][0]["content"]


def test_a_sampled_fresh_attempt_leaves_out_the_lesson_its_revision_was_given():
    # Measured on MBPP: with the revision's lesson in its prompt, the sampled attempt converted 1 of 22 first-
    # attempt failures; without it, 8.
    for repairs, script in (("revise", [answer("one"), LESSON, answer("one"), answer("good")]),
                            ("fixed", [answer("one"), LESSON, answer("two"), answer("good")])):
        model = ScriptedModel(script)
        result = refine("task", [Expect("good")], session=Session(model=model), max_attempts=5, repairs=repairs)
        fresh = model.prompts[-1]
        assert result.passed and fresh == [{"role": "user", "content": "task"}], repairs


def test_a_failure_that_changes_only_in_its_numbers_is_the_same_failure_and_gets_a_sampled_attempt():
    # Measured: on MBPP, taking "got 4" after "got 3" for progress kept revising greedily and lost conversions.
    model = ScriptedModel([answer("one"), LESSON, answer("two"), answer("good")])
    check = NewFailures("t", lambda n: f"assert f(3) == 9, wanted good: got {n}", score=0.5)
    refine("task", [check], session=Session(model=model))
    assert model.prompts[-1] == [{"role": "user", "content": "task"}]  # a fresh attempt, not a third revision


def test_every_step_is_stored_in_order():
    model = ScriptedModel([answer("one"), LESSON, answer("good")])
    store = MemoryStore()
    result = refine("task", [Expect("good")], session=Session(model=model, store=store))
    kinds = [s.kind for s in store.steps(result.run_id)]
    assert kinds == [
        "model_call",
        "attempt",
        "verdict",
        "model_call",
        "engine",
        "checkpoint",
        "model_call",
        "attempt",
        "verdict",
        "stop",
    ]
    assert [s.step_id for s in store.steps(result.run_id)] == list(range(1, 11))
    assert store.get_run(result.run_id).stop_reason == "PASSED"
    json.dumps(result.to_dict(), default=str)


def test_refine_without_checks_is_a_config_error():
    with pytest.raises(ConfigError):
        refine("task", [], session=Session(model=ScriptedModel()))


def test_resample_after_every_failed_revision():
    model = ScriptedModel([answer("one"), LESSON, answer("two"), answer("good")])
    result = refine("task", [Expect("good")], session=Session(model=model), repairs="fixed")
    assert result.passed and model.calls == 4 and result.counters["reflector_calls"] == 1
    assert model.prompts[3] == [{"role": "user", "content": "task"}]  # sampled fresh from the task, no lesson


def test_a_checkpoint_stays_the_same_size_however_many_attempts_a_run_makes():
    store = MemoryStore()
    replies = [f"```\nattempt {i} {'y' * 40}\n```" for i in range(40)]
    fresh = NewFailures("fresh", lambda n: "miss " + "x" * n, score=0.5)
    result = refine("task", [fresh], budget=Budget(max_reflections=0), max_attempts=40,
                    session=Session(model=ScriptedModel(replies), store=store))
    sizes = [len(json.dumps(s.output)) for s in store.steps(result.run_id) if s.kind == "checkpoint"]
    assert result.iterations == 40 and len(sizes) == 39
    assert sizes[-1] - sizes[2] < 200  # the failure message's growth, not every candidate and feedback so far


def test_a_checkpoint_stays_bounded_when_every_attempt_is_reflected_on():
    from reflexa.reflect.progress import REMEMBERED

    words = ["".join(chr(97 + (i // 26**k) % 26) for k in range(4)) for i in range(REMEMBERED + 30)]

    # A new failure each time, in letters (fingerprints fold digits), each reflected on.
    fresh = NewFailures("fresh", lambda n: f"miss {words[n - 1]}", score=0.5)
    replies = []
    for word in words:
        replies += [f"```\nattempt {word}\n```", {"failure_step": "attempt", "observed_mismatch": f"miss {word}",
                                                  "root_cause": f"wrong {word}", "correction": f"try {word}"}]
    store = MemoryStore()
    result = refine("task", [fresh], budget=Budget(max_reflections=len(words)), max_attempts=len(words),
                    repairs="revise", session=Session(model=ScriptedModel(replies), store=store))
    reflected = [s.output["engine"]["reflected"] for s in store.steps(result.run_id) if s.kind == "checkpoint"]
    assert result.counters["reflector_calls"] > REMEMBERED
    assert max(len(r) for r in reflected) == REMEMBERED  # the newest only, not one more per reflection


def test_a_fresh_attempt_shows_only_the_newest_lessons():
    from reflexa.loops.refine import MAX_LESSONS

    failing = NewFailures("failing", lambda n: f"miss {'z' * n}", score=0.0)  # FAIL: every attempt adds a lesson
    model = ScriptedModel([f"```\nattempt {'y' * i}\n```" for i in range(12)])
    result = refine("task", [failing], budget=Budget(max_reflections=0), max_attempts=12, session=Session(model=model))
    last = model.prompts[-1][-1]["content"]
    assert result.iterations == 12 and last.count("- At attempt") == MAX_LESSONS
    assert f"miss {'z' * 11}\n" in last and f"miss {'z' * 6}\n" not in last  # the newest five: 7 to 11


def test_a_pass_is_the_best_even_when_a_failure_scored_as_high():
    """A command that printed "5 passed" and exited 1 fails with score 1.0; the candidate that then passes
    is the run's best (the failing one was kept, and the CLI wrote it to --out)."""

    class PrintsPassedButExits:
        name, subjective = "command", False

        def run(self, candidate, context):
            ok = candidate.strip() == "good"
            return Signal(self.name, ok, None if ok else ErrorCode.COMMAND_FAILED, "exit 1", score=1.0)

    result = refine("t", [PrintsPassedButExits()], budget=Budget(max_reflections=0),
                    session=Session(model=ScriptedModel([answer("bad"), answer("good")])))
    assert result.passed and result.best == "good" and result.verdict.status.value == "PASS"


def test_a_check_that_says_it_is_subjective_never_makes_a_pass_objective():
    class Judge:  # a user's own judge: subjective, returning a plain signal
        name, subjective = "my-judge", True

        def run(self, candidate, context):
            return Signal(self.name, True)

    result = refine("t", [Judge()], session=Session(model=ScriptedModel([answer("anything")])))
    assert result.stop_reason is StopReason.ANSWERED_UNVERIFIED and result.verdict.subjective


def test_a_judge_s_score_never_outranks_what_the_tests_measured():
    class Tests:
        name, subjective = "tests", False

        def run(self, candidate, context):
            return Signal(self.name, False, ErrorCode.TEST_FAILED, "some failed",
                          score={"a": 0.5, "b": 0.9}[candidate.strip()])

    class Fond:  # prefers a
        name, subjective = "judge", True

        def run(self, candidate, context):
            return Signal(self.name, True, score=1.0 if candidate.strip() == "a" else 0.0, subjective=True)

    result = refine("t", [Tests(), Fond()], max_attempts=2, budget=Budget(max_reflections=0),
                    session=Session(model=ScriptedModel([answer("a"), answer("b")])))
    assert result.best == "b"


def test_a_lesson_with_every_field_at_its_cap_fits_the_reflector_s_reply():
    from reflexa.reflect.reflector import Reflection

    fields = ("failure_step", "observed_mismatch", "root_cause", "correction")
    full = {name: (f"{name}: wanted good but the output for one shows otherwise " * 9)[:300] for name in fields}
    full |= {"control": "none", "control_tool": "x" * 80, "control_arg": "y" * 80, "control_value": "z" * 300}
    Reflection.model_validate(full)  # every field at its cap, and valid
    model = ScriptedModel([answer("one"), json.dumps(full), answer("good")])
    result = refine("task", [Expect("good")], session=Session(model=model))
    assert result.passed and result.counters["lessons_discarded"] == 0
    assert full["correction"][:100] in model.prompts[2][-1]["content"]


def test_a_pinpointed_failing_test_is_revised_without_a_reflector_call():
    class Harness:  # says its failure names the value returned, as the code test harness does
        name, subjective = "tests", False

        def run(self, candidate, context):
            if candidate.strip() == "good":
                return Signal(self.name, True, score=1.0)
            return Signal(self.name, False, ErrorCode.TEST_FAILED,
                          f"AssertionError: assert f(2) == 3 failed: got {candidate.strip()}", pinpointed=True)

    model = ScriptedModel([answer("one"), answer("good")])  # no lesson scripted: a reflector call would fail
    result = refine("the task", [Harness()], session=Session(model=model))
    assert result.stop_reason is StopReason.PASSED and model.calls == 2
    assert result.counters["reflector_calls"] == 0 and result.counters["rule_repairs"] == 1
    assert "failed: got one" in model.prompts[1][-1]["content"]


def test_a_reflector_model_serves_the_reflector_s_calls_and_the_trace_names_it():
    """A small generator with a larger reflector: the reflector's one call goes to its own model, and the
    stored step says which model served it; the generator's steps name none (they are the run's model)."""
    generator = ScriptedModel([answer("one"), answer("good")])  # no lesson scripted: a reflector call would fail
    reflector = ScriptedModel([LESSON])
    reflector.name = "scripted:big"
    store = MemoryStore()
    result = refine("the task", [Expect("good", score=0.0)],
                    session=Session(model=generator, reflector_model=reflector, store=store))
    assert result.stop_reason is StopReason.PASSED
    assert generator.calls == 2 and reflector.calls == 1
    assert "return the right value" in generator.prompts[1][-1]["content"]  # its lesson reached the generator
    assert result.usage["reflector"].calls == 1  # one budget covers both models
    calls = [(s.role, s.payload().model) for s in store.steps(result.run_id) if s.kind == "model_call"]
    assert calls == [("generator", None), ("reflector", "scripted:big"), ("generator", None)]
    meta = store.get_run(result.run_id).meta
    assert meta["model"] == "scripted" and meta["reflector_model"] == "scripted:big"


def test_a_session_given_its_model_reflects_on_it_unless_given_a_reflector(monkeypatch, tmp_path):
    """$REFLEXA_REFLECTOR_MODEL comes with the configured model; a session given its own model keeps it."""
    (tmp_path / "gen.json").write_text(json.dumps([answer("one"), answer("good")]))
    (tmp_path / "ref.json").write_text(json.dumps([LESSON]))
    monkeypatch.setenv("REFLEXA_MODEL", f"scripted:{tmp_path / 'gen.json'}")
    monkeypatch.setenv("REFLEXA_REFLECTOR_MODEL", f"scripted:{tmp_path / 'ref.json'}")
    configured = Session()
    assert refine("the task", [Expect("good", score=0.0)], session=configured).passed
    assert configured.model.calls == 2 and configured.reflector_model.calls == 1

    own = ScriptedModel([answer("one"), LESSON, answer("good")])
    session = Session(model=own)
    assert refine("the task", [Expect("good", score=0.0)], session=session).passed
    assert own.calls == 3 and session.reflector_model is None


def test_a_reflector_model_that_fails_costs_the_lesson_not_the_run():
    """A reflector on its own model is optional help: when its backend fails, the failure is in the trace,
    the lesson is discarded and the run goes on; the run's own model failing still ends the run."""
    generator = ScriptedModel([answer("one"), answer("good")])
    reflector = ScriptedModel([ModelUnavailable("reflector server down")])
    reflector.name = "openai:big"
    store = MemoryStore()
    result = refine("the task", [Expect("good", score=0.0)],
                    session=Session(model=generator, reflector_model=reflector, store=store))
    assert result.stop_reason is StopReason.PASSED and result.counters["lessons_discarded"] == 1
    (failed,) = [s.payload() for s in store.steps(result.run_id) if s.role == "reflector"]
    assert failed.failed and failed.model == "openai:big" and "reflector server down" in failed.error
    alone = refine("the task", [Expect("good", score=0.0)],
                   session=Session(model=ScriptedModel([answer("one"), ModelUnavailable("down")])))
    assert alone.stop_reason is StopReason.ERROR


def test_select_keeps_the_passing_candidate_whose_behaviour_most_others_share():
    """Three candidates pass the visible assert; on the calls the model writes, two agree and the greedy one
    stands alone: the first of the two is chosen."""
    from reflexa import PythonScriptCheck

    probe = {"calls": ["ident(0)", "ident(2)", "ident(-3)", "print('x')"]}
    model = ScriptedModel(["```\ndef ident(x):\n    return 1\n```", "```\ndef ident(x):\n    return x\n```",
                           "```\ndef ident(x):\n    return x * 1\n```", probe])
    store = MemoryStore()
    result = refine("Write ident(x), which returns x.", [PythonScriptCheck("assert ident(1) == 1")], select=3,
                    session=Session(model=model, store=store))
    assert result.stop_reason is StopReason.PASSED and "return x\n" in result.best + "\n"
    [selected] = [s.payload() for s in store.steps(result.run_id) if s.kind == "selected"]
    assert (selected.passing, selected.clusters, selected.chosen) == ([1, 2, 3], [2, 1], 2)
    assert selected.calls == ["ident(0)", "ident(2)", "ident(-3)"]  # a call of another function is dropped


def test_select_with_no_passing_candidate_revises_the_best_and_goes_on():
    model = ScriptedModel([answer("bad one"), answer("bad two"), answer("bad three"), answer("good")])
    result = refine("task", [Expect("good")], select=3, session=Session(model=model))
    assert result.stop_reason is StopReason.PASSED and result.iterations == 4
    assert "wanted good, got bad one" in model.prompts[3][-1]["content"]  # the best (the first) is revised


def test_select_is_a_spec_field_a_cli_flag_and_an_eval_strategy():
    from reflexa.eval import parse_strategies
    from reflexa.tasks import TaskSpec

    assert TaskSpec.parse({"task": "t", "regex": "x", "select": 4}).select == 4
    with pytest.raises(ConfigError):
        TaskSpec.parse({"task": "t", "regex": "x", "select": 0})
    [chosen, baseline] = parse_strategies("select@4,resample@=select@4")
    assert chosen.options == {"select": 4} and baseline.match == "select@4"
