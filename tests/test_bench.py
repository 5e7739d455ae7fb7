"""The benchmark scripts still run (with the scripted model and tiny sizes); their figures are in bench/README.md."""

import json
import lzma
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
RESULTS = ROOT / "bench" / "results"


def run(*args: str) -> str:
    out = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_loop_overhead_script():
    out = run("bench/speed/loop_overhead.py", "--iterations", "20", "--repeats", "1")
    assert "refine, sqlite store" in out and "import reflexa" in out


def test_faults_script(tmp_path):
    replies = tmp_path / "r.json"
    replies.write_text(
        json.dumps(
            [{"action": {"thought": f"t{i}", "tool": "final_answer", "args": {"answer": "400"}}} for i in range(100)]
        )
    )
    out = run(
        "bench/faults.py", "--model", f"scripted:{replies}", "--limit", "2", "--steps", "2", "--results", str(tmp_path),
        "--reflector-model", f"scripted:{replies}",
    )
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["reflector_model"] == "scripted"
    assert set(report["strategies"]) == {"none", "every-step", "reflexa", "reflexa-pass2", "reflexa-mcp"}
    assert report["strategies"]["reflexa"]["rows"][0]["success"]  # "400" answers "How many orders?"
    assert report["strategies"]["reflexa-mcp"]["rows"][0]["success"]  # the same, through an MCP server
    assert "experience hit rate" in out and (tmp_path / "traces.db").is_file()
    assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == 10  # 2 tasks x 5 strategies


def test_react_memory_script(tmp_path):
    out_file = tmp_path / "react_memory.json"
    out = run("bench/speed/react_memory.py", "--steps", "4", "--out", str(out_file))
    report = json.loads(out_file.read_text())
    assert report["runs"]["react"]["steps"] == 4 and report["heavy_modules_loaded"] == []
    assert report["react_mb"] > 0 and report["import_reflexa_mb"] > 0 and "ru_maxrss MiB" in out


def test_search_speed_script():
    out = run("bench/speed/search_speed.py", "--passages", "2000", "--queries", "20")
    assert "p50" in out and "cache hit" in out


def test_hotpotqa_bench_is_reflexa_eval_and_its_citations_replay(tmp_path):
    data = ROOT.parent / "shared" / "data" / "hotpotqa" / "hotpotqa-distractor-dev.jsonl"  # CI lays shared/ beside
    if not data.is_file():
        import pytest

        pytest.skip("shared HotpotQA data not beside the checkout")
    draft = {
        "answer": "Unknown [1].",
        "reflection": {"missing": ["the director's birth year"], "superfluous": []},
        "search_queries": ["director birth year"],
    }
    replies = tmp_path / "r.json"
    replies.write_text(json.dumps([draft] * 40))
    report = json.loads(run("bench/hotpotqa.py", "--model", f"scripted:{replies}", "--limit", "2", "--out",
                            str(tmp_path), "--json"))
    assert set(report["strategies"]) == {"single", "always-search", "research"}
    assert report["tasks"] == 2 and all(s["citations"]["gold"] > 0 for s in report["strategies"].values())
    # The citation rules replayed on the research strategy's traces: the landed rule gives the eval's figure.
    replayed = run("bench/experiments/citation_rules.py", "--db", str(tmp_path / "traces.db"), "--data", str(data))
    landed = next(line for line in replayed.splitlines() if line.strip().startswith("landed"))
    precision = report["strategies"]["research"]["citation_precision"]
    assert "2 research runs" in replayed and replayed.count("picked on ") == 4  # the split-half check too
    assert (f"precision {precision:.2f}" if precision is not None else "no citations") in landed
    # Traces kept compressed read the same.
    packed = tmp_path / "kept-traces.db.xz"
    packed.write_bytes(lzma.compress((tmp_path / "traces.db").read_bytes()))
    again = run("bench/experiments/citation_rules.py", "--db", str(packed), "--data", str(data))
    assert again.replace(str(packed), "") == replayed.replace(str(tmp_path / "traces.db"), "")


