"""evalbeam's import graph: no circle, no import up a floor, no Beam in metrics/.

Plain Python (ast), no evalbeam import: every `import` and `from ... import` of the package's
modules is read, function-level and TYPE_CHECKING ones included, so an import hidden in a function
counts as any other. The floors (docs/development.md, "Where things live"), lowest first:
  metrics/      pure Python: imports nothing of evalbeam's above it, and never apache_beam
  transforms/   Beam pieces: may import metrics/ and configs/ (the typed settings they are built from)
  configs/      the config's schema, loading and ADK's expansion: may import metrics/, not transforms/
  pipelines/    composes them all
"""
from __future__ import annotations

import pytest
import ast
from pathlib import Path

from tests.helpers import ROOT

FOLDERS = ("configs", "metrics", "pipelines", "transforms")
# folder -> the folders it may import
ALLOWED = {
    "metrics": {"metrics"},
    "transforms": {"metrics", "transforms", "configs"},
    "configs": {"metrics", "configs"},
    "pipelines": {"metrics", "transforms", "configs", "pipelines"},
}
# (importer, imported) -> why it is allowed for now. Each is a debt, not a rule. None is left.
EXCEPTIONS: dict[tuple[str, str], str] = {}


def modules() -> dict[str, Path]:
    out = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out["evalbeam." + ".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules (of `known`, or any other top-level package's name) a module imports, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.add(full if full in known else base)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def evalbeam_edges(g: dict[str, set[str]]) -> dict[str, set[str]]:
    return {m: {t for t in targets if t in g and t != m} for m, targets in g.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's), each a circle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def upward(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((m, t) for m, targets in edges.items() for t in targets
                  if t.split(".")[1] not in ALLOWED[m.split(".")[1]])


@pytest.mark.slow
def test_the_graph_is_read():
    """The reader sees what is there: imports at the top, in functions, relative ones, and `from pkg import mod`."""
    edges = evalbeam_edges(graph())
    assert len(edges) > 100
    # a top-level import, a function-level one, and a module imported by `from package import module`
    assert "evalbeam.metrics.registry" in edges["evalbeam.metrics.adk"]
    assert "evalbeam.metrics.rows.tables" in edges["evalbeam.configs.schema"]  # inside reserved_columns()
    assert "evalbeam.metrics.judge.adk_judges" in edges["evalbeam.metrics.catalog"]


def test_cycles_and_upward_imports_are_found():
    """The checks fail where they should: on a made-up graph with a circle and an import up a floor."""
    edges = {"evalbeam.metrics.a": {"evalbeam.metrics.b"}, "evalbeam.metrics.b": {"evalbeam.metrics.a"},
             "evalbeam.metrics.c": {"evalbeam.transforms.d"}, "evalbeam.transforms.d": set()}
    assert cycles(edges) == [["evalbeam.metrics.a", "evalbeam.metrics.b"]]
    assert upward(edges) == [("evalbeam.metrics.c", "evalbeam.transforms.d")]


@pytest.mark.slow
def test_no_import_circle():
    assert cycles(evalbeam_edges(graph())) == []


@pytest.mark.slow
def test_no_import_up_a_floor():
    edges = evalbeam_edges(graph())
    found = [edge for edge in upward(edges) if edge not in EXCEPTIONS]
    assert found == [], "imports up a floor (docs/development.md, Where things live): " + ", ".join(
        f"{m} -> {t}" for m, t in found)
    # an exception no longer needed is removed
    stale = [edge for edge in EXCEPTIONS if edge[1] not in edges.get(edge[0], set())]
    assert stale == []


@pytest.mark.slow
def test_metrics_never_import_beam():
    g = graph()
    found = sorted(m for m, targets in g.items() if m.startswith("evalbeam.metrics")
                   and any(t == "apache_beam" or t.startswith("apache_beam.") for t in targets))
    assert found == []
