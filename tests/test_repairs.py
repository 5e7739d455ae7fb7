"""The learned repair policy: failure classes, the choice it makes from its record, a frozen policy, and refine
under it (what it records, what the next attempt is shown)."""

import json

from test_cli import EXAMPLE, LESSON, RIGHT, WRONG, invoke, replies

from reflexa import MemoryStore, RepairPolicy, ScriptedModel, Session, Signal, StopReason, refine
from reflexa.loops.refine import RefineState
from reflexa.reflect.repairs import MIN_TRIES, NAMESPACE, failure_class
from reflexa.trace import open_store
from reflexa.types import ErrorCode

CLASS = "assert-value/first"


def failed(message: str, code: ErrorCode = ErrorCode.TEST_FAILED, pinpointed: bool = False) -> Signal:
    return Signal("tests", False, code, message, pinpointed=pinpointed)


def test_a_failure_s_class_says_what_failed_and_after_what():
    assert failure_class(failed("AssertionError: assert f(2) == 3 failed: got 4", pinpointed=True), "first") == CLASS
    assert failure_class(failed("AssertionError: assert f(2) == 3"), "revision") == "assert/revision"
    assert failure_class(failed("SyntaxError: invalid syntax at `solution.py:3`"), "sample") == "syntax/sample"
    assert failure_class(failed("NameError: name 'x' is not defined at `solution.py:3: in f`", pinpointed=True),
                         "first") == "crash-line/first"
    assert failure_class(failed("ValueError: bad"), "first") == "crash/first"
    assert failure_class(failed("2 of 5 tests failed: test_a: assert 1 == 2"), "first") == "pytest/first"
    assert failure_class(failed("took too long", ErrorCode.TIMEOUT), "first") == "timeout/first"
    assert failure_class(failed("exit 1", ErrorCode.COMMAND_FAILED), "revision") == "command_failed/revision"


def record(policy: RepairPolicy, repair: str, tries: int, conversions: int, tokens: int, model: str = "m",
           klass: str = CLASS) -> None:
    for n in range(tries):
        policy.record(model, "refine", klass, repair, converted=n < conversions, tokens=tokens)


def test_a_learning_policy_tries_each_repair_then_keeps_the_one_that_converts_more_per_token():
    policy = RepairPolicy(MemoryStore())
    tried = []
    for _ in range(2 * MIN_TRIES):
        choice = policy.choose("m", "refine", CLASS, "t")
        tried.append(choice.repair)
        assert "learning" in choice.why
        record(policy, choice.repair, 1, int(choice.repair == "sample"), 300)
    assert tried == ["revise", "sample"] * MIN_TRIES  # the one tried less; the revision on a tie
    choices = [policy.choose("m", "refine", CLASS, f"task {i}") for i in range(60)]
    probes = [c for c in choices if c.repair == "revise"]
    assert all("probe" in c.why for c in probes) and 1 <= len(probes) <= 15
    assert "sample 4/4 at 300 tokens" in choices[0].why
    # Cheaper conversions win: revise converting 3 of 4 at a tenth of the tokens beats sample's 4 of 4.
    record(policy, "revise", MIN_TRIES, MIN_TRIES, 30)
    assert RepairPolicy(policy.store, frozen=True).choose("m", "refine", CLASS, "t").repair == "revise"


def test_a_frozen_policy_records_nothing_never_probes_and_revises_where_it_knows_too_little():
    store = MemoryStore()
    record(RepairPolicy(store), "sample", MIN_TRIES, MIN_TRIES, 100)
    record(RepairPolicy(store), "revise", MIN_TRIES, 0, 100)
    frozen = RepairPolicy(store, frozen=True)
    assert {frozen.choose("m", "refine", CLASS, f"task {i}").repair for i in range(60)} == {"sample"}
    frozen.record("m", "refine", CLASS, "sample", converted=False, tokens=100)
    assert frozen.tally("m", "refine", CLASS, "sample").tries == MIN_TRIES
    assert frozen.choose("m", "refine", "crash/first", "t").repair == "revise"
    assert frozen.choose("other model", "refine", CLASS, "t").repair == "revise"


class Harness:
    """Fails with a failing assert that names the value returned, as the code test harness does."""

    name, subjective = "tests", False

    def run(self, candidate, context):
        if candidate.strip() == "good":
            return Signal(self.name, True, score=1.0)
        return failed(f"AssertionError: assert f(2) == 3 failed: got {candidate.strip()}", pinpointed=True)


