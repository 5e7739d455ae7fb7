"""What a candidate program does on given calls, run in the sandbox: the outputs that selection by behaviour
compares across candidates (loops/select.py).

Each call is a Python expression (`add(2, 3)`), evaluated after the candidate's code in one sandboxed
interpreter with a per-call time limit; its output is the `repr` of what it returned, or `raises NAME`. A
candidate could print a forged line of outputs: selection only ever chooses among candidates that passed
the objective check, so a forgery chooses itself among those, never turns a failure into a pass.
"""

from __future__ import annotations

import json
import sys

from .sandbox import Limits, Sandbox

CALL_SECONDS = 1
"""Seconds one call may run (a loop that never ends is an output like any other: `raises TimeoutError`)."""
OUTPUT_CHARS = 300
"""Characters of a call's output kept for comparison."""
MARK = "reflexa-behaviour:"

HARNESS = f"""
import json, signal, sys
calls = json.load(open("calls.json"))
scope = {{"__name__": "candidate"}}
try:
    exec(compile(open("candidate.py").read(), "candidate.py", "exec"), scope)
except BaseException as exc:
    print({MARK!r} + json.dumps(None))
    sys.exit(0)

def _alarm(*_):
    raise TimeoutError

signal.signal(signal.SIGALRM, _alarm)
outputs = []
for call in calls:
    signal.alarm({CALL_SECONDS})
    try:
        text = repr(eval(call, scope))
    except BaseException as exc:
        text = "raises " + type(exc).__name__
    finally:
        signal.alarm(0)
    outputs.append(text[:{OUTPUT_CHARS}])
sys.stdout.flush()
print({MARK!r} + json.dumps(outputs))
"""


def behaviour(code: str, calls: list[str], sandbox: Sandbox | None = None) -> tuple[str, ...] | None:
    """The outputs of `calls` on the candidate `code` (its prelude included), one per call, or None when the
    code does not load or the run ends without its outputs (killed at its time or memory limit)."""
    sandbox = sandbox or Sandbox(Limits.within(CALL_SECONDS * len(calls) + 5))
    result = sandbox.run([sys.executable, "-I", "harness.py"], files={
        "harness.py": HARNESS, "candidate.py": code, "calls.json": json.dumps(calls)})
    lines = [line for line in result.stdout.splitlines() if line.startswith(MARK)]
    if not lines:
        return None
    try:
        outputs = json.loads(lines[-1].removeprefix(MARK))
    except ValueError:
        return None
    return tuple(str(o) for o in outputs) if isinstance(outputs, list) and len(outputs) == len(calls) else None
