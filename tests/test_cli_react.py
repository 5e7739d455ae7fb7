import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

from typer.testing import CliRunner

from reflexa.cli.app import app

runner = CliRunner()


def act(tool, thought, **args):
    return {"action": {"thought": thought, "tool": tool, "args": args, "confidence": 0.9}}


def replies(tmp_path, name, *items):
    path = tmp_path / name
    path.write_text(json.dumps(list(items)))
    return f"scripted:{path}"


def test_react_answers_from_the_database(tmp_path, shop):
    spec = replies(
        tmp_path,
        "r.json",
        act("query", "count them", sql="SELECT count(*) FROM orders"),
        act("final_answer", "done", answer="400"),
    )
    result = runner.invoke(app, ["react", "--db", str(shop), "How many orders?", "--model", spec])
    assert result.exit_code == 4, result.output  # answered, but nothing checked the answer: not a pass
    assert "step 1" in result.output and "400" in result.output and "ANSWERED_UNVERIFIED" in result.output
    assert "PASSED" not in result.output and "not validated" in result.output


def test_react_validate_checks_the_answer_with_sql_or_a_command(tmp_path, shop):
    answer = [act("final_answer", "done", answer="400")]
    sql = "SELECT 1 WHERE (SELECT count(*) FROM orders) = CAST(:answer AS INTEGER)"  # the README's
    passed = runner.invoke(
        app,
        [
            "react",
            "--db",
            str(shop),
            "How many orders?",
            "--validate",
            sql,
            "--model",
            replies(tmp_path, "a.json", *answer),
        ],
    )
    assert passed.exit_code == 0 and "stop: PASSED" in passed.output
    wrong = [act("final_answer", "guess", answer="12"), act("final_answer", "again", answer="13")]
    failed = runner.invoke(
        app,
        [
            "react",
            "--db",
            str(shop),
            "How many orders?",
            "--validate",
            sql,
            "--max-steps",
            "2",
            "--max-reflections",
            "0",
            "--model",
            replies(tmp_path, "b.json", *wrong),
            "--json",
        ],
    )
    data = json.loads(failed.output)
    assert failed.exit_code == 3 and data["stop_reason"] == "MAX_ITERATIONS" and data["best"] is None
    command = runner.invoke(
        app,
        [
            "react",
            "--db",
            str(shop),
            "How many orders?",
            "--validate",
            'test "$REFLEXA_ANSWER" = 400',
            "--model",
            replies(tmp_path, "c.json", *answer),
        ],
    )
    assert command.exit_code == 0, command.output
    broken = runner.invoke(app, ["react", "--db", str(shop), "How many orders?", "--validate",
                                 "SELECT 1 FROM ordrs", "--model", replies(tmp_path, "d.json", *answer)])
    assert broken.exit_code == 2 and "no such table: ordrs" in broken.output  # said before any model call
    # A query that writes would fail on the read-only database for every answer: refused up front too.
    for writes in ("WITH x AS (SELECT 1) DELETE FROM orders", "WITH x AS (SELECT 1) UPDATE orders SET id = 0"):
        refused = runner.invoke(app, ["react", "--db", str(shop), "How many orders?", "--validate", writes,
                                      "--model", replies(tmp_path, "e.json", *answer)])
        assert refused.exit_code == 2 and "must only read" in refused.output, refused.output


def test_react_typo_is_repaired_and_experience_is_listed(tmp_path, shop):
    spec = replies(
        tmp_path,
        "r.json",
        act("query", "who", sql="SELECT nme FROM customers WHERE id = 1"),
        act("final_answer", "done", answer="x"),
    )
    result = runner.invoke(app, ["react", "--db", str(shop), "Name of customer 1?", "--model", spec, "--json"])
    data = json.loads(result.output)
    assert data["counters"]["rule_repairs"] == 1 and data["total_usage"]["calls"] == 2
    listing = runner.invoke(app, ["experience"])
    assert listing.exit_code == 0 and "trigger" in listing.output


def test_react_missing_database_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["react", "--db", str(tmp_path / "none.sqlite"), "q", "--model", "scripted:x.json"])
    assert result.exit_code == 2 and "database not found" in result.output


def test_resume_refuses_a_finished_run(tmp_path, shop):
    spec = replies(tmp_path, "r.json", act("final_answer", "done", answer="x"))
    data = json.loads(runner.invoke(app, ["react", "--db", str(shop), "q", "--model", spec, "--json"]).output)
    result = runner.invoke(app, ["resume", data["run_id"], "--model", spec])
    assert result.exit_code == 2 and "already finished" in result.output


