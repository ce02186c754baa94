"""The core's import graph has no cycle: not between its parts, not inside one package.

A part (a node) is a package of ``chatkernel/core`` (config, gateway, store, ...) or one of
its top-level modules (kernel.py, plugins.py, ...). Every import counts, at the top of a
file or in a function body, relative or absolute, except one under ``if TYPE_CHECKING:``
(annotations only: it never runs). A cycle means neither side can be read, tested or
replaced without the other; the layers it breaks are drawn in docs/ARCHITECTURE.md.

``scripts/import-graph`` prints the package-level edges this builds.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE_PACKAGE = "chatkernel.core"
IMPORTERS = {"import_module", "__import__"}  # importlib.import_module("..."), __import__


def module_name(path: Path, root: Path) -> str:
    """``chatkernel.core.heartbeat.scheduler`` for ``<root>/chatkernel/core/heartbeat/
    scheduler.py`` (a package's ``__init__`` is the package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path) -> dict[str, Path]:
    """Every module of ``<root>/chatkernel/core`` by its dotted name."""
    core = root.joinpath(*CORE_PACKAGE.split("."))
    return {module_name(path, root): path for path in sorted(core.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``tree`` but the bodies of ``if TYPE_CHECKING:`` (their ``else``
    runs, so it counts)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def imported(source: str, module: str, known: Iterable[str], *,
             package: bool = False) -> set[str]:
    """The modules ``source`` (the module ``module``) imports when it runs. Relative
    imports are resolved; ``from a import b`` is ``a.b`` where that is a module of
    ``known``, else ``a``; a literal name given to ``import_module``/``__import__`` counts."""
    known = set(known)
    base = module.split(".") if package else module.split(".")[:-1]
    found: set[str] = set()
    for node in _nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            where = base[:len(base) - node.level + 1] if node.level else []
            name = ".".join(where + ([node.module] if node.module else []))
            for alias in node.names:
                found.add(f"{name}.{alias.name}" if f"{name}.{alias.name}" in known else name)
        elif isinstance(node, ast.Call) and node.args and \
                isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in IMPORTERS:
                found.add(node.args[0].value)
    return found


@functools.cache
def _module_edges(root: Path) -> frozenset[tuple[str, str]]:
    found = modules(root)
    edges = set()
    for name, path in found.items():
        for target in imported(path.read_text(encoding="utf-8"), name, found,
                               package=path.name == "__init__.py"):
            if target in found and target != name:
                edges.add((name, target))
    return frozenset(edges)


def module_edges(root: Path = ROOT) -> set[tuple[str, str]]:
    """``(importer, imported)`` for every import of a core module by a core module."""
    return set(_module_edges(root))


def part(module: str) -> str:
    """The node a core module belongs to: ``gateway`` for ``chatkernel.core.gateway.
    cluster``, ``kernel`` for ``chatkernel.core.kernel``; ``""`` for the core's own
    ``__init__``."""
    rest = module[len(CORE_PACKAGE):].lstrip(".")
    return rest.split(".")[0]


def package_edges(root: Path = ROOT) -> set[tuple[str, str]]:
    """The package-level graph: ``(part, part)`` for every import that crosses parts."""
    return {(part(a), part(b)) for a, b in module_edges(root)
            if part(a) != part(b) and part(a) and part(b)}


def inner_edges(root: Path = ROOT) -> dict[str, set[tuple[str, str]]]:
    """``{package: its module-to-module edges}`` for each package of the core."""
    inner: dict[str, set[tuple[str, str]]] = {}
    for a, b in module_edges(root):
        if part(a) == part(b) and part(a):
            inner.setdefault(part(a), set()).add((a, b))
    return inner


def find_cycle(edges: Iterable[tuple[str, str]]) -> list[str] | None:
    """One cycle of the graph as its nodes, the first repeated at the end, or ``None``."""
    graph: dict[str, list[str]] = {}
    for a, b in sorted(edges):
        graph.setdefault(a, []).append(b)
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def describe(cycle: list[str], edges: set[tuple[str, str]]) -> str:
    """The cycle, with the imports that make each of its steps."""
    lines = [" -> ".join(cycle)]
    for a, b in zip(cycle, cycle[1:]):
        lines += [f"  {x} imports {y}" for x, y in sorted(edges) if part(x) == a and
                  part(y) == b or (x, y) == (a, b)]
    return "\n".join(lines)


def render(edges: Iterable[tuple[str, str]]) -> str:
    """The edges as text, one importer a line: ``kernel -> config, gateway, ...``."""
    out: dict[str, set[str]] = {}
    for a, b in edges:
        out.setdefault(a, set()).add(b)
    return "\n".join(f"{a} -> {', '.join(sorted(out[a]))}" for a in sorted(out))


# -- the core ------------------------------------------------------------------------------


def test_the_core_packages_import_one_another_without_a_cycle():
    assert len(modules(ROOT)) > 60
    edges = package_edges()
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle between core packages:\n" + \
        describe(cycle, module_edges())


@pytest.mark.parametrize("package", ["config", "gateway", "health", "heartbeat", "inbound",
                                     "outbound", "store", "turns"])
def test_no_cycle_among_the_modules_of_a_core_package(package):
    edges = inner_edges().get(package, set())
    cycle = find_cycle(edges)
    assert cycle is None, f"import cycle inside core/{package}:\n" + describe(cycle, edges)


# -- the check catches what it is for -----------------------------------------------------------

KNOWN = {"chatkernel.core.heartbeat", "chatkernel.core.heartbeat.ack",
         "chatkernel.core.heartbeat.scheduler", "chatkernel.core.turns",
         "chatkernel.core.turns.agents", "chatkernel.core.kernel"}


@pytest.mark.parametrize(("source", "expected"), [
    ("from . import ack\n", {"chatkernel.core.heartbeat.ack"}),
    ("from .ack import is_ack\n", {"chatkernel.core.heartbeat.ack"}),
    ("from ..turns.agents import Agent\n", {"chatkernel.core.turns.agents"}),
    ("from ..turns import Agent\n", {"chatkernel.core.turns"}),
    ("from .. import kernel\n", {"chatkernel.core.kernel"}),
    ("def f():\n    from chatkernel.core.kernel import Kernel\n", {"chatkernel.core.kernel"}),
    ("import chatkernel.core.turns.agents\n", {"chatkernel.core.turns.agents"}),
    ("import importlib\nimportlib.import_module('chatkernel.core.kernel')\n",
     {"importlib", "chatkernel.core.kernel"}),
    ("if TYPE_CHECKING:\n    from ..kernel import Kernel\nelse:\n    from . import ack\n",
     {"chatkernel.core.heartbeat.ack"}),
    ("if typing.TYPE_CHECKING:\n    from ..kernel import Kernel\n", set()),
])
def test_the_builder_counts_every_import_that_runs(source, expected):
    assert imported(source, "chatkernel.core.heartbeat.scheduler", KNOWN) == expected


def test_a_cycle_is_found_and_shown_with_its_imports(tmp_path):
    core = tmp_path / "chatkernel" / "core"
    (core / "gateway").mkdir(parents=True)
    (core / "__init__.py").write_text("")
    (core / "gateway" / "__init__.py").write_text("")
    (core / "gateway" / "process.py").write_text(
        "def run():\n    from ..kernel import Kernel\n")
    (core / "kernel.py").write_text("from .gateway.process import run\n")
    edges = package_edges(tmp_path)
    assert edges == {("gateway", "kernel"), ("kernel", "gateway")}
    cycle = find_cycle(edges)
    assert cycle in (["gateway", "kernel", "gateway"], ["kernel", "gateway", "kernel"])
    shown = describe(cycle, module_edges(tmp_path))
    assert "chatkernel.core.gateway.process imports chatkernel.core.kernel" in shown


def test_a_cycle_inside_a_package_is_found(tmp_path):
    store = tmp_path / "chatkernel" / "core" / "store"
    store.mkdir(parents=True)
    (store.parent / "__init__.py").write_text("")
    (store / "__init__.py").write_text("")
    (store / "base.py").write_text("from .shared import Lease\n")
    (store / "shared.py").write_text("def f():\n    from . import base\n")
    edges = inner_edges(tmp_path)["store"]
    assert find_cycle(edges) == ["chatkernel.core.store.base", "chatkernel.core.store.shared",
                                 "chatkernel.core.store.base"]


def test_an_acyclic_graph_has_no_cycle():
    assert find_cycle({("a", "b"), ("b", "c"), ("a", "c")}) is None


if __name__ == "__main__":  # scripts/import-graph
    what = sys.argv[1] if len(sys.argv) > 1 else "packages"
    if what == "packages":
        print(render(package_edges()))
    else:
        print(render({(a.removeprefix(CORE_PACKAGE + "."), b.removeprefix(CORE_PACKAGE + "."))
                      for a, b in inner_edges().get(what, set())}))
