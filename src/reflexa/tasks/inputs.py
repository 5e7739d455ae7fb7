"""What the file system says about a spec before it runs: each problem one line, found before any model call."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..files import file_problem, is_sqlite, read_text
from ..tools.load import problem as tool_problem

if TYPE_CHECKING:
    from .spec import TaskSpec


def problems(spec: TaskSpec) -> list[str]:
    """Every problem with the files and folders a spec names; empty when it can run."""
    from .kinds import kinds

    found: list[str] = []
    if spec.workdir and not Path(spec.workdir).is_dir():
        found.append(f"workdir: not a folder: {spec.workdir}")
    setup = spec.check_setup()
    for name, value in spec.checks.items():
        found += [f"{name}: {p}" for p in kinds()[name].problems(value, setup)]
    if (db := spec.path("db")) is not None:
        if (problem := file_problem(db, "database")) is not None:
            found.append(f"db: {problem}")
        else:
            found += _database_problems(spec, db)
    if spec.corpus and not (spec.path("corpus") or Path()).is_dir():
        found.append(f"corpus: not a folder: {spec.corpus}")
    base = Path(spec.workdir or ".")
    found += [f"tools: {p}" for ref in spec.tools if (p := tool_problem(ref, base)) is not None]
    if isinstance(spec.plan, str) and (problem := file_problem(spec.path("plan") or Path(), "plan file")):
        found.append(f"plan: {problem}")
    return found


def tests_problems(path: Path, out: str) -> list[str]:
    """What is wrong with a pytest file a task names: not there, not Python, no test, not importing `out`."""
    from ..evaluate.checks import test_file_problem

    try:
        source = read_text(path, "file")
    except ConfigError as exc:
        return [str(exc)]
    if (problem := test_file_problem(source)) is not None:
        return [f"{path.name} {problem}"]  # else every attempt fails on it, blamed on the candidate
    module = Path(out).stem
    if not _imports(source, module):
        # Found after a model call, every attempt would fail on an import error blamed on the candidate.
        return [f"{path.name} does not import `{module}`, where the candidate is written (give `out` as the "
                f"file the tests import, e.g. {_imported_guess(source) or 'solution'}.py)"]
    return []


def _imports(source: str, module: str) -> bool:
    """Whether test source imports `module` (import m, from m import ..., or a dynamic import naming it)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return True  # test_file_problem has said so already
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == module for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == module:
            return True
        # importlib.import_module("solution"), or a command that runs solution.py
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                node.value == module or f"{module}.py" in node.value):
            return True
    return False


def _imported_guess(source: str) -> str | None:
    """The first top-level module a test file imports that is not the standard library's or pytest."""
    import ast
    import sys

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
        for name in names:
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top not in ("pytest", "hypothesis", "__future__"):
                return top
    return None


def _database_problems(spec: TaskSpec, db: Path) -> list[str]:
    from ..evaluate.answer import answer_validator

    if not is_sqlite(db):
        return [f"db: not an SQLite database: {db}"]
    if spec.validate_ is None or not spec.validate_.strip():
        return []
    try:  # a query that cannot run is found now, not after the model's answer
        answer_validator(spec.validate_, db)
    except ConfigError as exc:
        return [f"validate: {exc}"]
    return []


def given_tree(spec: TaskSpec) -> dict | Path | None:
    """The goal tree a plan spec gives: inline data, or its JSON file."""
    if isinstance(spec.plan, dict):
        return spec.plan
    return spec.path("plan")


