"""profkit's modules import each other one way only: no circles, no import from a lower layer to a higher one.

Every module's imports are read with ``ast``, those inside functions too: a lazy import
ties two modules together all the same, it only moves the cost.  Layers, low to high:

    base (errors, allocator, atomic)  <  model  <  readers  <  scrub  <  analysis, ranks, ptx
      <  report, export, output, history  <  capture  <  cli, api

A module may import its own layer or lower ones.  On top of that, an analysis reads a
``Trace`` and nothing else: it never imports a reader, ``capture`` or a renderer (which
the layer order alone would allow for readers).

The package root (``profkit/__init__.py``) is the version plus a lazy facade: what the
other modules import from it (``__version__``) sits in the base layer, and its own imports
must sit inside functions (run when a user touches ``profkit.open``, never by ``import
profkit.model``), so they are not edges of the graph that a circle could run through.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "profkit"

BASE, MODEL, READERS, SCRUB, ANALYSIS, RENDER, CAPTURE, TOP = range(8)
# the first matching prefix wins: more specific prefixes come first
LAYERS: list[tuple[str, int]] = [
    ("profkit.errors", BASE), ("profkit.allocator", BASE), ("profkit.atomic", BASE), ("profkit._version", BASE),
    ("profkit.limits", BASE), ("profkit.signals", BASE),
    ("profkit.model", MODEL),
    ("profkit.readers", READERS),
    # scrub reads a trace through its format's reader and writes a copy: it sits above readers
    ("profkit.scrub", SCRUB),
    ("profkit.analysis", ANALYSIS), ("profkit.ranks", ANALYSIS), ("profkit.ptx", ANALYSIS),
    ("profkit.report", RENDER), ("profkit.export", RENDER), ("profkit.output", RENDER),
    ("profkit.terminal", RENDER), ("profkit.history", RENDER),
    ("profkit.capture", CAPTURE),
    ("profkit.cli", TOP), ("profkit.api", TOP), ("profkit.__main__", TOP),
]
# what an analysis must not import even where the layer order allows it
NOT_FROM_ANALYSIS = ("profkit.readers", "profkit.capture", "profkit.report", "profkit.export", "profkit.output")
ROOT = "profkit"

def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for f in package.rglob("*.py"):
        parts = f.relative_to(package.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    """The profkit modules one import statement loads (``from a import b`` is a.b where b is a module)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in known}
    base = node.module or ""
    if node.level:
        here = module.split(".") if is_package else module.split(".")[:-1]
        here = here[: len(here) - node.level + 1]
        base = ".".join(here + ([base] if base else []))
    if base not in known:
        return set()
    subs = {f"{base}.{a.name}" for a in node.names} & known
    # names that are not submodules come from the module itself
    return subs | ({base} if len(subs) < len(node.names) else set())


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the profkit modules it imports, anywhere in its body (the root's lazy imports left out)."""
    modules = _modules(package)
    known = set(modules)
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        nodes = tree.body if module == ROOT else ast.walk(tree)
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges[module] |= _targets(module, path.name == "__init__.py", node, known) - {module}
    return edges


def layer(module: str) -> int:
    if module == ROOT:
        return BASE
    for prefix, level in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            return level
    raise AssertionError(f"{module} is in no layer: add it to LAYERS in {Path(__file__).name}")


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    bad = []
    for module, targets in sorted(edges.items()):
        for target in sorted(targets):
            if layer(target) > layer(module):
                bad.append(f"{module} -> {target}")
            elif module.startswith("profkit.analysis") and target.startswith(NOT_FROM_ANALYSIS):
                bad.append(f"{module} -> {target} (an analysis reads a Trace only)")
    return bad


def test_no_import_circles() -> None:
    found = circles(import_graph())
    assert not found, "modules that import each other in a loop:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_upward_imports() -> None:
    bad = upward_imports(import_graph())
    assert not bad, "imports from a lower layer to a higher one:\n" + "\n".join(bad)


def test_root_imports_only_lazily() -> None:
    """``import profkit`` stays light: at module level the package root imports only its version
    (its facade imports inside functions)."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    eager = [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
             and "profkit" in ast.unparse(n)]
    assert eager == ["from profkit._version import __version__"]


def test_no_module_imports_the_root() -> None:
    """Nothing inside profkit imports the package root (``from profkit import __version__`` comes
    from ``profkit._version``): the root's lazy facade imports the API, so an import of the root
    from below would close a loop through it."""
    importers = sorted(m for m, targets in import_graph().items() if ROOT in targets)
    assert importers == [], importers


# The finder itself, on small packages written here: a test that cannot fail proves nothing.

def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "profkit"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_finder_sees_a_circle_through_a_function_level_import(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "__init__.py": "",
        "analysis/__init__.py": "",
        "analysis/a.py": "from profkit.analysis import b\n",
        "analysis/b.py": "def f():\n    from .a import x\n",
        "analysis/c.py": "import profkit.analysis.a\n",
    })
    assert circles(import_graph(root)) == [["profkit.analysis.a", "profkit.analysis.b"]]


def test_finder_sees_upward_and_forbidden_imports(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "__init__.py": "def __getattr__(name):\n    from profkit import api\n",
        "api.py": "from profkit.analysis import steps\n",
        "model/__init__.py": "def f():\n    from profkit.analysis.steps import g\n",
        "readers/__init__.py": "from profkit.model import x\n",
        "analysis/__init__.py": "",
        "analysis/steps.py": "from profkit import __version__\nfrom profkit.readers import open_trace\n",
    })
    edges = import_graph(root)
    assert edges["profkit"] == set()  # the root's lazy import is not an edge
    assert upward_imports(edges) == [
        "profkit.analysis.steps -> profkit.readers (an analysis reads a Trace only)",
        "profkit.model -> profkit.analysis.steps",
    ]


def test_every_module_has_a_layer() -> None:
    for module in _modules():
        layer(module)
    with pytest.raises(AssertionError, match="in no layer"):
        layer("profkit.somewhere_new")
