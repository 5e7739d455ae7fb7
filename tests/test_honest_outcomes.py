"""Outcomes say only what was checked; one engine for every loop; typed steps; resume for every loop.
Each test here is a case the issue "Honest outcomes, and one engine" found, through the CLI where it was
found through the CLI."""

import json
import random
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reflexa import (
    Budget,
    MemoryStore,
    ScriptedModel,
    Session,
    Signal,
    SQLiteStore,
    StopReason,
    react,
    refine,
    research,
)
from reflexa.cli.app import app
from reflexa.cli.render import RENDERERS
from reflexa.errors import RunInterrupted
from reflexa.search import Evidence, LocalCorpus, SearchError
from reflexa.tools import ToolRegistry, tool
from reflexa.types import PAYLOADS, ErrorCode

DOCS = Path(__file__).parent / "fixtures" / "docs"


class Expect:
    """Passes exactly "good"; anything else fails with `score` (0 = FAIL, else revise) and says what it got."""

    name, subjective = "expect", False

    def __init__(self, score: float = 0.0) -> None:
        self.score = score

    def run(self, candidate, context):
        ok = candidate.strip() == "good"
        return Signal("expect", ok, None if ok else ErrorCode.TEST_FAILED, f"wanted good, got {candidate}",
                      score=self.score)
runner = CliRunner()


def draft(answer, missing=(), queries=("placeholder query",)):
    return {
        "answer": answer,
        "reflection": {"missing": list(missing), "superfluous": []},
        "search_queries": list(queries),
    }


def act(tool_name, **args):
    return {
        "action": {
            "thought": f"use {tool_name} {sorted(args.items())}",
            "tool": tool_name,
            "args": args,
            "confidence": 0.9,
        }
    }


@pytest.fixture()
def docs(tmp_path):
    folder = tmp_path / "docs"
    shutil.copytree(DOCS, folder)
    return folder


def corpus_of(folder):
    corpus = LocalCorpus.for_folder(folder)
    corpus.index(folder)
    return corpus


def test_research_without_a_search_is_not_a_pass_through_the_cli(tmp_path, docs):
    replies = tmp_path / "r.json"
    replies.write_text(json.dumps([draft("It is tall.", missing=["more information"])]))
    result = runner.invoke(
        app, ["research", "How tall is the Eiffel Tower?", "--corpus", str(docs), "--model", f"scripted:{replies}"]
    )
    assert result.exit_code == 4, result.output
    assert "ANSWERED_UNVERIFIED" in result.output and "stop: PASSED" not in result.output


def test_a_dangling_citation_with_no_evidence_is_removed_and_not_a_pass(docs):
    model = ScriptedModel(
        [draft("Paris is the capital [1].", missing=["more information"]), draft("Paris is the capital [1].")]
    )
    result = research("What is the capital of France?", corpus_of(docs), session=Session(model=model))
    assert result.stop_reason is not StopReason.PASSED
    assert "[1]" not in result.output and "UNCERTAIN" in result.output
    assert result.verdict is not None and result.verdict.status != "PASS"


def test_failed_searches_and_no_search_are_never_both_claimed():
    class Offline:
        name = "offline"

        def search(self, query, k):
            raise SearchError("network unreachable")

    model = ScriptedModel(
        [
            draft("Unknown.", missing=["Eiffel Tower height metres"], queries=["Eiffel Tower height"]),
            draft("Still unknown.", missing=["more information"]),
        ]
    )
    result = research("How tall is the Eiffel Tower?", Offline(), session=Session(model=model))
    assert "Could not verify" in result.output
    assert "no new evidence was sought" not in result.output.lower()
    assert result.stop_reason is StopReason.ANSWERED_UNVERIFIED


def test_research_goes_through_the_engine(docs):
    model = ScriptedModel(
        [
            draft("?", missing=["Eiffel Tower height metres"], queries=["Eiffel Tower height"]),
            draft("It is 330 metres tall [1]."),
        ]
    )
    result = research("How tall is the Eiffel Tower?", corpus_of(docs), session=Session(model=model))
    assert result.stop_reason is StopReason.PASSED
    assert result.counters["gate_calls"] >= 2 and result.counters["rule_repairs"] == 1


