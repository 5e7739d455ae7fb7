"""House habits that a linter does not check: a loop stays one screen of control flow (DESIGN.md)."""

import ast
from pathlib import Path

import pytest

LOOPS = Path(__file__).parent.parent / "src" / "reflexa" / "loops"
MAX_FUNCTION_LINES = 60


@pytest.mark.parametrize("module", sorted(LOOPS.glob("*.py")), ids=lambda p: p.name)
def test_loop_functions_fit_one_screen(module):
    tree = ast.parse(module.read_text(encoding="utf-8"), str(module))
    too_long = [
        f"{node.name} (line {node.lineno}): {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not too_long, f"{module.name}: functions over {MAX_FUNCTION_LINES} lines (def to last line): {too_long}"


def test_the_loop_modules_are_found():
    assert {"react.py", "refine.py", "research.py", "session.py", "trials.py"} <= {p.name for p in LOOPS.glob("*.py")}
