"""No model reply crashes a loop: Hypothesis feeds refine, react, research, trials and plan arbitrary
replies (text with lone surrogates, deep JSON, wrong shapes, reserved tool names, empty answers, hostile
citations, broken goal trees) and every run must end with a stop reason in the store, never an exception
and never `running`.

`REFLEXA_FUZZ_EXAMPLES` sets the examples per loop (CI: 300, so 1,500 in all); `bench/soak/fuzz_soak.py`
runs more, and with `REFLEXA_FUZZ_LOG=FILE` each run appends a JSON line (loop, replies given, replies
used, stop reason) for it to count.
"""

from __future__ import annotations

import json
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reflexa import (
    ScriptedModel,
    Session,
    Signal,
    SQLiteStore,
    StopReason,
    plan,
    react,
    refine,
    research,
    tool,
    trials,
)
from reflexa.search import Evidence
from reflexa.types import ErrorCode

EXAMPLES = int(os.environ.get("REFLEXA_FUZZ_EXAMPLES", "300"))
LOG = os.environ.get("REFLEXA_FUZZ_LOG")
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not os.environ.get("REFLEXA_FUZZ_RANDOM"),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)

any_text = st.text(alphabet=st.characters(blacklist_categories=()), max_size=200)  # surrogates included
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), any_text)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(any_text, inner, max_size=4)),
    max_leaves=20,
)
deep = st.integers(1, 3000).map(lambda n: "[" * n + "]" * n)
deep_object = st.integers(1, 3000).map(lambda n: '{"action": ' + '{"a": ' * n + "1" + "}" * n + "}")
tool_names = st.one_of(
    st.sampled_from(["lookup", "charge", "final_answer", "(page)", "(invalid)", "", "nope"]), any_text
)
args = st.one_of(
    st.dictionaries(st.sampled_from(["key", "amount", "answer", "page", "sql"]), json_leaf, max_size=3), json_value
)
action = st.builds(
    lambda t, a, th, c: {"action": {"thought": th, "tool": t, "args": a, "confidence": c}},
    tool_names,
    args,
    any_text,
    st.one_of(st.none(), st.floats(allow_nan=True)),
)
lesson = st.fixed_dictionaries(
    {"failure_step": any_text, "observed_mismatch": any_text, "root_cause": any_text, "correction": any_text},
    optional={
        "control": st.sampled_from(["none", "block_tool", "block_value", "force_action", "bogus"]),
        "control_tool": tool_names,
        "control_value": any_text,
    },
)
citation_text = st.lists(
    st.sampled_from(
        [
            "Paris [1].",
            "moved [99].",
            "[1, 99]",
            "[ 2 ]",
            "http://evil.example",
            "[x](http://evil.example)",
            "\ud800",
            "[UNCERTAIN: x]",
            "plain.",
        ]
    ),
    max_size=6,
).map(" ".join)
draft = st.builds(
    lambda a, m, q: {"answer": a, "reflection": {"missing": m, "superfluous": []}, "search_queries": q},
    st.one_of(citation_text, any_text),
    st.lists(any_text, max_size=3),
    st.lists(any_text, max_size=4),
)
names = st.one_of(st.sampled_from(["a", "b", "c"]), any_text)
subgoal = st.fixed_dictionaries(
    {"name": names, "task": any_text, "depends_on": st.lists(names, max_size=2)},
    optional={"tools": st.lists(tool_names, max_size=2), "loop": st.sampled_from(["react", "refine", "x"])},
)
goal_tree = st.fixed_dictionaries(
    {"goal": any_text, "subgoals": st.lists(subgoal, max_size=4)}, optional={"facts": st.lists(any_text, max_size=3)}
)
reply = st.one_of(
    any_text,
    goal_tree,
    json_value,
    deep,
    deep_object,
    action,
    lesson,
    draft,
    st.builds(lambda t: f"Plan: x\n```python\n{t}\n```", any_text),
)
replies = st.lists(reply, max_size=10)


