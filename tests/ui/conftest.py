"""Fixtures for the trace viewer's tests: a store with runs in it, the viewer served by `reflexa ui`, and a
real browser (Debian's chromium, driven by Playwright)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .scenarios import make_runs

CHROMIUM_ARGS = ["--no-sandbox", "--disable-dev-shm-usage"]
"""CI and sessions run as root, where Chromium's sandbox cannot start; containers have a small /dev/shm."""


@pytest.fixture()
def trace(tmp_path):
    """A SQLite trace store holding a refine, a react, a research and a hostile run: (path, run ids)."""
    path = tmp_path / "trace.db"
    return path, make_runs(path)


def chromium_path() -> str | None:
    """Debian's chromium ($REFLEXA_CHROMIUM overrides): Playwright's own browser download is not used."""
    for candidate in (os.environ.get("REFLEXA_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium"):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def _unavailable(why: str) -> None:
    """Under CI the browser tests must run (.ci/run installs chromium); elsewhere they skip, saying why."""
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the browser tests: {why}")
    pytest.skip(why)


@pytest.fixture()
def browser(tmp_path):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (it is in the dev extra: pip install -e '.[dev]')")
    executable = chromium_path()
    if executable is None:
        _unavailable("chromium is not installed (apt-get install -y chromium; .ci/run does it)")
    with sync_playwright() as playwright:
        # HOME for the browser too: Chromium writes caches and crash reports under it.
        env = {**os.environ, "HOME": str(tmp_path / "browser-home")}
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, env=env)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture()
def page(browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.errors = errors  # script errors on the page: a test checks there are none
    yield page
    page.close()


@pytest.fixture()
def serve(tmp_path):
    """Start `reflexa ui --port 0` on a store; returns its base URL. Stopped at the end of the test."""
    started: list[subprocess.Popen[str]] = []
    log = tmp_path / "ui-stderr.log"  # a file, not a pipe nobody drains

    def start(path: Path) -> str:
        with log.open("w") as stderr:
            process = subprocess.Popen([sys.executable, "-m", "reflexa.cli", "ui", "--trace", str(path), "--port", "0"],
                                       stdout=subprocess.PIPE, stderr=stderr, text=True)
        started.append(process)
        line = process.stdout.readline()  # the server prints its URL once it listens
        match = re.search(r"http://127\.0\.0\.1:\d+/", line)
        if match is None:
            process.kill()
            process.wait()
            raise AssertionError(f"reflexa ui did not start: {line!r} {log.read_text()!r}")
        return match.group(0)

    yield start
    for process in started:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