def test_citation_rules_reproduce_the_hotpotqa_figures_from_the_kept_traces():
    data = ROOT.parent / "shared" / "data" / "hotpotqa" / "hotpotqa-distractor-dev.jsonl"
    if not data.is_file():
        import pytest

        pytest.skip("shared HotpotQA data not beside the checkout")
    # bench/README.md's figures: the run with the quote (its .db.xz is read when no .db is there) ...
    lines = run("bench/experiments/citation_rules.py", "--data", str(data)).splitlines()
    rule = {line.split("precision")[0].strip(): line.split("precision")[1].split() for line in lines[1:18]}
    assert rule["landed"][:4] == ["0.93", "(14", "/", "15)"] and rule["quote anywhere"][0] == "0.80"
    assert rule["unquoted"][0] == "0.47" and rule["unquoted"][-1] == "0.28"
    # ... and the run before it, under the word rules.
    before = run("bench/experiments/citation_rules.py", "--db", str(RESULTS / "hotpotqa" / "6ada496-traces.db.xz"),
                 "--data", str(data))
    assert "anchored-2, rest., top-2 precision 0.86 (18 / 21)   recall 0.12" in before


def coding_replies(tmp_path, code: str) -> str:
    replies = tmp_path / "r.json"
    replies.write_text(json.dumps([f"Plan: x\n```python\n{code}\n```"] * 40))
    return f"scripted:{replies}"


def test_humaneval_bench_is_reflexa_eval_with_the_coding_strategies_and_resumes(tmp_path):
    spec = coding_replies(tmp_path, "def has_close_elements(numbers, threshold):\n    return False")
    out = tmp_path / "he"
    args = ["bench/humaneval.py", "--model", spec, "--limit", "1", "--out", str(out)]
    report = run(*args)
    assert report.lstrip().startswith("| strategy |") and "refine vs resample@=refine" in report
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert {r["strategy"] for r in rows} == {"single", "resample@3", "refine", "resample@=refine",
                                            "refine:reflect=off"}
    assert {r["task"] for r in rows} == {"HumanEval/0"} and not any(r["passed"] for r in rows)
    assert (out / "traces.db").is_file()  # the traces go beside the rows unless --trace says otherwise
    run(*args)  # the same command resumes: nothing left to run, no row added
    assert len((out / "rows.jsonl").read_text().splitlines()) == len(rows)


def test_mbpp_bench_scores_hidden_tests(tmp_path):
    data = ROOT.parent / "shared" / "data" / "mbpp" / "mbpp-py-dev.jsonl"
    if not data.is_file():
        import pytest

        pytest.skip("shared MBPP data not beside the checkout")
    # Fits the visible test (volume_cube(3) == 27) and fails the hidden ones.
    spec = coding_replies(tmp_path, "def volume_cube(l):\n    return 27")
    report = json.loads(run("bench/mbpp.py", "--model", spec, "--limit", "1", "--out", str(tmp_path),
                            "--strategies", "single", "--json"))
    single = report["strategies"]["single"]
    assert single["visible_passed"] == 1 and single["solved"] == 0 and single["visible_not_solved"] == 1


def test_threads_script(tmp_path, embedded):
    # SmolLM2, one thread count and a handful of tokens: this checks that the script runs, not how fast
    # anything is (two threads beside a busy process take minutes on a loaded two-core machine).
    out_file = tmp_path / "threads.json"
    out = run("bench/speed/threads.py", "--model", "smollm2", "--threads", "1", "--tokens", "6", "--max-seconds", "5",
              "--out", str(out_file))
    report = json.loads(out_file.read_text())
    assert [(r["threads"], r["neighbour"]) for r in report["runs"]] == [(1, "none"), (1, "one busy process")]
    assert "tok/s" in out and report["model"] == "local:smollm2"