def test_citation_forms_other_than_n_fail_the_audit(docs):
    model = ScriptedModel(
        [
            draft("?", missing=["Eiffel Tower height metres"], queries=["Eiffel Tower height"]),
            draft("It is 330 metres tall [1, 99]. Built [ 99 ]. See [link](http://evil.example)."),
            draft("It is 330 metres tall [1, 99]. Built [ 99 ]. See [link](http://evil.example)."),
        ]
    )
    result = research("How tall is the Eiffel Tower?", corpus_of(docs), session=Session(model=model))
    assert "99" not in result.output and "evil.example" not in result.output
    assert result.stop_reason is not StopReason.PASSED


def test_a_misspelt_argument_is_replaced_not_merged():
    seen = []

    @tool
    def refund(order_id: int, amount: float) -> str:
        """Refund part of an order."""
        seen.append((order_id, amount))
        return "ok"

    typo = act("refund", order_id=1, amont=10.0)  # fails the schema, and again when asked once more
    model = ScriptedModel([typo, typo, act("final_answer", answer="done")])
    result = react("Refund 10 on order 1", [refund], validator=lambda a: None, session=Session(model=model))
    assert result.passed and seen == [(1, 10.0)] and result.counters["rule_repairs"] == 1


def test_a_registry_reused_across_runs_does_not_carry_blocks():
    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        if key == "bad":
            raise ValueError("the backend refused the key")
        return f"value of {key}"

    registry = ToolRegistry([lookup])
    block = {
        "failure_step": "1",
        "observed_mismatch": "the backend refused the key",
        "root_cause": "bad tool",
        "correction": "stop using lookup",
        "control": "block_tool",
        "control_tool": "lookup",
    }
    first = ScriptedModel([act("lookup", key="bad"), block, act("lookup", key="x"), act("final_answer", answer="?")])
    react("find", registry, session=Session(model=first), max_steps=3)
    second = ScriptedModel([act("lookup", key="good"), act("final_answer", answer="value of good")])
    result = react("find", registry, validator=lambda a: None, session=Session(model=second))
    assert result.passed and result.counters["gate_signals"] == 0


def test_actions_that_differ_only_in_numbers_are_not_repeats():
    refunded = []

    @tool(side_effect=True)
    def refund(order_id: int) -> str:
        """Refund an order."""
        refunded.append(order_id)
        return f"refunded {order_id}"

    model = ScriptedModel(
        [{"action": {"thought": f"refund order {n}", "tool": "refund", "args": {"order_id": n}}} for n in (1, 2, 3)]
        + [act("final_answer", answer="done")]
    )
    result = react("Refund orders 1, 2 and 3", [refund], validator=lambda a: None, session=Session(model=model))
    assert result.passed and refunded == [1, 2, 3]


def test_refine_resumes_from_python_and_from_the_cli(tmp_path):
    path = tmp_path / "trace.db"

    def interrupt(event, data):
        if event == "step" and data.kind == "checkpoint":
            raise KeyboardInterrupt

    lesson = {"failure_step": "1", "observed_mismatch": "wanted good", "root_cause": "r", "correction": "write good"}
    with pytest.raises(RunInterrupted) as stopped:
        refine(
            "t",
            [Expect()],
            session=Session(
                model=ScriptedModel(["```\nbad\n```", lesson]), store=SQLiteStore(path), observer=interrupt
            ),
        )
    record = SQLiteStore(path).get_run(stopped.value.run_id)
    assert record.status == "interrupted" and record.stop_reason == "INTERRUPTED"
    resumed = ScriptedModel(["```\ngood\n```"])
    result = refine(
        "t", [Expect()], resume=stopped.value.run_id, session=Session(model=resumed, store=SQLiteStore(path))
    )
    assert result.passed and result.iterations == 2 and "write good" in resumed.prompts[0][-1]["content"]


def _stopped_refine(store, generator, **spec):
    """A refine run the CLI started and a kill stopped before any step: its record holds its task spec."""
    from reflexa.runtime import Run

    run = Run("refine", "Write f() returning 2", generator, budget=Budget(), store=store,
              meta={"spec": {"loop": "refine", "task": "Write f() returning 2", **spec}})
    store.release_lease(run.run_id, run.owner)  # the process that started it is gone
    return run


TEST_F = "from solution import f\n\ndef test_f():\n    assert f() == 2\n"


