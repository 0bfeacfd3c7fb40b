"""evalbeam's import graph: no circle, no import up a floor, no Beam in metrics/.

Plain Python (ast), no evalbeam import: every `import` and `from ... import` of the package's
modules is read, function-level and TYPE_CHECKING ones included, so an import hidden in a function
counts as any other. The floors (docs/development.md, "Where things live"), lowest first:
  metrics/      pure Python: imports nothing of evalbeam's above it, and never apache_beam
  transforms/   Beam pieces: may import metrics/ and configs/ (the typed settings they are built from)
  configs/      the config's schema, loading and ADK's expansion: may import metrics/, not transforms/
  pipelines/    composes them all

A module loaded by name counts too: `importlib.import_module(...)` or `__import__(...)` with a
string is an edge to that module, with an f-string whose literal start (module-level string
constants and `__name__` filled in) is `evalbeam.` an edge to every module under that start, and any
other argument a dynamic load, allowed only where the user's own code is loaded (DYNAMIC). Importing
`a.b.c` runs `a` and `a.b` first: those packages are edges too.
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


# the modules that load a module named at run time (not a literal): the user's own code, which no module of
# evalbeam is. module -> what it loads
DYNAMIC = {
    "evalbeam.metrics.agents.inference": "the user's agent or function (inference.target: package.module:name)",
    "evalbeam.metrics.custom": "the user's custom metric (metrics: - function: package.module:function)",
}
LOADERS = ("import_module", "__import__")
# (module, why): a module that opens a file above its own folder of FOLDERS (Path(__file__) climbing out)
CLIMBS = {"evalbeam.pipelines.commands.beam_flags": "a checkout's setup.py, for Dataflow's --setup_file"}


def _constants(tree: ast.Module) -> dict[str, str]:
    """The module-level names bound to a string (NAME = "..."), which an f-string may start with."""
    return {target.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            for target in node.targets if isinstance(target, ast.Name)}


def _literal_start(value: ast.JoinedStr, name: str, constants: dict[str, str]) -> str:
    """What an f-string starts with before its first part not known when the module is read."""
    start = ""
    for part in value.values:
        if isinstance(part, ast.Constant):
            start += str(part.value)
        elif (isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name) and part.format_spec is None
              and (part.value.id == "__name__" or part.value.id in constants)):
            start += name if part.value.id == "__name__" else constants[part.value.id]
        else:
            break
    return start


def imports(name: str, path: Path, known: set[str], dynamic: list[str] | None = None) -> set[str]:
    """The modules (of `known`, or any other top-level package's name) a module imports, anywhere in it.
    A load by a name only known at run time is appended to `dynamic` as "module:line"."""
    return imports_in(name, path.read_text(encoding="utf-8"), path.name == "__init__.py", known, dynamic, str(path))


def imports_in(name: str, source: str, is_package: bool, known: set[str], dynamic: list[str] | None = None,
               filename: str = "<module>") -> set[str]:
    """imports() of a module's source text."""
    package = name if is_package else name.rpartition(".")[0]
    tree = ast.parse(source, filename)
    constants = _constants(tree)
    out: set[str] = set()
    for node in ast.walk(tree):
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
        elif isinstance(node, ast.Call) and (getattr(node.func, "id", None) in LOADERS
                                             or getattr(node.func, "attr", None) in LOADERS):
            argument = node.args[0] if node.args else None
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                out.add(argument.value)
            elif isinstance(argument, ast.JoinedStr) and _literal_start(argument, name, constants):
                start = _literal_start(argument, name, constants)
                if start.startswith("evalbeam."):
                    out.update(m for m in known if m.startswith(start))
                else:  # another package's modules (google.adk's)
                    out.add(start.partition(".")[0])
            elif dynamic is not None:
                dynamic.append(f"{name}:{node.lineno}")
    # importing a.b.c runs the packages a and a.b first, unless they are this module's own (run before it)
    out.update(parent for target in list(out) if target.startswith("evalbeam.")
               for parent in (target.rsplit(".", n)[0] for n in range(1, target.count(".")))
               if parent in known and not f"{name}.".startswith(f"{parent}."))
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
    # a module loaded by an f-string name: every command is an edge of the entry point's loader
    assert "evalbeam.pipelines.commands.run" in edges["evalbeam.pipelines.cli"]
    assert "evalbeam.pipelines.commands.metrics" in edges["evalbeam.pipelines.cli"]
    # the registry is a leaf: it imports nothing of evalbeam's
    assert edges["evalbeam.metrics.registry"] == set()


def test_modules_loaded_by_name_are_edges():
    """import_module and __import__ with a string, or an f-string starting with `evalbeam.`, are read as
    imports: the two circles they once hid (the registry loading the built-in metrics, which import the
    registry; the commands package loading its commands, which import the package) are found."""
    known = {"evalbeam.metrics", "evalbeam.metrics.registry", "evalbeam.metrics.builtin", "evalbeam.metrics.adk",
             "evalbeam.pipelines", "evalbeam.pipelines.commands", "evalbeam.pipelines.commands.run",
             "evalbeam.pipelines.commands.show"}
    sources = {
        "evalbeam.metrics": (True, "from evalbeam.metrics.registry import register\n"),
        "evalbeam.metrics.registry": (False, "import importlib\n"
                                             "def _registry():\n"
                                             "    importlib.import_module('evalbeam.metrics.builtin')\n"),
        "evalbeam.metrics.builtin": (False, "from evalbeam.metrics import adk\n"),
        "evalbeam.metrics.adk": (False, "from evalbeam.metrics.registry import register\n"),
        "evalbeam.pipelines": (True, ""),
        "evalbeam.pipelines.commands": (True, "from importlib import import_module\n"
                                              "def command(name):\n"
                                              "    return import_module(f'{__name__}.{name}')\n"),
        "evalbeam.pipelines.commands.run": (False, "from evalbeam.pipelines.commands import usage_error\n"),
        "evalbeam.pipelines.commands.show": (False, "__import__('json')\n"),
    }
    dynamic: list[str] = []
    edges = evalbeam_edges({name: imports_in(name, source, is_package, known, dynamic)
                            for name, (is_package, source) in sources.items()})
    assert edges["evalbeam.metrics.registry"] == {"evalbeam.metrics.builtin"}
    assert edges["evalbeam.pipelines.commands"] == {"evalbeam.pipelines.commands.run",
                                                    "evalbeam.pipelines.commands.show"}
    assert cycles(edges) == [["evalbeam.metrics.adk", "evalbeam.metrics.builtin", "evalbeam.metrics.registry"],
                             ["evalbeam.pipelines.commands", "evalbeam.pipelines.commands.run"]]
    assert dynamic == []
    # an f-string not starting with a known name, or a variable: a dynamic load, said by module and line
    imports_in("evalbeam.metrics.x", "import importlib\ndef load(m):\n    importlib.import_module(m)\n"
               "    importlib.import_module(f'{m}.b')\n", False, known, dynamic)
    assert dynamic == ["evalbeam.metrics.x:3", "evalbeam.metrics.x:4"]
    # a module-level constant filled in: another package's module, not a dynamic load
    assert "google" in imports_in("evalbeam.metrics.y", "import importlib\nBASE = 'google.adk'\n"
                                  "importlib.import_module(f'{BASE}.evaluation')\n", False, known, dynamic)
    assert len(dynamic) == 2


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
def test_only_the_user_code_loaders_load_a_module_named_at_run_time():
    """A module loaded by a name the reader cannot see is an edge the circle check misses: each is named in
    DYNAMIC, and only the user's own code is loaded that way."""
    mods = modules()
    dynamic: list[str] = []
    for name, path in mods.items():
        imports(name, path, set(mods), dynamic)
    assert sorted({load.partition(":")[0] for load in dynamic}) == sorted(DYNAMIC)


def climb(node: ast.AST) -> int | None:
    """How many folders up from the module's own file `node` names (Path(__file__).parent is 1), or None
    when it is not a path made from __file__."""
    if isinstance(node, ast.Name) and node.id == "__file__":
        return 0
    if isinstance(node, ast.Call):
        function = node.func
        if getattr(function, "id", None) == "Path" or getattr(function, "attr", None) in ("Path", "abspath", "realpath"):
            return climb(node.args[0]) if node.args else None
        if getattr(function, "attr", None) == "dirname":
            up = climb(node.args[0]) if node.args else None
            return None if up is None else up + 1
        if isinstance(function, ast.Attribute) and function.attr in ("resolve", "absolute", "with_name",
                                                                     "with_suffix"):
            return climb(function.value)
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        up = climb(node.value)
        return None if up is None else up + 1
    if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents"
            and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int)):
        up = climb(node.value.value)
        return None if up is None else up + node.slice.value + 1
    return None