def test_plan_script_runs_every_strategy_and_resumes(tmp_path):
    args = ("bench/plan.py", "--model", "smoke", "--limit", "4", "--steps", "4", "--results", str(tmp_path))
    out = run(*args)
    report = json.loads((tmp_path / "report.json").read_text())
    assert set(report["strategies"]) == {"react", "plan", "plan-planner"} and report["tasks"] == 4
    plan = report["strategies"]["plan"]
    assert plan["blocks_propagated"] == 2 and plan["blocked_uses"] == 0  # the fatal and the flaky task
    assert [r["stop"] for r in plan["rows"]] == ["ANSWERED_UNVERIFIED"] * 4
    assert report["strategies"]["react"]["rows"][0]["subgoals"] == 2 and "blocked tools used later 0" in out
    again = run(*args)
    assert again.count("right  0/4") == 3  # resumed from the rows file: nothing runs twice
    assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == 12


def test_plan_script_counts_a_blocked_tool_a_later_unit_ran(tmp_path, monkeypatch):
    import importlib.util

    from reflexa import Budget, Control, Lesson, ScriptedModel, SQLiteStore
    from reflexa.loops.plan import Propagated
    from reflexa.loops.react import Acted
    from reflexa.runtime import Run
    from reflexa.types import Result, StopReason

    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # plan.py imports bench/_common.py, as a script does
    spec = importlib.util.spec_from_file_location("plan_bench", ROOT / "bench" / "plan.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules["plan_bench"] = bench  # its dataclasses look their module up
    spec.loader.exec_module(bench)
    store = SQLiteStore(tmp_path / "t.db")
    parent = Run("plan", "p", ScriptedModel([]), budget=Budget(), store=store)
    first = Run("react", "one", ScriptedModel([]), budget=Budget(), store=store)
    parent.record(Propagated("one", first.run_id, Lesson("s", "m", "c", "x", Control("block_tool", "prices"))))
    later = Run("react", "two", ScriptedModel([]), budget=Budget(), store=store)
    later.record(Acted(1, "t", 'prices({"item": "x"})', "12", True))
    later.record(Acted(2, "t", 'prices({"item": "y"})', "ERROR BLOCKED", False, bench.ErrorCode.BLOCKED))
    units = [{"run_id": first.run_id}, {"run_id": later.run_id}]
    result = Result(None, None, None, StopReason.ERROR, {}, parent.run_id, details={"subgoals": units})
    assert bench.blocked_uses(store, result) == (1, 1)


def test_reflector_prompts_script_counts_kept_lessons(tmp_path):
    from reflexa import Session, SQLiteStore, refine
    from reflexa.models import ScriptedModel
    from reflexa.types import ErrorCode, Signal

    class Fails:
        name, subjective = "check", False

        def run(self, candidate, context):
            return Signal("check", False, ErrorCode.TEST_FAILED, "AssertionError: f() returned 3, not 2")

    db = tmp_path / "t.db"
    lesson = {"failure_step": "f", "observed_mismatch": "got 3", "root_cause": "off by one", "correction": "return 2"}
    refine("write f", [Fails()], session=Session(model=ScriptedModel(["```\nx\n```", lesson, "```\ny\n```"]),
                                                store=SQLiteStore(db)), max_attempts=2)
    vacuous = {**lesson, "observed_mismatch": "insufficient evidence"}
    replies = tmp_path / "r.json"
    replies.write_text(json.dumps([lesson, vacuous]))
    out = run("bench/experiments/reflector_prompts.py", "--db", str(db), "--model", f"scripted:{replies}")
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows[0]["landed"][0] == "kept" and rows[0]["nohatch"][0] == "discarded"
    assert rows[-1] == {"prompts": 1, "kept": {"landed": 1, "nohatch": 0}}


def test_reflector_prompts_kept_traces_hold_the_recorded_runs_prompts(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    monkeypatch.syspath_prepend(str(ROOT / "bench" / "experiments"))
    import reflector_prompts
    from _common import trace_db

    with trace_db(RESULTS / "experiments" / "reflector_prompts-traces.db") as db:  # read from its .db.xz
        assert len(reflector_prompts.stored_prompts(db)) == 19  # as in reflector_prompts.log


def test_lesson_probe_tells_the_reflector_from_the_attempt(tmp_path):
    wrong = "def rolling_max(numbers):\n    return numbers[1:]"
    right = ("def rolling_max(numbers):\n    out = []\n    for n in numbers:\n"
             "        out.append(n if not out else max(out[-1], n))\n    return out")
    vacuous = {"failure_step": "x", "observed_mismatch": "2 != 1", "root_cause": "insufficient evidence",
               "correction": "check the list"}
    replies = tmp_path / "r.json"
    # The first attempt, the reflector's discarded lesson, the attempt with refine's lesson, with the written one.
    replies.write_text(json.dumps([f"```python\n{wrong}\n```", vacuous, f"```python\n{wrong}\n```",
                                   f"```python\n{right}\n```"]))
    out = run("bench/experiments/lesson_probe.py", "--model", f"scripted:{replies}").splitlines()
    assert out[0].startswith("1. first attempt: FAIL") and out[1].endswith(": discarded (insufficient evidence)")
    assert out[2].startswith("3. next attempt, refine's lesson: FAIL (the first attempt again)")
    assert out[3] == "4. next attempt, the written lesson: PASS: 4 passed"


def test_lesson_probe_asks_the_reflector_model_when_given_one(tmp_path):
    wrong = "def rolling_max(numbers):\n    return numbers[1:]"
    lesson = {"failure_step": "return numbers[1:]", "observed_mismatch": "assert [2, 3, 4] == [1, 2, 3, 4]",
              "root_cause": "numbers[1:] drops the first element", "correction": "loop over every number"}
    attempts, reflections = tmp_path / "a.json", tmp_path / "r.json"
    attempts.write_text(json.dumps([f"```python\n{wrong}\n```"] * 3))  # no lesson here: a reflector call would fail
    reflections.write_text(json.dumps([lesson]))
    out = run("bench/experiments/lesson_probe.py", "--model", f"scripted:{attempts}",
              "--reflector-model", f"scripted:{reflections}")
    assert out.splitlines()[1].startswith("2. reflector (scripted): kept: ") and "drops the first element" in out


def test_retry_ab_reads_its_problems_as_reflexa_eval_does(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench" / "experiments"))
    import retry_ab

    problem = retry_ab.problems("humaneval", 0, 1)[0]
    wrong = "def has_close_elements(numbers, threshold):\n    return False"
    right = ("def has_close_elements(numbers, threshold):\n    return any(abs(a - b) < threshold\n"
             "               for i, a in enumerate(numbers) for b in numbers[i + 1:])")
    assert problem.id == "HumanEval/0" and not problem.score(wrong) and problem.score(right)


def test_a_split_is_one_flag_and_an_unknown_one_a_clear_error(monkeypatch):
    import pytest

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    from _common import _split

    splits = {"tune": ("--limit", "40"), "confirm": ("--skip", "40")}
    assert _split(["--split", "confirm", "-c", "2"], splits) == ["-c", "2", "--skip", "40"]
    assert _split(["--report-only", "--split=tune"], splits) == ["--report-only", "--limit", "40"]
    assert _split(["-c", "2"], splits) == ["-c", "2"]
    with pytest.raises(SystemExit, match="tune or confirm, not 'all'"):
        _split(["--split", "all"], splits)


def test_the_fault_suite_s_mcp_server_answers_and_fails_as_the_in_process_tools_do(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    from faults import faulty_tools, load_shop  # faults.py imports it from _common

    from reflexa import MCPClient, ToolRegistry
    from reflexa.tools import ToolSession

    db = load_shop(tmp_path / "shop.sqlite")
    served = [sys.executable, str(ROOT / "bench" / "faults_server.py"), "--db", str(db), "--fault", "flaky"]
    with MCPClient(served, trusted=True) as server:
        remote, local = ToolSession(ToolRegistry(server.tools())), ToolSession(ToolRegistry(faulty_tools(db, "flaky")))
        for sql in ("SELECT count(*) FROM orders",) * 3 + ("SELECT price FROM tent",):
            seen = [(o.ok, o.code, o.message, o.output, o.suggestion)
                    for o in (local.call("query", {"sql": sql}), remote.call("query", {"sql": sql}))]
            assert seen[0] == seen[1]


def test_attempts_script_cuts_refine_s_stored_runs_after_two_attempts(tmp_path):
    # A wrong first attempt, a wrong revision, then a right fresh sample: the third attempt converts.
    wrong = "def has_close_elements(numbers, threshold):\n    return {}"
    right = ("def has_close_elements(numbers, threshold):\n    return any(abs(a - b) < threshold\n"
             "               for i, a in enumerate(numbers) for b in numbers[i + 1:])")
    replies = tmp_path / "r.json"
    replies.write_text(json.dumps([f"```python\n{code}\n```" for code in (wrong.format("False"),
                                                                         wrong.format("True"), right)]))
    out = tmp_path / "he"
    run("bench/humaneval.py", "--model", f"scripted:{replies}", "--limit", "1", "--out", str(out), "-s", "refine")
    lines = run("bench/experiments/attempts.py", "humaneval", "--out", str(out)).splitlines()
    assert "  first attempt failed, run ended on attempt 3 (fresh), solved: 1" in lines
    assert "  refine: 1 solved" in lines[-2] and "  cut after two attempts: 0 solved" in lines[-1]
    assert "the third attempt solved 1" in lines[-1]


def test_third_attempt_script_runs_the_second_revision_where_refine_sampled(tmp_path):
    # refine: a wrong first attempt, a wrong revision, a right fresh sample. The ablation revises a second
    # time and is wrong again: the sample alone solves the task.
    wrong = "def has_close_elements(numbers, threshold):\n    return {}"
    right = ("def has_close_elements(numbers, threshold):\n    return any(abs(a - b) < threshold\n"
             "               for i, a in enumerate(numbers) for b in numbers[i + 1:])")
    fenced = [f"```python\n{code}\n```" for code in (wrong.format("False"), wrong.format("True"), right)]
    (tmp_path / "refine.json").write_text(json.dumps(fenced))
    (tmp_path / "revise.json").write_text(json.dumps([*fenced[:2], fenced[0]]))
    out, ablation = tmp_path / "he", tmp_path / "ablation"
    run("bench/humaneval.py", "--model", f"scripted:{tmp_path / 'refine.json'}", "--limit", "1", "--out", str(out),
        "-s", "refine")
    lines = run("bench/experiments/third_attempt.py", "humaneval", "--out", str(out), "--ablation-out", str(ablation),
                "--model", f"scripted:{tmp_path / 'revise.json'}").splitlines()
    assert lines[0].endswith("(1): refine went on to a third attempt after a failed revision on 1; the first two "
                             "attempts are the same in both runs on 1")
    assert lines[1].startswith("  refine (a fresh sample third): 1 solved")
    assert lines[2].startswith("  refine:repairs=revise (a second revision third): 0 solved")
    assert lines[3] == "  only the sample: 1, only the revision: 0, exact McNemar p = 1"
    assert lines[4] == "  the whole split: refine 1 solved, refine:repairs=revise 0"


def test_refine_change_script_runs_refine_again_and_replays_the_equal_cost_baseline(tmp_path):
    # Stored: refine's wrong first attempt, long wrong revision and right fresh sample; resample@=refine's three
    # samples are the same three replies and it solves the task within refine's tokens. Now: the same first
    # attempt, then a right revision, for fewer tokens, at which the baseline's second sample is cut.
    wrong = "def has_close_elements(numbers, threshold):\n    return {}"
    right = ("def has_close_elements(numbers, threshold):\n    return any(abs(a - b) < threshold\n"
             "               for i, a in enumerate(numbers) for b in numbers[i + 1:])")
    fenced = [f"```python\n{code}\n```" for code in
              (wrong.format("False"), wrong.format("True") + "  # " + "a long comment " * 80, right)]
    # Each strategy replays the replies file from its start; one path for every run keeps one eval id per folder.
    replies, before, after = tmp_path / "replies.json", json.dumps(fenced), json.dumps([fenced[0], fenced[2]])
    out, again = tmp_path / "he", tmp_path / "again"
    replies.write_text(before)
    run("bench/humaneval.py", "--model", f"scripted:{replies}", "--limit", "1", "--out", str(out),
        "-s", "refine,resample@=refine")
    replies.write_text(after)
    lines = run("bench/experiments/refine_change.py", "humaneval", "--limit", "1", "--out", str(out), "--name", "t",
                "--run-out", str(again), "--model", f"scripted:{replies}").splitlines()
    assert lines[0] == ("humaneval tasks 1-1: 1 whose first attempt failed its visible check, 1 of them run; the "
                        "first attempt is the same in both runs on 1")
    assert lines[1].startswith("  stored refine (before): 1 solved, 0 visible only,") and "3 calls" in lines[1]
    assert lines[2].startswith("  refine now (after): 1 solved, 0 visible only,") and "2 calls" in lines[2]
    assert lines[3].startswith("  only before: 0, only after: 0, exact McNemar p = 1; tokens after/before 0.")
    assert lines[4] == "  the whole split: before 1 solved, after 1"
    assert lines[5].endswith("at the budgets they ran at: 1 of 1 rows reproduced (solved and tokens)")
    derived = re.match(r"  resample@=refine at refine's tokens now, from its stored samples: 0 solved, (\d+) tokens; "
                       r"refine now against it on the 1 decided: only refine 1, only resample@=refine 0", lines[6])
    assert derived and lines[7] == "  the whole split: resample@=refine at refine's tokens now 0 solved"
    # The replay is what a run of the baseline at refine's new tokens does: the same samples, the second one cut.
    replies.write_text(before)
    run("bench/humaneval.py", "--model", f"scripted:{replies}", "--limit", "1", "--out", str(again),
        "-s", "refine,resample@=refine")  # refine's row is there: only the baseline runs
    rerun = {row["strategy"]: row for row in map(json.loads, (again / "rows.jsonl").open())}["resample@=refine"]
    assert (rerun["passed"], rerun["tokens"], rerun["samples"]) == (False, int(derived.group(1)), 2)
    # Without the eval's traces (they are not committed), the baseline run beside refine (--baseline) is compared.
    (out / "traces.db").unlink()
    lines = run("bench/experiments/refine_change.py", "humaneval", "--limit", "1", "--out", str(out), "--name", "t",
                "--run-out", str(again), "--report-only").splitlines()
    assert lines[0] == "humaneval tasks 1-1: 1 whose first attempt failed its visible check, 1 of them run"
    assert lines[5] == (f"  resample@=refine run at refine's tokens now: 0 solved, {derived.group(1)} tokens; only "
                        "refine 1, only resample@=refine 0, exact McNemar p = 1")
    assert lines[6] == "  the whole split: resample@=refine at refine's tokens now 0 solved"


def test_repeated_failures_script_finds_a_run_that_repeats_a_failing_call(tmp_path):
    from reflexa import Budget, ScriptedModel, Session, SQLiteStore, StopReason
    from reflexa.loops import react
    from reflexa.tools import ToolError, tool
    from reflexa.types import ErrorCode

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        raise ToolError(ErrorCode.TOOL_ERROR, "backend refused the key")

    call = '{"thought": "look it up", "confidence": 0.9, "action": {"tool": "lookup", "args": {"key": "a"}}}'
    db = tmp_path / "traces.db"
    result = react("find it", [lookup], budget=Budget(max_reflections=0), validator=lambda answer: True,
                   session=Session(model=ScriptedModel([call] * 8), store=SQLiteStore(db)))
    assert result.stop_reason is StopReason.NO_PROGRESS
    lines = run("bench/experiments/repeated_failures.py", str(db)).splitlines()
    assert lines[0] == "1 runs; 1 with one action failing the same way 3 or more times in a row"
    assert "stopped NO_PROGRESS" in lines[1]
    assert run("bench/experiments/repeated_failures.py", str(db), "--times", "4").startswith("1 runs; 0 with")


def test_visible_only_script_splits_single_s_answers_from_the_conversions(tmp_path):
    # Five tasks: a and b pass one attempt's visible check (b fails the hidden asserts); c, d and e fail it,
    # refine converts all three, and d's and e's conversions fail the hidden asserts: d special-cases the
    # visible input, e returns the visible assert's True (a boolean names nothing in particular) and appends the
    # visible assert itself, which special-cases nothing.
    test = "assert f(255) == True\nassert f(0) == False\n"
    (tmp_path / "dataset.jsonl").write_text("".join(json.dumps({"id": t, "test_code": test}) + "\n" for t in "abcde"))
    seen = {"single": {"a": (1, 1), "b": (1, 0), "c": (0, 0), "d": (0, 0), "e": (0, 0)},
            "refine": {"a": (1, 1), "b": (1, 0), "c": (1, 1), "d": (1, 0), "e": (1, 0)}}
    answers = {"d": "def f(x):\n    return x == 255", "e": "def f(x):\n    return True\n\nassert f(255) == True"}
    (tmp_path / "rows.jsonl").write_text("".join(
        json.dumps({"key": f"{t}::{s}", "task": t, "strategy": s, "visible": bool(v), "passed": bool(p),
                    "answer": answers.get(t, "def f(x):\n    return x > 1")}) + "\n"
        for s, by_task in seen.items() for t, (v, p) in by_task.items()))
    out = run("bench/experiments/visible_only.py", "mbpp", "--out", str(tmp_path), "-s", "refine").splitlines()
    assert out[0].endswith("(5): one attempt passes the visible check on 2, and 1 of those fail the hidden asserts")
    assert out[1] == ("  refine: 3 visible only, 1 of them single's; 3 visible conversions, 2 of them fail the "
                      "hidden asserts (67%), 1 of those naming a value of the visible assert")


def test_rescore_scores_stored_answers_on_another_datasets_score_and_resumes(tmp_path):
    """A stored answer that passes the visible check but not the dataset's score is counted visible-only; the
    verdicts are written as they finish, and a second run reads them instead of scoring again."""
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"id": "double", "task": "Write double(x).", "test_code": "assert double(2) == 4\n",
                                "score": {"test_code": "assert double(2) == 4\nassert double(3) == 6\n"}}) + "\n")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"key": f"double::{name}", "task": "double", "strategy": name, "visible": True,
                                        "passed": True, "answer": answer}) + "\n"
                            for name, answer in [("right", "def double(x):\n    return 2 * x\n"),
                                                 ("fits", "def double(x):\n    return 4\n")]))
    out = tmp_path / "verdicts.jsonl"
    table = run("bench/rescore.py", str(rows), str(data), str(out))
    assert "| right | 1 | 1 | 1 | 0 |" in table and "| fits | 1 | 1 | 0 | 1 |" in table
    assert len(out.read_text().splitlines()) == 2
    rows.write_text(rows.read_text().replace("return 4", "return 2 * x"))  # a rescore would now pass it
    assert "| fits | 1 | 1 | 0 | 1 |" in run("bench/rescore.py", str(rows), str(data), str(out))


def test_readme_examples_script_runs_the_readme_s_loop_lines_as_written_and_resumes(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import readme_examples
    finally:
        sys.path.remove(str(ROOT / "bench"))
    lines = readme_examples.examples(ROOT / "README.md")
    assert {line.split()[1] for line in lines} == set(readme_examples.LOOPS)
    assert all(line.startswith("reflexa ") for line in lines)
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps([
        {"action": {"thought": "count them", "tool": "query", "args": {"sql": "SELECT count(*) FROM orders"}}},
        {"action": {"thought": "answer", "tool": "final_answer", "args": {"answer": "400"}}}]))
    args = ("bench/readme_examples.py", "--only", "trials", "--model", f"scripted:{replies}", "--out", str(tmp_path))
    assert "PASSED (exit 0" in run(*args)
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [(r["stop_reason"], r["exit"], r["answer"]) for r in rows] == [("PASSED", 0, "400")]
    assert run(*args) == "" and len((tmp_path / "rows.jsonl").read_text().splitlines()) == 1
