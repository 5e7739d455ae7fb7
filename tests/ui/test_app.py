"""The trace viewer's pages, through FastAPI's test client: content, filters, escaping, read-only."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import sys

import pytest

pytest.importorskip("fastapi", reason="the viewer needs the ui extra: pip install -e '.[ui]'")

from fastapi.testclient import TestClient  # noqa: E402

from reflexa import ScriptedModel, Session, SQLiteStore, StopReason, refine  # noqa: E402
from reflexa.errors import StoreError  # noqa: E402
from reflexa.reflect.classify import Repair  # noqa: E402
from reflexa.reflect.engine import Decided  # noqa: E402
from reflexa.types import PAYLOADS, ErrorCode, Lesson, Signal  # noqa: E402
from reflexa.ui.app import LOOPBACK_HOSTS, create_app, environment  # noqa: E402
from reflexa.ui.store import ReadOnlyStore  # noqa: E402
from reflexa.ui.views import RENDERERS, diff, lesson_path, link_citations  # noqa: E402

from .scenarios import GOOD, LiveRun, Returns, answer  # noqa: E402


def client_for(path, **kwargs):
    return TestClient(create_app(path, **kwargs))


def run_ids(html):
    return re.findall(r'data-run="([0-9a-f]+)"', html)


def test_runs_list_shows_every_run_with_tokens_and_duration(trace):
    path, runs = trace
    html = client_for(path).get("/").text
    assert set(run_ids(html)) == {runs.refine, runs.react, runs.research, runs.xss}
    row = html[html.index(f'data-run="{runs.refine}"'):]
    row = row[:row.index("</tr>")]
    assert "PASSED" in row and "scripted" in row and re.search(r'class="num">\d+ ?\w*</td>', row)
    assert "4 run(s)" in html


def test_runs_list_filters_by_loop_status_model_and_text(trace):
    path, runs = trace
    store = SQLiteStore(path)
    other = ScriptedModel([answer(GOOD)])
    other.name = "other-model"
    refine("Write add(a, b) again.", [Returns(GOOD)], session=Session(model=other, store=store))
    store.close()
    client = client_for(path)
    refines = run_ids(client.get("/?loop=refine").text)
    assert len(refines) == 3 and {runs.refine, runs.xss} < set(refines)
    assert run_ids(client.get("/?loop=research").text) == [runs.research]
    assert run_ids(client.get("/?status=MAX_ITERATIONS").text) == [runs.xss]
    assert runs.xss not in run_ids(client.get("/?status=PASSED").text)
    assert len(run_ids(client.get("/?model=other-model").text)) == 1
    assert run_ids(client.get("/?q=eiffel").text) == [runs.research]  # case-blind part of the task
    assert run_ids(client.get(f"/?q={runs.react[:8]}").text) == [runs.react]  # start of a run id
    assert run_ids(client.get("/?q=%25").text) == []  # "%" is a character, not a wildcard
    assert "no run matches" in client.get("/?loop=nope").text
    choices = client.get("/").text
    assert '<option value="other-model">' in choices and '<option value="research">' in choices


def test_runs_list_sorts_by_tokens_both_ways(trace):
    path, _ = trace
    client = client_for(path)
    store = ReadOnlyStore(path)
    tokens = {row.record.run_id: row.tokens for row in store.search_runs()}
    up = run_ids(client.get("/?sort=tokens&order=asc").text)
    down = run_ids(client.get("/?sort=tokens&order=desc").text)
    assert [tokens[r] for r in up] == sorted(tokens.values())
    assert [tokens[r] for r in down] == sorted(tokens.values(), reverse=True)
    assert client.get("/?sort=nonsense").status_code == 200  # an unknown sort falls back to start time


def test_refine_run_page_has_the_timeline_the_diff_and_the_lesson_path(trace):
    path, runs = trace
    html = client_for(path).get(f"/runs/{runs.refine[:10]}").text  # a unique prefix is enough
    assert html.count('class="step ') == 10
    assert "attempt 1" in html and "attempt 2" in html and "diff against attempt 1" in html
    assert '<span class="d-del">-    return a - b</span>' in html
    assert '<span class="d-add">+    return a + b</span>' in html
    assert "NEEDS_IMPROVEMENT" in html and "TEST_FAILED" in html and "3 passed" in html
    # The lesson, with the path the failure took through the engine.
    path_html = html[html.index('<ol class="path">'):]
    stages = re.findall(r'<span class="stage">(\w+)</span>', path_html[:path_html.index("</ol>")])
    assert stages == ["gate", "classifier", "reflector", "lesson"]
    assert "subtracts instead of adding" in html and "return a + b" in html
    # Usage per role as a chart and a table.
    assert '<svg class="chart"' in html and "generator" in html and "reflector" in html


def test_react_run_page_shows_actions_and_observations(trace):
    path, runs = trace
    html = client_for(path).get(f"/runs/{runs.react}").text
    assert "try the obvious key" in html and "lookup({&#34;key&#34;: &#34;bad&#34;})" in html
    assert "backend refused the key" in html and "value for good" in html
    assert "TOOL_ERROR" in html and "final" in html


def test_research_run_links_citations_to_their_evidence_and_sources(trace):
    path, runs = trace
    html = client_for(path).get(f"/runs/{runs.research}").text
    assert 'The Eiffel Tower is 330 metres tall <a class="cite" href="#ev-1">[1]</a>.' in html
    assert '<li id="ev-1" class="cited">' in html
    assert '<a class="source" href="https://example.org/eiffel" rel="noopener noreferrer nofollow"' in html
    assert "Eiffel Tower height" in html and "every citation names retrieved evidence" in html


def test_model_text_is_escaped_everywhere(trace):
    path, runs = trace
    client = client_for(path)
    for url in ("/", f"/runs/{runs.xss}"):
        response = client.get(url)
        assert "<script>window.__pwned" not in response.text and "<img src=x" not in response.text
        assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in response.text
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert client.get(f"/runs/{runs.xss}").text.count("&lt;img src=x onerror=") >= 3  # task, plan, candidate


def test_citation_links_escape_the_answer_and_mark_unknown_numbers():
    html = str(link_citations('<b onclick="x()">A</b> [1] [9] [x]', {1}))
    assert html.startswith("&lt;b onclick=&#34;x()&#34;&gt;A&lt;/b&gt; ")
    assert '<a class="cite" href="#ev-1">[1]</a>' in html
    assert '<span class="cite unknown" title="names no retrieved evidence">[9]</span>' in html and "[x]" in html


def test_unknown_runs_and_steps_are_404(trace):
    path, runs = trace
    client = client_for(path)
    response = client.get("/runs/does-not-exist")
    assert response.status_code == 404 and "no run has the id" in response.text
    assert client.get(f"/runs/{runs.refine}/steps/999.json").status_code == 404
    assert client.get("/runs/nope/events").status_code == 404
    step = client.get(f"/runs/{runs.refine}/steps/2.json").json()
    assert step["kind"] == "attempt" and step["output"]["candidate"].endswith("return a - b")


def test_the_store_is_never_written(trace):
    path, runs = trace
    before = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
    app = create_app(path)
    client = TestClient(app)
    for url in ("/", "/?sort=tokens", "/experience", "/governor", *(f"/runs/{r}" for r in vars(runs).values())):
        assert client.get(url).status_code == 200
    with client.stream("GET", f"/runs/{runs.refine}/events") as response:
        assert "event: end" in "".join(response.iter_text())
    store = app.state.store
    with pytest.raises(StoreError, match="read-only"):
        store.put("experience", "k", {"a": 1})
    with pytest.raises(StoreError, match="read-only"):
        store.incr("governor", "k", {"samples": 1}, defaults={})
    with pytest.raises(sqlite3.OperationalError, match="readonly|read-only"):
        store.db.execute("DELETE FROM runs")  # SQLite itself refuses: the file is open with mode=ro
    store.close()
    assert (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns) == before


def test_a_missing_or_foreign_store_is_a_clear_error(tmp_path):
    with pytest.raises(StoreError, match="no trace store at"):
        ReadOnlyStore(tmp_path / "missing.db")
    assert not (tmp_path / "missing.db").exists()  # not created, as SQLiteStore would
    (tmp_path / "notes.txt").write_text("not a database, just text " * 100)
    with pytest.raises(StoreError, match="not a readable trace store"):
        ReadOnlyStore(tmp_path / "notes.txt")
    sqlite3.connect(tmp_path / "other.db").execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(StoreError, match="not a reflexa trace store"):
        ReadOnlyStore(tmp_path / "other.db")


def events(text):
    """Parse a server-sent event stream into (event, data) pairs."""
    found = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if "event" in fields:
            found.append((fields["event"], json.loads(fields["data"]), fields.get("id")))
    return found


def test_the_event_feed_sends_new_steps_then_the_end(trace):
    path, runs = trace
    client = client_for(path)
    with client.stream("GET", f"/runs/{runs.refine}/events?after=7") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        sent = events("".join(response.iter_text()))
    assert [(e, d.get("id")) for e, d, _ in sent] == [("step", 8), ("step", 9), ("step", 10), ("end", None)]
    assert sent[-1][1] == {"status": "finished", "stop_reason": "PASSED"}
    attempt = sent[0][1]["html"]
    assert 'id="step-8"' in attempt and "diff against attempt 1" in attempt  # the diff knows the earlier steps
    # A reconnecting browser sends the last id it saw: the feed carries on after it.
    with client.stream("GET", f"/runs/{runs.refine}/events", headers={"Last-Event-ID": "9"}) as response:
        assert [d.get("id") for _, d, _ in events("".join(response.iter_text()))] == [10, None]


def test_the_feed_sends_the_last_steps_of_a_run_that_ends_while_it_looks(tmp_path, monkeypatch):
    """The run stores its last steps and ends right after the feed looked for new ones: they still go out
    before the end (the feed once read the steps first and the status second, and dropped them)."""
    import asyncio

    from reflexa.runtime import ModelCall, Run
    from reflexa.types import Budget
    from reflexa.ui import app as ui_app

    writer = SQLiteStore(tmp_path / "t.db")
    run = Run("refine", "task", ScriptedModel([]), budget=Budget(), store=writer)
    run.record(ModelCall("first"), "generator")

    class EndsWhileLooking(ReadOnlyStore):
        looks = 0

        def steps_after(self, run_id, after):
            found = super().steps_after(run_id, after)
            EndsWhileLooking.looks += 1
            if EndsWhileLooking.looks == 2:
                run.record(ModelCall("last"), "generator")
                run.finish(StopReason.PASSED, output="x", best="x", verdict=None, iterations=1)
            return found

    class Connected:
        async def is_disconnected(self) -> bool:
            return False

    async def sent() -> list[str]:
        reader = EndsWhileLooking(tmp_path / "t.db")
        lines = []
        async for chunk in ui_app._feed(Connected(), reader, environment(), reader.get_run(run.run_id), 0):
            lines += [line for line in chunk.splitlines() if line.startswith(("id:", "event: end"))]
        return lines

    monkeypatch.setattr(ui_app, "POLL_SECONDS", 0.01)
    assert asyncio.run(sent()) == ["id: 1", "id: 2", "id: 3", "event: end"]


def test_a_running_run_is_shown_as_live(tmp_path):
    live = LiveRun(tmp_path / "trace.db")
    live.attempt("def add(a, b): return 0", ok=False)
    html = client_for(tmp_path / "trace.db").get(f"/runs/{live.run_id}").text
    assert 'data-events="/runs/' in html and 'events?after=2"' in html and "/static/live.js" in html
    assert '<span class="badge running" id="run-status">running</span>' in html
    live.finish()
    html = client_for(tmp_path / "trace.db").get(f"/runs/{live.run_id}").text
    assert "data-events" not in html and "live.js" not in html


def test_experience_and_governor_pages(trace):
    path, _ = trace
    client = client_for(path)
    experience = client.get("/experience").text
    assert "return a + b" in experience and "tests|TEST_FAILED|add(N, N) returned N, wanted N" in experience
    assert '<svg class="chart"' in experience
    governor = client.get("/governor").text
    assert '<svg class="chart"' in governor
    for family in ("refine", "react", "research"):
        assert f"<td>{family}</td>" in governor
    assert "kept" in governor  # one sample each: far from enough to cut anything


def test_empty_store_pages(tmp_path):
    SQLiteStore(tmp_path / "trace.db").close()
    client = client_for(tmp_path / "trace.db")
    assert "no run matches" in client.get("/").text
    assert "experience library is empty" in client.get("/experience").text
    assert "No statistics yet" in client.get("/governor").text


def test_every_step_kind_has_a_renderer():
    import reflexa.loops  # noqa: F401 - registers every loop's step kinds

    assert {cls for cls in PAYLOADS.values()} <= set(RENDERERS)
    macros = environment().get_template("steps.html").module
    assert all(callable(getattr(macros, name, None)) for name in [*RENDERERS.values(), "unknown"])


def test_lesson_paths():
    failing = Signal("tool:query", False, ErrorCode.TOOL_ERROR, "no such column")
    lesson = Lesson("s", "m", "c", "fix it")
    assert lesson_path(Decided(failing, "a", "repair", "close match", repair=Repair("args"))) == [
        ("gate", "failing: tool:query TOOL_ERROR"), ("classifier", "rule"), ("repair", "args")]
    assert lesson_path(Decided(failing, "a", "stop", "gone", stop=StopReason.UNRECOVERABLE))[-2:] == [
        ("classifier", "unrecoverable"), ("stop", "UNRECOVERABLE")]
    assert lesson_path(Decided(failing, "a", "lesson", "reused", lesson, reused=True))[-2:] == [
        ("experience", "hit"), ("lesson", "reused")]
    assert lesson_path(Decided(failing, "a", "none", "reflection quota (2) spent"))[-1] == (
        "reflector", "reflection quota (2) spent")
    assert lesson_path(Decided(failing, "a", "stop", "came back", stop=StopReason.NO_PROGRESS))[-2:] == [
        ("progress", "came back"), ("stop", "NO_PROGRESS")]


def test_diff_marks_added_and_removed_lines():
    lines = diff("a\nb\nc", "a\nB\nc")
    assert [(d.kind, d.text) for d in lines if d.kind != "hunk"] == [
        ("ctx", "a"), ("del", "b"), ("add", "B"), ("ctx", "c")]
    assert diff("same", "same") == []


def test_other_hosts_are_refused_on_loopback(trace):
    path, _ = trace
    client = client_for(path, allowed_hosts=LOOPBACK_HOSTS)
    assert client.get("/", headers={"host": "127.0.0.1:8765"}).status_code == 200
    assert client.get("/", headers={"host": "rebound.example:8765"}).status_code == 400
    assert client.get("/", headers={"host": "[::1]:8765"}).status_code == 200  # so IPv6 loopback is guarded too


def test_the_server_guards_the_host_header_on_ipv6_loopback_too(tmp_path, monkeypatch):
    from reflexa.ui import server

    made = {}

    def fake_create_app(trace, *, allowed_hosts):
        made["allowed"] = allowed_hosts
        raise SystemExit  # enough: what the server asked for is known

    monkeypatch.setattr("reflexa.ui.app.create_app", fake_create_app)
    for host in ("127.0.0.1", "::1"):
        with pytest.raises(SystemExit):
            server.serve(tmp_path / "t.db", host=host, port=0)
        assert made["allowed"] is not None and host in made["allowed"]


def test_metrics_endpoint(trace, monkeypatch):
    path, _ = trace
    if "prometheus_client" in sys.modules or _importable("prometheus_client"):
        response = client_for(path).get("/metrics")
        assert response.status_code == 200
        # Rebuilt from the store: the runs were made by another "process" (the fixture), not the viewer.
        assert re.search(r'reflexa_runs_total\{loop="refine",stop_reason="PASSED"\} 1\.0', response.text)
        assert 'reflexa_model_call_duration_seconds_count{loop="react",model="scripted",role="generator"}' \
            in response.text
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if it were not installed
    response = client_for(path).get("/metrics")
    assert response.status_code == 404 and "pip install prometheus-client" in response.text


def _importable(name):
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_cli_ui_errors_are_one_clear_line(tmp_path):
    from typer.testing import CliRunner

    from reflexa.cli.app import app

    result = CliRunner().invoke(app, ["ui", "--trace", str(tmp_path / "missing.db")])
    assert result.exit_code == 2 and "no trace store at" in result.output and "Traceback" not in result.output
    SQLiteStore(tmp_path / "trace.db").close()
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["ui", "--trace", str(tmp_path / "trace.db"), "--port", str(port)])
    assert result.exit_code == 2 and f"cannot listen on 127.0.0.1:{port}" in result.output


def test_the_page_benchmark_script_runs():
    import subprocess
    from pathlib import Path

    root = Path(__file__).parent.parent.parent
    out = subprocess.run([sys.executable, "bench/speed/ui_pages.py", "--runs", "3", "--steps", "6", "--repeats", "1"],
                         cwd=root, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "run page, 6 steps" in out.stdout and "runs list sorted by tokens" in out.stdout


def test_trials_and_unknown_step_kinds_render(tmp_path):
    from reflexa.loops import trials
    from reflexa.types import Step, Usage

    store = SQLiteStore(tmp_path / "trace.db")
    model = ScriptedModel([answer("def add(a, b): return 0"),
                           {"failure_step": "trial 1", "observed_mismatch": "wrong sum", "root_cause": "sign",
                            "correction": "add, do not subtract"},
                           answer(GOOD)])
    session = Session(model=model, store=store)
    result = trials("Write add.", lambda t: refine("Write add.", [Returns(GOOD)], session=session, lessons=t.lessons,
                                                    budget=t.budget, meta=t.meta, resume=t.resume, max_attempts=1),
                    session=session)
    assert result.stop_reason is StopReason.PASSED
    # A step kind from a newer version (or another plugin): shown as its data, escaped.
    store.add_step(Step(result.run_id, 99, "mystery", None, None, {"note": "<b>bold</b>"}, Usage(), 0.0, 0.0))
    store.close()
    html = client_for(tmp_path / "trace.db").get(f"/runs/{result.run_id}").text
    assert "trial 1: MAX_ITERATIONS" in html and "trial 2: PASSED" in html
    inner = re.findall(r'its own run: <a href="/runs/([0-9a-f]+)">', html)
    assert len(inner) == 2 and all(client_for(tmp_path / "trace.db").get(f"/runs/{r}").status_code == 200
                                   for r in inner)
    assert "&lt;b&gt;bold&lt;/b&gt;" in html and "<b>bold</b>" not in html


def test_a_host_that_does_not_resolve_is_named_as_the_problem():
    from reflexa.errors import ConfigError
    from reflexa.ui.server import listen

    with pytest.raises(ConfigError, match="cannot listen on nonexistent.invalid") as refused:
        listen("nonexistent.invalid", 0)
    assert "--host" in (refused.value.hint or "")


def test_a_call_served_by_the_reflector_s_own_model_names_it(tmp_path):
    from .scenarios import BAD, LESSON

    path = tmp_path / "trace.db"
    reflector = ScriptedModel([LESSON])
    reflector.name = "local:qwen1.5b"
    result = refine("Write add(a, b) that returns the sum.", [Returns(GOOD)],
                    session=Session(model=ScriptedModel([answer(BAD), answer(GOOD)]), reflector_model=reflector,
                                    store=SQLiteStore(path)))
    html = client_for(path).get(f"/runs/{result.run_id}").text
    assert html.count("reflector call on local:qwen1.5b") == 1 and "generator call on" not in html


def test_an_eval_page_shows_citation_columns_when_its_scores_list_citations(tmp_path):
    from reflexa.eval.runner import EVALS, namespace

    store = SQLiteStore(tmp_path / "t.db")
    store.put(EVALS, "e1", {"dataset": "q.jsonl", "strategies": ["research"], "updated": 1})
    row = {"task": "q", "strategy": "research", "passed": True, "visible": True, "first_passed": None,
           "tokens": 10, "calls": 1, "seconds": 1.0, "stop_reason": "PASSED", "run_ids": [], "error": None,
           "citations": {"right": 1, "cited": 2, "gold": 4}}
    store.put(namespace("e1"), "q::research", row)
    store.close()
    html = client_for(tmp_path / "t.db").get("/evals/e1").text
    assert "cite precision" in html and "0.5 (1/2)" in html and ">0.25<" in html


def test_a_scatter_chart_draws_strategies_that_ran_alike_as_one_labelled_point():
    from reflexa.ui.charts import Point, scatter_chart

    svg = str(scatter_chart([Point("single", 720.0, 3), Point("research", 720.0, 3), Point("always-search", 869.0, 4)],
                            title="t", x_label="x", y_label="y"))
    assert svg.count('class="point"') == 2 and ">single, research<" in svg


def test_a_run_waiting_for_approval_shows_the_call_and_how_to_decide(tmp_path):
    from reflexa import tool
    from reflexa.loops import react
    from reflexa.tools.approval import defer

    @tool(side_effect=True)
    def refund(order_id: int) -> str:
        """Refund an order."""
        return "refunded"

    path = tmp_path / "t.db"
    action = {"action": {"thought": "refund it", "tool": "refund", "args": {"order_id": 12}, "confidence": 0.9}}
    result = react("Refund order 12", [refund], session=Session(model=ScriptedModel([action]),
                                                                 store=SQLiteStore(path), approver=defer))
    assert result.stop_reason is StopReason.AWAITING_APPROVAL
    html = client_for(path).get(f"/runs/{result.run_id}").text
    assert "Waiting for approval" in html and "<code>refund</code>" in html and "order_id" in html
    assert f"reflexa approve {result.run_id[:12]}" in html and "AWAITING_APPROVAL" in html