def climbs_out(relative: Path, source: str) -> list[int]:
    """The lines where a module (`relative` to the checkout) names a path above its folder of FOLDERS."""
    allowed = len(relative.parts) - 1  # metrics/judge/templates.py: metrics/judge/ (1) and metrics/ (2)
    return sorted({node.lineno for node in ast.walk(ast.parse(source))
                   if (climb(node) or 0) > allowed and hasattr(node, "lineno")})


def test_a_path_climbing_out_of_its_folder_is_found():
    assert climbs_out(Path("metrics/judge/t.py"), "BUILTIN = Path(__file__).with_name('data') / 'a.yaml'") == []
    assert climbs_out(Path("metrics/judge/t.py"), "P = Path(__file__).parent.parent / 'a.yaml'") == []
    assert climbs_out(Path("metrics/judge/t.py"),
                      "x = 1\nP = Path(__file__).resolve().parent.parent.parent / 'configs' / 'a.yaml'") == [2]
    assert climbs_out(Path("metrics/t.py"), "P = Path(__file__).parents[1] / 'configs/a.yaml'") == [1]
    assert climbs_out(Path("metrics/t.py"), "P = os.path.dirname(os.path.dirname(__file__))") == [1]


@pytest.mark.slow
def test_no_module_opens_a_file_above_its_folder():
    """metrics/ reads its data beside its reader (metrics/judge/data/), never configs/*.yaml by a path
    climbing out: an installed package is laid out as the checkout is, but each folder owns its data."""
    found = {}
    for name, path in modules().items():
        lines = climbs_out(path.relative_to(ROOT), path.read_text(encoding="utf-8"))
        if lines:
            found[name] = lines
    assert sorted(found) == sorted(CLIMBS)


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
