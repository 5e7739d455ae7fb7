"""House habits that a linter does not check (docs/architecture.md): a function fits one screen, imports point
down the layers, the library never reaches into a face, and source comments name a benchmark, not a commit."""

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).parent.parent / "src" / "reflexa"
MODULES = sorted(SRC.rglob("*.py"))
MAX_FUNCTION_LINES = 60

LAYERS = [
    ("core", {"_version", "types", "errors", "budget", "structured", "files", "models", "trace"}),
    ("parts", {"evaluate", "search", "tools"}),
    ("runtime", {"runtime", "observe", "aio", "executors"}),
    ("engine", {"reflect"}),
    ("loops", {"loops"}),
    ("tasks", {"tasks"}),
    ("faces", {"cli", "ui", "batch", "eval", "mcp"}),
]
"""docs/architecture.md's table, bottom up: a module may import from its own layer and the ones below it."""
RANK = {package: rank for rank, (_, packages) in enumerate(LAYERS) for package in packages}
FACADE = SRC / "__init__.py"
"""The package's front door re-exports every layer's names (lazily): it is above them all, so a module of any
layer that imports `reflexa` itself imports up."""
FACADE_RANK = len(LAYERS)


def name_of(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(("reflexa", *(parts[:-1] if parts[-1] == "__init__" else parts)))


KNOWN = {name_of(m) for m in MODULES}


def _target(base: str, name: str) -> str:
    """What `from BASE import NAME` imports: the module BASE.NAME when there is one, else a name of BASE."""
    return f"{base}.{name}" if f"{base}.{name}" in KNOWN else base


def imports(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """(line, module) for every import of a reflexa module in `path`, at any depth of the file; `from .. import
    observe` is an import of reflexa.observe, and `from .. import __version__` one of the package itself."""
    package = name_of(path) if path.name == "__init__.py" else name_of(path).rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(source if source is not None else path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            elif node.module:
                base = node.module
            else:
                continue
            found += [(node.lineno, _target(base, alias.name)) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return [(line, module) for line, module in found if module == "reflexa" or module.startswith("reflexa.")]


def layer(module: str) -> int | None:
    if module == "reflexa":
        return FACADE_RANK
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
    assert own is not None, f"{name_of(module)} is in no layer of docs/architecture.md's table: add it to LAYERS"
    upward = [f"line {line}: {target} ({'the package itself' if target == 'reflexa' else LAYERS[layer(target)][0]})"
              for line, target in imports(module) if layer(target) is not None and layer(target) > own]
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


def test_the_layer_check_sees_an_import_of_the_package_itself():
    """`from .. import __version__` in a module below the faces imports `reflexa/__init__.py`, which imports
    every layer: the check reads it as the package itself, above them all, and `from .. import observe` as the
    module it names."""
    source = "from .. import __version__\nfrom .. import aio\n"
    found = {target: line for line, target in imports(SRC / "observe" / "_probe.py", source)}
    assert found == {"reflexa": 1, "reflexa.aio": 2}
    assert layer("reflexa") > max(RANK.values()) >= layer("reflexa.observe")


def _module_graph() -> dict[str, set[str]]:
    """Each module's imports of other reflexa modules (the package itself left out: it only re-exports)."""
    return {name_of(m): {t for _, t in imports(m) if t in KNOWN and t != name_of(m) and t != "reflexa"}
            for m in MODULES if m != FACADE}


def _folder(module: str) -> str:
    """The folder a module's file is in: reflexa.loops for reflexa.loops.react and for reflexa.loops itself."""
    return module if (SRC / Path(*module.split(".")[1:])).is_dir() else module.rsplit(".", 1)[0]


def test_no_import_circle_crosses_a_folder():
    """Modules that import each other (directly or around a circle) sit in one folder: a circle between two
    packages means the shared type belongs one floor down."""
    graph = _module_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(component)

    for node in graph:
        if node not in index:
            visit(node)
    crossing = [sorted(c) for c in circles if len({_folder(m) for m in c}) > 1]
    assert not crossing, f"import circles across folders: {crossing}"


COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
"""A commit hash as this project writes them (7 hex digits or more, letters and digits both)."""


@pytest.mark.parametrize("module", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_source_names_no_commit_and_no_result_file(module):
    text = module.read_text(encoding="utf-8")
    commits = [hit for hit in COMMIT.findall(text) if not hit.isdigit()]
    assert not commits, f"commit hashes in {module.name}: {commits}"
    assert "bench/results/" not in text, f"{module.name} cites a result file: name its benchmark instead"
