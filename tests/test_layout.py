"""The package's shape: every module imports alone, no import cycle, small parts.

Read from the installed package, as every test here is.  An import cycle
counts only module-level imports (those run while a module is imported;
``if TYPE_CHECKING:`` blocks do not run): an import inside a function is a
lazy load, which a module may need to keep start-up cheap.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fastloop

PACKAGE = Path(fastloop.__file__).resolve().parent
#: Not modules of the package: a directory ``fastloop run`` puts on
#: PYTHONPATH, and ``python -m fastloop``, which runs the command line.
NOT_IMPORTED = ("fastloop.runtime.sitecustomize", "fastloop.__main__")
#: Modules that import an optional dependency at their top.
OPTIONAL = {
    "fastloop.telemetry.prometheus": "prometheus_client",
    "fastloop.dask.cli": "click",  # a dependency of distributed, as the preload is
}


def modules() -> dict[str, Path]:
    """Every module of the installed package, by dotted name."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return "TYPE_CHECKING" in ast.unparse(test)


def module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The import statements that run when the module is imported."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return  # runs when called, not at import
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the fastloop modules its module-level imports load."""
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in module_level_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
                continue
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                targets.add(submodule if submodule in known else base)
        edges = set()
        for target in targets:
            parts = target.split(".")
            # Importing a.b.c runs a and a.b first.
            edges.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        graph[name] = {t for t in edges if t in known and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_the_graph_sees_module_level_imports_only():
    graph = import_graph()
    assert "fastloop.patches.registry" in graph["fastloop.patches.add_callback"]
    # configure() loads what a setting sets in motion lazily: not an edge.
    assert "fastloop.observers.watchdog" not in graph["fastloop.runtime.bootstrap"]
    assert graph["fastloop"] == set()  # names load lazily: start-up cost


def test_cycles_are_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycle_among_fastloop_modules():
    assert cycles(import_graph()) == []


def test_settings_import_no_other_fastloop_module():
    """Not even lazily: what a change of setting starts is _bootstrap's."""
    tree = ast.parse(modules()["fastloop.config"].read_text())
    imports = [
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
    ]
    assert [line for line in imports if "fastloop" in line] == []


@pytest.mark.parametrize(
    "name", [name for name in modules() if not name.startswith(NOT_IMPORTED)]
)
def test_every_module_imports_alone_in_a_fresh_interpreter(name):
    needs = OPTIONAL.get(name)
    if needs is not None and importlib.util.find_spec(needs) is None:
        pytest.skip(f"{name} needs {needs}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
    result = subprocess.run(
        [sys.executable, "-c", f"import {name}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr


#: Large enough that a table meant to be read whole (every figure in
#: telemetry/schema.py, every setting in config.py, the bench workloads)
#: stays one module rather than splitting by length instead of meaning; the
#: schema grows by a declaration per figure (600 since the switch interval's).
MODULE_LINES = 600


def test_no_module_over_the_line_limit_and_no_function_over_80():
    import pytest_fastloop

    sources = {**modules(), "pytest_fastloop": Path(pytest_fastloop.__file__)}
    too_long = []
    for name, path in sources.items():
        source = path.read_text()
        if len(source.splitlines()) > MODULE_LINES:
            too_long.append(f"{name}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > 80:
                    too_long.append(f"{name}.{node.name}: {length} lines")
    assert too_long == []


def reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start``'s module-level imports load, directly or not."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_the_stats_pipeline_knows_nothing_of_patches_or_observers():
    """Dependencies point one way: patches and observers feed telemetry."""
    graph = import_graph()
    for name, path in modules().items():
        if not name.startswith("fastloop.telemetry"):
            continue
        loaded = reaches(graph, name)
        lazily = [
            ast.unparse(node)
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.Import, ast.ImportFrom))
            and "fastloop." in ast.unparse(node)
        ]
        wrong = [
            m
            for m in loaded
            if m.startswith(("fastloop.patches", "fastloop.observers"))
        ]
        wrong += [line for line in lazily if "patches" in line or "observers" in line]
        assert wrong == [], name
