"""House habits that a linter does not check (DESIGN.md): a function fits one screen, imports point down the
layers, the library never reaches into a face, and source comments name a benchmark, not a commit."""

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).parent.parent / "src" / "reflexa"
MODULES = sorted(SRC.rglob("*.py"))
MAX_FUNCTION_LINES = 60

LAYERS = [
    ("core", {"types", "errors", "budget", "structured", "files", "models", "trace"}),
    ("parts", {"evaluate", "search", "tools"}),
    ("runtime", {"runtime", "observe", "aio"}),
    ("engine", {"reflect"}),
    ("loops", {"loops"}),
    ("tasks", {"tasks"}),
    ("faces", {"cli", "ui", "batch", "eval", "mcp"}),
]
"""DESIGN.md's table, bottom up: a module may import from its own layer and the ones below it."""
RANK = {package: rank for rank, (_, packages) in enumerate(LAYERS) for package in packages}
FACADE = SRC / "__init__.py"
"""The package's front door re-exports every layer's names (lazily): it is above them all."""


def name_of(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(("reflexa", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import of a reflexa module in `path`, at any depth of the file."""
    package = name_of(path) if path.name == "__init__.py" else name_of(path).rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                found.append((node.lineno, ".".join(base + ([node.module] if node.module else []))))
            elif node.module:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return [(line, module) for line, module in found if module.startswith("reflexa.")]


def layer(module: str) -> int | None:
    return RANK.get(module.split(".")[1])


@pytest.mark.parametrize("module", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_functions_fit_one_screen(module):
    tree = ast.parse(module.read_text(encoding="utf-8"), str(module))
    too_long = [
        f"{node.name} (line {node.lineno}): {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines (def to last line): {too_long}"


@pytest.mark.parametrize("module", [m for m in MODULES if m != FACADE], ids=lambda p: str(p.relative_to(SRC)))
def test_imports_point_down_the_layers(module):
    own = layer(name_of(module))
    assert own is not None, f"{name_of(module)} is in no layer of DESIGN.md's table: add it to LAYERS"
    upward = [f"line {line}: {target} ({LAYERS[layer(target)][0]})" for line, target in imports(module)
              if layer(target) is not None and layer(target) > own]
    assert not upward, f"{name_of(module)} ({LAYERS[own][0]}) imports up a layer: {upward}"


def test_the_library_never_imports_from_the_cli():
    reaching = [f"{name_of(m)} line {line}" for m in MODULES if "cli" not in m.relative_to(SRC).parts
                for line, target in imports(m) if target.startswith("reflexa.cli")]
    assert not reaching


def test_the_layer_check_reads_relative_and_nested_imports():
    """The checks above cannot pass by reading nothing: `from ..tasks import TaskSpec` inside a function of
    cli/run.py is read as reflexa.tasks, which sits below the CLI and above the loops."""
    found = {target for _, target in imports(SRC / "cli" / "run.py")}
    assert {"reflexa.tasks", "reflexa.cli.common", "reflexa.loops"} <= found
    assert layer("reflexa.loops.refine") < layer("reflexa.tasks") < layer("reflexa.cli.run")


COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
"""A commit hash as this project writes them (7 hex digits or more, letters and digits both)."""


@pytest.mark.parametrize("module", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_source_names_no_commit_and_no_result_file(module):
    text = module.read_text(encoding="utf-8")
    commits = [hit for hit in COMMIT.findall(text) if not hit.isdigit()]
    assert not commits, f"commit hashes in {module.name}: {commits}"
    assert "bench/results/" not in text, f"{module.name} cites a result file: name its benchmark instead"
