"""Runs for the viewer's tests, made by the real loops with the scripted model in a real SQLite store."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from reflexa import ScriptedModel, Session, Signal, SQLiteStore
from reflexa.loops import react, refine
from reflexa.loops.refine import Attempt, Checked
from reflexa.loops.research import research
from reflexa.reflect import ExperienceLibrary, Governor
from reflexa.runtime import Run
from reflexa.search import Evidence
from reflexa.tools import ToolError, tool
from reflexa.types import Budget, ErrorCode, Role, Status, StopReason, Verdict

XSS = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
"""What an injected candidate holds: a script and an event handler, neither of which may run."""
LESSON = {
    "failure_step": "attempt 1",
    "observed_mismatch": "add(2, 2) returned 0, wanted 4",
    "root_cause": "subtracts instead of adding",
    "correction": "return a + b",
}


class Returns:
    """A check that passes one exact candidate; anything else NEEDS_IMPROVEMENT (revise)."""

    subjective = False
    name = "tests"

    def __init__(self, good: str) -> None:
        self.good = good

    def run(self, candidate, context):
        if candidate.strip() == self.good:
            return Signal(self.name, True, message="3 passed", score=1.0)
        return Signal(self.name, False, ErrorCode.TEST_FAILED, "add(2, 2) returned 0, wanted 4",
                      evidence="assert add(2, 2) == 4", score=0.5)


def answer(code: str, plan: str = "Plan: write add.") -> str:
    return f"{plan}\n```python\n{code}\n```"


BAD = "def add(a, b):\n    # adds two numbers\n    return a - b"
GOOD = "def add(a, b):\n    # adds two numbers\n    return a + b"


class Web:
    """A search backend with one page per query, at an http URL (never fetched: the viewer only links it)."""

    name = "web"

    def search(self, query, k):
        return [Evidence("e1", "https://example.org/eiffel", "Eiffel Tower",
                         "The Eiffel Tower is 330 metres tall.")]


def draft(answer_text, missing=(), queries=()):
    return {"answer": answer_text, "reflection": {"missing": list(missing), "superfluous": []},
            "search_queries": list(queries)}


@dataclass
class Runs:
    refine: str
    react: str
    research: str
    xss: str


def make_runs(path: Path) -> Runs:
    """One refine run (fails, learns, passes: two attempts and a diff), one react run (a tool error, then
    an answer), one research run (a search and a cited answer), and a refine run whose candidate and
    task carry a script. The experience library and the governor record what they see."""
    store = SQLiteStore(path)
    try:
        def session(model):
            return Session(model=model, store=store, experience=ExperienceLibrary(store), governor=Governor(store))

        fixed = refine("Write add(a, b) that returns the sum.", [Returns(GOOD)],
                       session=session(ScriptedModel([answer(BAD), LESSON, answer(GOOD)])))
        assert fixed.stop_reason is StopReason.PASSED

        @tool
        def lookup(key: str) -> str:
            """Look a key up."""
            if key != "good":
                raise ToolError(ErrorCode.TOOL_ERROR, "backend refused the key: use key 'good'")
            return "value for good"

        acted = react("Find the value of the good key.", [lookup], validator=lambda a: None, session=session(
            ScriptedModel([
                {"action": {"thought": "try the obvious key", "tool": "lookup", "args": {"key": "bad"},
                            "confidence": 0.9}},
                {"failure_step": "step 1", "observed_mismatch": "the backend refused key bad",
                 "root_cause": "wrong key", "correction": "use key good"},
                {"action": {"thought": "use the key the error named", "tool": "lookup", "args": {"key": "good"},
                            "confidence": 0.9}},
                {"action": {"thought": "done", "tool": "final_answer", "args": {"answer": "value for good"},
                            "confidence": 0.9}},
            ])))
        assert acted.stop_reason is StopReason.PASSED, acted

        found = research("How tall is the Eiffel Tower?", Web(), session=session(ScriptedModel([
            draft("[UNCERTAIN: It is about 300 m tall.]", missing=["exact height of the Eiffel Tower"],
                  queries=["Eiffel Tower height"]),
            draft("The Eiffel Tower is 330 metres tall [1]."),
        ])))
        assert found.stop_reason is StopReason.PASSED, found

        hostile = refine(f"Echo this back: {XSS}", [Returns("never")], max_attempts=1,
                         session=session(ScriptedModel([answer(XSS, plan=f"Plan: {XSS}")])))
        return Runs(fixed.run_id, acted.run_id, found.run_id, hostile.run_id)
    finally:
        store.close()


class LiveRun:
    """A refine run written step by step from the test, as a running process would write it."""

    def __init__(self, path: Path) -> None:
        self.store = SQLiteStore(path)
        self.run = Run("refine", "Write add(a, b), live.", ScriptedModel(), budget=Budget(), store=self.store)
        self.run_id = self.run.run_id
        self.attempts = 0

    def attempt(self, code: str, ok: bool) -> None:
        self.attempts += 1
        self.run.record(Attempt(self.attempts, self.attempts > 1, "Plan: live", code), Role.GENERATOR)
        signal = Signal("tests", ok, None if ok else ErrorCode.TEST_FAILED, "3 passed" if ok else "wrong sum")
        self.run.record(Checked(Verdict(Status.PASS if ok else Status.NEEDS_IMPROVEMENT, (signal,))),
                        Role.EVALUATOR)

    def finish(self) -> None:
        self.run.finish(StopReason.PASSED, output=GOOD, best=GOOD, verdict=None, iterations=self.attempts)
        self.store.close()


OUTPUT = Path(__file__).parent / "output"
"""Where the browser tests save their screenshots (git ignores it)."""


def screenshot(page, name: str) -> Path:
    """Save a full-page screenshot under tests/ui/output/ and print its path."""
    OUTPUT.mkdir(exist_ok=True)
    path = OUTPUT / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path