def test_cli_resumes_a_killed_refine_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "test_solution.py").write_text(TEST_F)
    trace = tmp_path / "trace.db"
    run = _stopped_refine(SQLiteStore(trace), ScriptedModel([]), tests=str(tmp_path / "test_solution.py"),
                          workdir=str(tmp_path))
    replies = tmp_path / "r.json"
    replies.write_text(json.dumps(["```python\ndef f():\n    return 2\n```"]))
    result = runner.invoke(app, ["resume", run.run_id[:10], "--model", f"scripted:{replies}", "--trace", str(trace)])
    assert result.exit_code == 0, result.output
    assert "stop: PASSED" in result.output


def test_cli_resume_reads_its_own_paths_from_here_and_rebuilds_the_run_s_model(tmp_path, monkeypatch):
    """The run started in another directory: --trace is relative to where `resume` is typed, not to the
    run's directory; with no --model, the model is the one the run's spec names (its file absolute)."""
    start, here = tmp_path / "start", tmp_path / "here"
    start.mkdir()
    here.mkdir()
    (start / "test_solution.py").write_text(TEST_F)
    (here / "r.json").write_text(json.dumps(["```python\ndef f():\n    return 2\n```"]))
    monkeypatch.chdir(here)
    run = _stopped_refine(SQLiteStore(here / "trace.db"), ScriptedModel([]), tests="test_solution.py",
                          workdir=str(start), model=f"scripted:{here / 'r.json'}")
    result = runner.invoke(app, ["resume", run.run_id[:10], "--trace", "trace.db"])
    assert result.exit_code == 0 and "stop: PASSED" in result.output, result.output


def test_cli_resume_writes_the_best_candidate_to_the_run_s_out_and_finds_a_relative_trace(tmp_path, monkeypatch):
    """A run started with --out ends, once resumed, as it would have: the answer in its --out file, in the
    folder the run started in. A relative $REFLEXA_TRACE is the one where `resume` is typed."""
    start = tmp_path / "start"
    (start / "sub").mkdir(parents=True)
    (start / "test_solution.py").write_text(TEST_F)
    run = _stopped_refine(SQLiteStore(start / "trace.db"), ScriptedModel([]), tests="test_solution.py",
                          out="solution.py", workdir=str(start))
    (start / "r.json").write_text(json.dumps(["```python\ndef f():\n    return 2\n```"]))
    monkeypatch.chdir(start / "sub")
    monkeypatch.setenv("REFLEXA_TRACE", "../trace.db")
    result = runner.invoke(app, ["resume", run.run_id[:10], "--model", str(f"scripted:{start / 'r.json'}")])
    assert result.exit_code == 0 and "stop: PASSED" in result.output, result.output
    assert "return 2" in (start / "solution.py").read_text()
    assert not (tmp_path / "trace.db").exists() and not (start / "sub" / "solution.py").exists()


def test_cli_resume_keeps_the_run_s_reflection_off(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "test_solution.py").write_text(TEST_F)
    run = _stopped_refine(SQLiteStore(tmp_path / "trace.db"), ScriptedModel([]), tests="test_solution.py",
                          workdir=str(tmp_path), reflect=False)
    (tmp_path / "r.json").write_text(json.dumps(["```python\ndef f():\n    return 1\n```",
                                                 "```python\ndef f():\n    return 2\n```"]))
    result = runner.invoke(app, ["resume", run.run_id[:10], "--model", "scripted:r.json", "--trace", "trace.db",
                                 "--json"])
    data = json.loads(result.output)
    assert data["stop_reason"] == "PASSED" and "reflector" not in data["usage"], result.output


def test_resume_hint_for_python_runs_is_valid(tmp_path):
    from reflexa.runtime import Run

    store = SQLiteStore(tmp_path / "t.db")
    run = Run("trials", "t", ScriptedModel([]), budget=Budget(), store=store)
    result = runner.invoke(app, ["resume", run.run_id[:8], "--trace", str(tmp_path / "t.db")])
    assert result.exit_code == 2 and f"trials(..., resume='{run.run_id[:12]}')" in " ".join(result.output.split())