SLOW = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < (SELECT n FROM slow)) "
        "SELECT count(*) FROM c")
"""A query as slow as the table `slow` says: the test makes it fast before a resume, which runs again the one
tool call that was in flight (its model call, stored, is read back)."""


def slowed(shop, n):
    with sqlite3.connect(shop) as db:
        db.execute("CREATE TABLE IF NOT EXISTS slow (n INTEGER)")
        db.execute("DELETE FROM slow")
        db.execute("INSERT INTO slow VALUES (?)", (n,))


def test_killed_process_resumes_without_repeating_the_write(tmp_path, shop):
    trace = tmp_path / "trace.db"
    slowed(shop, 300_000_000)
    first = replies(
        tmp_path,
        "first.json",
        act("execute", "record the refund", sql="INSERT INTO refunds VALUES (999, 1, 5.0, '2024-05-01')"),
        act("query", "a slow check", sql=SLOW),
    )
    env = {**os.environ, "REFLEXA_TRACE": str(trace)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reflexa.cli",
            "react",
            "--db",
            str(shop),
            "--write",
            "Refund order 1",
            "--model",
            first,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with sqlite3.connect(trace) as db:
                if db.execute("SELECT count(*) FROM steps WHERE kind = 'react'").fetchone()[0] >= 1:
                    break
        except sqlite3.Error:
            pass
        time.sleep(0.05)
    time.sleep(0.5)  # now inside the slow query of step 2
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    with sqlite3.connect(trace) as db:
        run_id, status = db.execute("SELECT run_id, status FROM runs").fetchone()
    assert status == "running"

    # The resumed run goes on at step 2: the write of step 1 is not chosen, nor run, again; step 2's action,
    # stored, is read back and its query (in flight at the kill) runs again.
    slowed(shop, 10)
    second = replies(
        tmp_path,
        "second.json",
        act("query", "check it", sql="SELECT amount FROM refunds WHERE id = 999"),
        act("final_answer", "done", answer="refunded"),
    )
    # A database replaced since the kill is named before the run goes on, not met as a tool failure in it.
    shop.rename(tmp_path / "shop.kept")
    shop.write_text("not a database")
    replaced = subprocess.run([sys.executable, "-m", "reflexa.cli", "resume", run_id[:10], "--model", second],
                              env=env, capture_output=True, text=True, timeout=120)
    assert replaced.returncode == 2 and "not an SQLite database" in replaced.stderr, replaced.stderr
    (tmp_path / "shop.kept").replace(shop)
    result = subprocess.run(
        [sys.executable, "-m", "reflexa.cli", "resume", run_id[:10], "--model", second],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 4, result.stdout + result.stderr  # answered; no --validate, so unverified
    assert "step 2" in result.stdout and "step 1" not in result.stdout
    with sqlite3.connect(shop) as db:
        assert db.execute("SELECT count(*) FROM refunds WHERE id = 999").fetchone()[0] == 1
    with sqlite3.connect(trace) as db:
        actions = [
            json.loads(r[0])["action"]
            for r in db.execute("SELECT output FROM steps WHERE kind = 'react' ORDER BY step_id")
        ]
        assert sum("INSERT" in a for a in actions) == 1 and len(actions) == 4 and "slow" in actions[1]


def test_validators_judge_any_answer_without_raising(shop, monkeypatch):
    """A NUL or a lone surrogate in an answer, output that is not UTF-8, a command whose children outlive
    it: each is a verdict on the answer, never an exception that ends the run."""
    import time

    from reflexa.evaluate.answer import answer_validator

    sql = answer_validator("SELECT 1 WHERE (SELECT count(*) FROM orders) = CAST(:answer AS INTEGER)", shop)
    assert sql("400") is None and "failed" in sql("4\ud8000")
    command = answer_validator('test "$REFLEXA_ANSWER" = 400')
    assert command("400") is None and "NUL" in command("4\x000") and command("4\ud800") is not None
    assert "exited 1" in answer_validator("printf '\\377' >&2; exit 1")("x")
    monkeypatch.setattr("reflexa.evaluate.answer.COMMAND_TIMEOUT", 1)
    started = time.monotonic()  # the shell's children are killed with it: communicate() returns at once
    assert "timed out" in answer_validator("sleep 30 & sleep 30")("x") and time.monotonic() - started < 10
