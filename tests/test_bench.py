"""The benchmark scripts still run (with the scripted model and tiny sizes); their figures come from bench/."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def run(*args: str) -> str:
    out = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_loop_overhead_script():
    out = run("bench/loop_overhead.py", "--iterations", "20", "--repeats", "1")
    assert "refine, sqlite store" in out and "import reflexa" in out


def test_faults_script(tmp_path):
    replies = tmp_path / "r.json"
    replies.write_text(json.dumps([{"action": {"thought": f"t{i}", "tool": "final_answer", "args": {"answer": "400"}}}
                                   for i in range(100)]))
    out_file = tmp_path / "faults.json"
    out = run("bench/faults.py", "--model", f"scripted:{replies}", "--limit", "2", "--steps", "2",
              "--out", str(out_file))
    report = json.loads(out_file.read_text())
    assert set(report["strategies"]) == {"none", "every-step", "reflexa", "reflexa-pass2"}
    assert report["strategies"]["reflexa"]["rows"][0]["success"]  # "400" answers "How many orders?"
    assert "experience hit rate" in out


def test_search_speed_script():
    out = run("bench/search_speed.py", "--passages", "2000", "--queries", "20")
    assert "p50" in out and "cache hit" in out


def test_hotpotqa_script(tmp_path):
    data = ROOT.parent / "shared" / "data" / "hotpotqa" / "hotpotqa-distractor-dev.jsonl"  # CI lays shared/ beside
    if not data.is_file():
        import pytest

        pytest.skip("shared HotpotQA data not beside the checkout")
    draft = {"answer": "Unknown [1].", "reflection": {"missing": ["the director's birth year"], "superfluous": []},
             "search_queries": ["director birth year"]}
    replies = tmp_path / "r.json"
    replies.write_text(json.dumps([draft] * 40))
    out_file = tmp_path / "h.json"
    run("bench/hotpotqa.py", "--model", f"scripted:{replies}", "--limit", "2", "--data", str(data), "--out", str(out_file))
    report = json.loads(out_file.read_text())
    assert set(report["strategies"]) == {"no-research", "every-time", "reflexa"}


def test_threads_script(tmp_path, embedded):
    # SmolLM2, one thread count and a handful of tokens: this checks that the script runs, not how fast
    # anything is (two threads beside a busy process take minutes on a loaded two-core machine).
    out_file = tmp_path / "threads.json"
    out = run("bench/threads.py", "--model", "smollm2", "--threads", "1", "--tokens", "6", "--max-seconds", "5",
              "--out", str(out_file))
    report = json.loads(out_file.read_text())
    assert [(r["threads"], r["neighbour"]) for r in report["runs"]] == [(1, "none"), (1, "one busy process")]
    assert "tok/s" in out and report["model"] == "local:smollm2"