def test_every_step_kind_round_trips_and_has_a_renderer():
    from reflexa.loops.steps import STEPS

    assert set(RENDERERS) == set(PAYLOADS.values()) == set(STEPS)
    store = MemoryStore()
    model = ScriptedModel(
        [
            "```\nbad\n```",
            {"failure_step": "1", "observed_mismatch": "wanted good", "root_cause": "r", "correction": "c"},
            "```\ngood\n```",
        ]
    )

    result = refine("t", [Expect(score=0.5)], session=Session(model=model, store=store))
    for step in store.steps(result.run_id):
        data = step.payload()
        assert data is not None, step.kind
        assert type(data).from_dict(data.to_dict()) == data


def test_an_interrupted_run_is_never_left_running(tmp_path):
    @tool
    def boom() -> str:
        """Fails in a way no tool should."""
        return "ok"

    def crash(event, data):
        if event == "step" and data.kind == "react":
            raise RuntimeError("a bug in an observer")

    store = SQLiteStore(tmp_path / "t.db")
    with pytest.raises(RuntimeError):
        react("q", [boom], session=Session(model=ScriptedModel([act("boom")]), store=store, observer=crash))
    record = store.runs()[0]
    assert record.status == "finished" and record.stop_reason == "ERROR"
    assert "RuntimeError" in record.result["error"]


def test_a_judge_alone_never_passes():
    from reflexa import LLMJudge

    model = ScriptedModel(["```\nanything\n```", {"status": "PASS", "reason": "looks fine"}])
    result = refine("t", [LLMJudge()], session=Session(model=model))
    assert result.stop_reason is StopReason.ANSWERED_UNVERIFIED and not result.passed


def test_trials_share_one_budget():
    from reflexa import Budget, trials

    class Never:
        name, subjective = "never", False

        def run(self, candidate, context):
            return Signal("never", False, ErrorCode.TEST_FAILED, "no", score=0.0)

    inner = ScriptedModel(["```\nx\n```"] * 10)
    outer = ScriptedModel([{"failure_step": "1", "observed_mismatch": "no", "root_cause": "r", "correction": "c"}] * 5)
    result = trials(
        "t",
        lambda t: refine(
            "t", [Never()], lessons=t.lessons, budget=t.budget, max_attempts=1, session=Session(model=inner)
        ),
        session=Session(model=outer),
        max_trials=5,
        budget=Budget(max_calls=3),
    )
    assert result.total_usage.calls <= 4  # overshoot of at most one call
    assert result.stop_reason is StopReason.BUDGET_CALLS


def test_evidence_urls_and_title_urls_never_reach_the_output():
    class Hostile:
        name = "hostile"

        def search(self, query, k):
            return [
                Evidence(
                    "e1",
                    "https://good.example/page",
                    "Tower http://evil.example/title",
                    "The tower is 330 metres tall. Sources: http://evil.example/body",
                )
            ]

    model = ScriptedModel(
        [
            draft("?", missing=["Eiffel Tower height metres"], queries=["Eiffel Tower height"]),
            draft("It is 330 metres tall [1]. Sources: http://evil.example/body"),
        ]
    )
    result = research("How tall is the Eiffel Tower?", Hostile(), session=Session(model=model))
    assert "evil.example" not in result.output and "https://good.example/page" in result.output


def test_a_run_another_live_process_works_on_cannot_be_resumed(tmp_path):
    import os
    import subprocess
    import sys

    from reflexa import RunLeased
    from reflexa.runtime import Run

    path = tmp_path / "t.db"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from reflexa import Budget, ScriptedModel, SQLiteStore; from reflexa.runtime import Run; "
        f"run = Run('refine', 't', ScriptedModel([]), budget=Budget(), store=SQLiteStore({str(path)!r})); "
        "print(run.run_id, flush=True); time.sleep(60)")], stdout=subprocess.PIPE, text=True)
    try:
        run_id = holder.stdout.readline().strip()
        with pytest.raises(RunLeased) as refused:
            Run("refine", "t", ScriptedModel([]), budget=Budget(), store=SQLiteStore(path),
                resume=run_id)
        assert str(holder.pid) in str(refused.value) and "since" in str(refused.value)
    finally:
        holder.kill()
        holder.wait()
    # The holder is gone: its lease is stale, and the run can be taken over.
    run = Run("refine", "t", ScriptedModel([]), budget=Budget(), store=SQLiteStore(path),
              resume=run_id)
    assert run.run_id == run_id and os.getpid() > 0


