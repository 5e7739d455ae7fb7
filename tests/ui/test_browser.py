"""The trace viewer in a real browser: Debian's chromium driven by Playwright, against `reflexa ui` serving a
store the scripted model filled. Screenshots go to tests/ui/output/."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the viewer needs the ui extra: pip install -e '.[ui]'")

from .scenarios import BAD, XSS, LiveRun, screenshot  # noqa: E402


def expect(locator):
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)

TIMEOUT_MS = 15_000
"""The longest a page may take to show what a test waits for (a deadline, not a timing assertion)."""


def test_runs_list_and_a_refine_run(trace, serve, page):
    path, runs = trace
    url = serve(path)
    page.goto(url)
    rows = page.locator("tr.run")
    assert rows.count() == 4
    assert page.locator(f'tr[data-run="{runs.refine}"] td').nth(3).inner_text() == "PASSED"
    screenshot(page, "runs-list")

    # Filter by text through the form, then sort by tokens.
    page.fill("input[name=q]", "add(a, b)")
    page.click("button[type=submit]")
    page.wait_for_url("**q=add*")
    assert sorted(page.locator("tr.run").evaluate_all("rows => rows.map(r => r.dataset.run)")) == sorted(
        [runs.refine])
    page.goto(url)
    page.click("a.sort:text('tokens')")
    tokens = page.locator("tr.run td:nth-child(7)").all_inner_texts()
    assert [int(t) for t in tokens] == sorted((int(t) for t in tokens), reverse=True)

    page.click(f'tr[data-run="{runs.refine}"] a.run-link')
    page.wait_for_url(f"**/runs/{runs.refine}")
    assert page.locator("#timeline > li.step").count() == 10
    kinds = page.locator("#timeline .step-head .kind").all_inner_texts()
    assert kinds[:3] == ["model_call", "attempt", "verdict"] and kinds[-1] == "stop"
    diff = page.locator("#step-8 details.diff")
    assert diff.is_visible() and "diff against attempt 1" in diff.inner_text()
    assert page.locator("#step-8 .d-del").inner_text() == "-    return a - b"
    assert page.locator("#step-8 .d-add").inner_text() == "+    return a + b"
    assert page.locator("#step-5 ol.path li").all_inner_texts()[0].startswith("gate")
    assert page.locator("svg.chart rect.input").count() == 2  # generator and reflector
    screenshot(page, "refine-run")
    assert page.errors == []


def test_research_citations_link_to_evidence_and_sources(trace, serve, page):
    path, runs = trace
    url = serve(path)
    page.goto(f"{url}runs/{runs.research}")
    answer = page.locator(".citations .answer")
    assert answer.inner_text() == "The Eiffel Tower is 330 metres tall [1]."
    page.click(".citations a.cite")
    page.wait_for_url("**#ev-1")
    assert page.locator("#ev-1:target").count() == 1  # the citation led to its evidence
    source = page.locator("#ev-1 a.source")
    assert source.get_attribute("href") == "https://example.org/eiffel"  # never followed: the tests are offline
    assert "noopener" in source.get_attribute("rel")
    assert "330 metres" in page.locator("#ev-1 blockquote").inner_text()
    screenshot(page, "research-run")

    page.goto(f"{url}runs/{runs.react}")
    assert "lookup" in page.locator("#timeline .k-acted .action").first.inner_text()
    assert "backend refused" in page.locator("#timeline .k-acted .observation").first.inner_text()
    screenshot(page, "react-run")
    page.goto(f"{url}experience")
    assert page.locator("table.experience tbody tr").count() == 2 and page.locator("svg.chart").count() == 1
    screenshot(page, "experience")
    page.goto(f"{url}governor")
    assert page.locator("table.governor tbody tr").count() == 3 and page.locator("svg.chart").count() == 1
    screenshot(page, "governor")
    assert page.errors == []


def test_a_running_run_updates_live_without_a_reload(tmp_path, serve, page):
    live = LiveRun(tmp_path / "trace.db")
    live.attempt(BAD, ok=False)
    url = serve(tmp_path / "trace.db")
    page.goto(f"{url}runs/{live.run_id}")
    assert page.locator("#run-status").inner_text() == "running"
    assert page.locator("#timeline > li.step").count() == 2
    page.evaluate("window.__sameDocument = true")  # gone if the page were reloaded

    # The run goes on in "another process": a revision whose candidate also carries markup.
    live.attempt(f"def add(a, b):\n    return a + b  # {XSS}", ok=True)
    page.wait_for_selector("#step-4", timeout=TIMEOUT_MS)
    assert page.locator("#timeline > li.step").count() == 4
    assert page.locator("#step-3 .d-add").inner_text().startswith("+    return a + b")
    assert XSS in page.locator("#step-3 pre.candidate").inner_text()  # shown as text
    assert page.locator("#step-4 .badge").inner_text() == "PASS"
    assert page.evaluate("window.__sameDocument") is True and page.evaluate("typeof window.__pwned") == "undefined"

    live.finish()
    # (expect, not wait_for_function: the page's Content-Security-Policy forbids evaluating strings)
    expect(page.locator("#run-status")).to_have_text("PASSED", timeout=TIMEOUT_MS)
    assert "PASSED" in page.locator("#step-5.k-stop").inner_text()
    assert page.evaluate("window.__sameDocument") is True
    screenshot(page, "live-run")
    assert page.errors == []


def test_an_injected_script_does_not_run(trace, serve, page):
    path, runs = trace
    url = serve(path)
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    for target in (url, f"{url}runs/{runs.xss}"):
        page.goto(target)
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert page.locator("img").count() == 0  # the <img onerror> is text, not an element
    assert page.locator("pre.candidate").inner_text() == XSS
    assert XSS in page.locator("pre.task").inner_text()
    page.click("#step-2 details.plan summary")
    assert XSS in page.locator("#step-2 details.plan pre").inner_text()
    assert page.get_by_text("<script>window.__pwned=1</script>", exact=False).first.is_visible()
    screenshot(page, "injected-script-run")
    assert dialogs == [] and page.errors == []


def test_an_eval_s_table_chart_and_grid_link_to_its_runs(tmp_path, serve, page):
    """`reflexa eval` on the test model, then its page: the report table, the Pareto chart (one point per
    strategy), and a task × strategy grid whose marks open the runs behind them."""
    import json

    from typer.testing import CliRunner

    from reflexa.cli.app import app

    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(line) + "\n" for line in [
        {"id": "a", "task": "say GOOD", "regex": "GOOD", "score": {"regex": "^GOOD$"}},
        {"id": "b", "task": "say GOOD twice", "regex": "GOOD", "score": {"regex": "GOOD\\s+GOOD"}}]))
    (tmp_path / "model.json").write_text(json.dumps({"generator": [BAD, "```\nGOOD\n```"] + ["```\nGOOD\n```"] * 4,
                                                     "reflector": []}))
    trace = tmp_path / "trace.db"
    done = CliRunner().invoke(app, ["eval", str(data), "-s", "single,resample@2,refine:reflect=off", "-m",
                                    f"scripted:{tmp_path / 'model.json'}", "--trace", str(trace), "-o",
                                    str(tmp_path / "out"), "--json"])
    assert done.exit_code == 0, done.output
    ident = json.loads(done.output)["eval"]
    url = serve(trace)
    page.goto(f"{url}evals")
    page.click(f"a[href='/evals/{ident}']")
    page.wait_for_url(f"**/evals/{ident}")
    rows = page.locator("table.report tbody tr")
    assert rows.count() == 3
    assert rows.nth(0).locator("td").nth(2).inner_text() == "0"  # single solved nothing
    assert rows.nth(1).locator("td").nth(2).inner_text() == "1"  # resample@2 solved a
    assert page.locator("svg.scatter circle.point").count() == 3
    grid = page.locator("table.grid tbody tr")
    assert grid.count() == 2
    assert grid.nth(1).locator("td.cell").nth(1).inner_text() == "◐"  # b: passed the visible check only
    assert "vs single" in page.locator("ul.comparisons").inner_text()
    screenshot(page, "eval")
    grid.nth(0).locator("td.cell a").nth(1).click()
    page.wait_for_url("**/runs/*")
    assert page.locator("#timeline > li.step").count() > 0
    assert page.errors == []