class Expect:
    name, subjective = "expect", False

    def run(self, candidate, context):
        ok = candidate.strip() == "good"
        return Signal("expect", ok, None if ok else ErrorCode.TEST_FAILED, "wanted good", score=0.5)


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    if key == "bad":
        raise ValueError("refused")
    return "x" * 3000 if key == "big" else f"value of {key}"


@tool(side_effect=True)
def charge(amount: int) -> str:
    """Charge an amount."""
    return f"charged {amount}"


class Corpus:
    name = "fuzz"

    def search(self, query, k):
        return [Evidence("e1", "https://good.example/a", "Title http://evil.example", "Paris is the capital.")]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return SQLiteStore(tmp_path_factory.mktemp("fuzz") / "trace.db")


def finished(store, result, loop: str, items: list, model: ScriptedModel) -> None:
    assert isinstance(result.stop_reason, StopReason)
    record = store.get_run(result.run_id)
    assert record is not None and record.status == "finished", record
    if LOG:
        with open(LOG, "a", encoding="utf-8") as out:
            out.write(json.dumps({"loop": loop, "replies": len(items), "used": min(model.calls, len(items)),
                                  "stop": str(result.stop_reason), "error": (result.error or "")[:120]}) + "\n")


@FUZZ
@given(replies)
def test_refine_survives_any_reply(store, items):
    model = ScriptedModel(items)
    finished(store, refine("task", [Expect()], session=Session(model=model, store=store)), "refine", items, model)


@FUZZ
@given(replies)
def test_react_survives_any_reply(store, items):
    model = ScriptedModel(items)
    result = react(
        "goal",
        [lookup, charge],
        validator=lambda a: None if a else "empty",
        session=Session(model=model, store=store),
        max_steps=6,
    )
    finished(store, result, "react", items, model)
    if result.passed:
        assert result.output and result.output.strip()  # an empty final answer is never a pass


@FUZZ
@given(replies)
def test_research_survives_any_reply(store, items):
    model = ScriptedModel(items)
    result = research("What is the capital of France?", Corpus(), session=Session(model=model, store=store))
    finished(store, result, "research", items, model)
    text = result.output or ""
    assert "evil.example" not in text
    cited = {int(n) for n in re.findall(r"\[(\d+)\]", text.split("References:")[0])}
    assert cited <= {1}  # only retrieved evidence is ever cited


@FUZZ
@given(replies)
def test_trials_survive_any_reply(store, items):
    model = ScriptedModel(items)
    session = Session(model=model, store=store)

    def attempt(t):
        return refine("task", [Expect()], lessons=t.lessons, budget=t.budget, meta=t.meta, resume=t.resume,
                      session=session, max_attempts=2)

    finished(store, trials("task", attempt, session=session, max_trials=2), "trials", items, model)


@FUZZ
@given(replies)
def test_plan_survives_any_reply(store, items):
    model = ScriptedModel(items)
    result = plan("goal", [lookup, charge], validator=lambda a: None if a else "empty",
                  session=Session(model=model, store=store), max_steps=3)
    finished(store, result, "plan", items, model)
    if result.passed:
        assert result.output and result.output.strip()


def test_a_reply_cut_at_max_tokens_that_holds_a_lone_surrogate_ends_the_run_cleanly(tmp_path):
    """A cut-off structured reply is read for a loop before it is asked again; its lone surrogate once raised
    UnicodeEncodeError there, and the run was stored as ERROR."""
    cut = '{"action": {"thought": "' + "\ud800 again " * 400
    store = SQLiteStore(tmp_path / "t.db")

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return "value \udfff"

    final = {"action": {"thought": "done", "tool": "final_answer", "args": {"answer": "x\ud800"}}}
    result = react("q", [lookup], session=Session(model=ScriptedModel([cut, cut, final]), store=store),
                   validator=lambda answer: None)
    assert result.stop_reason is StopReason.PASSED and result.output == "x\ufffd"
    assert store.get_run(result.run_id).status == "finished"