def test_offline_web_search_through_the_cli_never_claims_no_search_was_sought(tmp_path, monkeypatch):
    import reflexa.search.web as web

    class Offline:
        name = "wikipedia"

        def search(self, query, k):
            raise SearchError("wikipedia: network unreachable")

    monkeypatch.setattr(web, "backend", lambda name: Offline())  # what an offline machine answers
    replies = tmp_path / "r.json"
    replies.write_text(json.dumps([draft("It is tall.", missing=["Eiffel Tower height metres"],
                                         queries=["Eiffel Tower height"]),
                                   draft("It is tall.", missing=["more information"])]))
    result = runner.invoke(app, ["research", "How tall is the Eiffel Tower?", "--search", "wikipedia",
                                 "--model", f"scripted:{replies}"])
    assert result.exit_code == 4, result.output
    assert "Could not verify" in result.output and "no new evidence was sought" not in result.output.lower()


def test_a_reply_cut_off_at_max_tokens_is_asked_again_with_more_room_then_salvaged(docs):
    words = [f"w{n}" for n in range(300)]
    rng = random.Random(7)
    long_answer = "Paris is the capital of France. " + " ".join(rng.choice(words) for _ in range(1200))
    cut = json.dumps(draft(long_answer, missing=["more information"]))
    model = ScriptedModel([cut, cut])  # cut off both times: longer than either call's max_tokens
    result = research("What is the capital of France?", corpus_of(docs), session=Session(model=model))
    assert model.calls == 2
    assert model.prompts[1] == model.prompts[0]  # the same question again, not a lecture about the schema
    assert result.stop_reason is StopReason.ANSWERED_UNVERIFIED and "Paris is the capital" in result.output
    assert any("unusable" in note for note in result.notes)


def test_a_draft_unusable_twice_with_nothing_to_salvage_is_unrecoverable_not_an_error(docs):
    """It ended ERROR (exit 1), which says a server is down or reflexa has a bug."""
    model = ScriptedModel(["I think it is Paris.", "Paris, I said."])
    result = research("What is the capital of France?", corpus_of(docs), session=Session(model=model))
    assert result.stop_reason is StopReason.UNRECOVERABLE and "the draft was unusable" in result.error
    model = ScriptedModel(["I think it is Paris.", "Paris, I said."])
    spent = research("What is the capital of France?", corpus_of(docs), session=Session(model=model),
                     budget=Budget(max_calls=1))  # no call left to ask again: the budget stopped it
    assert model.calls == 1 and spent.stop_reason is StopReason.BUDGET_CALLS


def test_a_reply_cut_off_in_a_loop_is_not_asked_again(docs):
    loop = "".join(f"If the year is {1980 + n}, search for the name in the table. " for n in range(120))
    model = ScriptedModel([json.dumps(draft(loop, missing=["more information"]))] * 2)
    result = research("What is the capital of France?", corpus_of(docs), session=Session(model=model))
    assert model.calls == 1  # greedy decoding would write the same loop again, only longer
    assert result.stop_reason is StopReason.ANSWERED_UNVERIFIED and "repeats itself" in " ".join(result.notes)


def test_a_reflection_redone_on_resume_still_counts_against_the_quota(tmp_path):
    path = tmp_path / "trace.db"

    def kill_after_the_reflector(event, data):  # the lesson is paid for, the checkpoint after it not written
        if event == "step" and data.kind == "model_call" and data.role == "reflector":
            raise KeyboardInterrupt

    lesson = {"failure_step": "1", "observed_mismatch": "got bad", "root_cause": "r", "correction": "write good"}
    with pytest.raises(RunInterrupted) as stopped:
        refine("t", [Expect()], budget=Budget(max_reflections=1), session=Session(
            model=ScriptedModel(["```\nbad\n```", lesson]), store=SQLiteStore(path), observer=kill_after_the_reflector))
    resumed = ScriptedModel(["```\nbad\n```", lesson, "```\nworse\n```", "```\ngood\n```"])
    result = refine("t", [Expect()], budget=Budget(max_reflections=1), resume=stopped.value.run_id,
                    session=Session(model=resumed, store=SQLiteStore(path)))
    calls = [s for s in SQLiteStore(path).steps(result.run_id) if s.kind == "model_call" and s.role == "reflector"]
    assert len(calls) == 1  # the quota is one reflector call for the run, not one for each process