def answer(text: str) -> str:
    return f"Plan: think\n```\n{text}\n```"


def test_refine_under_a_learning_policy_records_each_repair_and_the_next_run_tries_the_other():
    store = MemoryStore()
    policy = RepairPolicy(store)
    model = ScriptedModel([answer("one"), answer("good"), answer("one"), answer("good")])
    revised = refine("the task", [Harness()], session=Session(model=model, store=store, repairs=policy))
    assert revised.passed and "failed: got one" in model.prompts[1][-1]["content"]
    assert policy.tally("scripted", "refine", CLASS, "revise").conversions == 1
    sampled = refine("the task", [Harness()], session=Session(model=model, store=store, repairs=policy))
    assert sampled.passed and model.prompts[3] == [{"role": "user", "content": "the task"}]  # fresh, no feedback
    tally = policy.tally("scripted", "refine", CLASS, "sample")
    assert (tally.tries, tally.conversions) == (1, 1) and tally.tokens > 0
    steps = store.steps(sampled.run_id)
    assert [s.payload().repair for s in steps if s.kind == "repair"] == ["sample"]
    assert all(type(s.payload()).from_dict(s.payload().to_dict()) == s.payload() for s in steps)


def test_a_frozen_policy_carries_a_learned_choice_to_another_run_and_changes_no_record():
    store = MemoryStore()
    record(RepairPolicy(store), "sample", MIN_TRIES, MIN_TRIES, 100, "scripted")
    record(RepairPolicy(store), "revise", MIN_TRIES, 0, 100, "scripted")
    before = store.get(NAMESPACE, f"scripted|refine|{CLASS}|sample")
    model = ScriptedModel([answer("one"), answer("one"), answer("one")])
    result = refine("the task", [Harness()], session=Session(model=model, store=store,
                                                               repairs=RepairPolicy(store, frozen=True)))
    assert result.stop_reason in (StopReason.MAX_ITERATIONS, StopReason.NO_PROGRESS)
    assert model.prompts[1] == [{"role": "user", "content": "the task"}]
    assert store.get(NAMESPACE, f"scripted|refine|{CLASS}|sample") == before


def test_the_repair_under_way_survives_a_checkpoint():
    state = RefineState("t", repairing=(CLASS, "sample", 120))
    assert RefineState.from_dict(json.loads(json.dumps(state.to_dict()))).repairing == (CLASS, "sample", 120)


def test_refine_learns_repairs_from_the_command_line_into_the_trace_store(tmp_path):
    trace = tmp_path / "t.db"
    result = invoke("refine", str(EXAMPLE / "task.md"), "--tests", str(EXAMPLE / "test_solution.py"), "--model",
                    replies(tmp_path, WRONG, LESSON, RIGHT), "--repairs", "learn", "--trace", str(trace), "--json")
    assert json.loads(result.output)["stop_reason"] == "PASSED"
    tally = open_store(str(trace)).get(NAMESPACE, "scripted|refine|pytest/first|revise")
    assert tally is not None and (tally["tries"], tally["conversions"]) == (1, 1) and tally["tokens"] > 0


class SeedsSeen(ScriptedModel):
    """Records the seed and temperature of each call (a reseeded copy shares the list)."""

    def _generate(self, messages, json_schema, max_tokens, temperature, **kwargs):
        self.seen.append((self.seed, temperature))
        return super()._generate(messages, json_schema, max_tokens, temperature, **kwargs)


def test_each_sampled_attempt_of_a_run_is_drawn_at_a_seed_of_its_own():
    store = MemoryStore()
    for klass in (CLASS, "assert-value/sample"):  # sample after a first attempt, and after a sample
        record(RepairPolicy(store), "sample", MIN_TRIES, MIN_TRIES, 10, "scripted", klass)
        record(RepairPolicy(store), "revise", MIN_TRIES, 0, 10, "scripted", klass)
    model = SeedsSeen([answer("one"), answer("two"), answer("three")])
    model.seen = []
    refine("the task", [Harness()], session=Session(model=model, store=store, repairs=RepairPolicy(store, frozen=True)))
    assert model.seen == [(0, 0.0), (0, 0.7), (1, 0.7)]
