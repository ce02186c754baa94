"""The channel kit (chatkernel.sdk, imported through chatkernel.channels) stands on its own:
it imports nothing of the kernel, the gateway or a store, so a plugin built on it depends on
the contract alone and the kernel can change behind it. Inside, its modules import one
another without a cycle, and no more than 15 sit side by side."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KIT = ROOT / "chatkernel" / "sdk"
#: What the kit may import of this distribution: itself and the hook markers.
ALLOWED = ("chatkernel.sdk", "chatkernel.hookspecs")


def kernel_imports(source: str) -> list[str]:
    """Every module of this distribution ``source`` imports, anywhere (a function body,
    a ``TYPE_CHECKING`` block), that is not the kit's own."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "chatkernel":
                names = [f"chatkernel.{alias.name}" for alias in node.names]
        else:
            continue
        found += [name for name in names if name.split(".")[0] == "chatkernel"
                  and not any(name == ok or name.startswith(ok + ".") for ok in ALLOWED)]
    return found


def test_the_check_finds_an_import_of_the_kernel_anywhere():
    source = ("from chatkernel.sdk.models import Route\n"
              "if TYPE_CHECKING:\n    from chatkernel.core.plugins import PluginManager\n"
              "def f():\n    import chatkernel.core.store.base\n"
              "    from chatkernel import core\n    from chatkernel.builtin import agents\n")
    assert kernel_imports(source) == ["chatkernel.core.plugins", "chatkernel.core.store.base",
                                      "chatkernel.core", "chatkernel.builtin"]


def test_no_kit_module_imports_the_kernel_the_gateway_or_a_store():
    modules = sorted(KIT.rglob("*.py"))
    assert len(modules) > 10
    offences = {str(path.relative_to(ROOT)): found for path in modules
                if (found := kernel_imports(path.read_text()))}
    assert offences == {}


@pytest.mark.slow
def test_importing_the_public_api_and_the_whole_kit_loads_no_kernel_module():
    names = sorted(module_name(path) for path in KIT.rglob("*.py"))
    script = ("import importlib, sys\nimport chatkernel.channels\n"
              f"for name in {names!r}:\n    importlib.import_module(name)\n"
              "print(sorted(m for m in sys.modules if m.startswith('chatkernel.')\n"
              "             and not m.startswith(('chatkernel.sdk', 'chatkernel.channels',\n"
              "                                   'chatkernel.hookspecs'))))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


# -- the kit's own import graph -----------------------------------------------------------


def module_name(path: Path, root: Path = ROOT) -> str:
    """``chatkernel/sdk/receiving/__init__.py`` -> ``chatkernel.sdk.receiving``."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported_names(source: str, module: str, package: bool = False) -> set[str]:
    """Every module ``source`` (the module ``module``) imports, at the top or in a
    function body (it runs, only later), but not under ``if TYPE_CHECKING:``. For
    ``from a import b`` both ``a`` and ``a.b`` (which may be a module)."""
    found: set[str] = set()
    # The package a relative import starts from: a package's own name, a module's parent.
    here = module.split(".") if package else module.split(".")[:-1]

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child.test):
                for other in child.orelse:  # the else branch runs
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    start = here[:len(here) - child.level + 1]
                    base = ".".join(start + ([child.module] if child.module else []))
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in child.names)
            visit(child)

    visit(ast.parse(source))
    return found


def import_graph(folder: Path, root: Path = ROOT) -> dict[str, set[str]]:
    """The modules under ``folder`` (named from ``root``), each with the modules under
    ``folder`` it imports."""
    paths = {module_name(path, root): path for path in sorted(folder.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        edges = set()
        for imported in imported_names(path.read_text(), name, path.name == "__init__.py"):
            while imported and imported not in paths:  # a name inside a module: the module
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                edges.add(imported)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: each set of modules that reach one another
    (a strongly connected component of more than one module), sorted."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(node: str) -> None:
        order[node] = low[node] = len(order)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in order:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], order[other])
        if low[node] == order[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in order:
            connect(node)
    return sorted(found)


def test_the_graph_counts_imports_in_functions_and_not_those_only_for_type_checking(tmp_path):
    kit = tmp_path / "chatkernel" / "kit"
    (kit / "inner").mkdir(parents=True)
    (kit / "__init__.py").write_text("")
    (kit / "a.py").write_text("from chatkernel.kit.b import B\n")
    (kit / "b.py").write_text("def f():\n    from chatkernel.kit import a\n")
    (kit / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from chatkernel.kit.a import A\nelse:\n    import json\n")
    (kit / "inner" / "__init__.py").write_text("from . import d\n")
    (kit / "inner" / "d.py").write_text("from ..c import C\nfrom .. import inner\n")
    graph = import_graph(kit, root=tmp_path)
    assert graph == {"chatkernel.kit": set(), "chatkernel.kit.a": {"chatkernel.kit.b"},
                     "chatkernel.kit.b": {"chatkernel.kit", "chatkernel.kit.a"},
                     "chatkernel.kit.c": set(),
                     "chatkernel.kit.inner": {"chatkernel.kit.inner.d"},
                     "chatkernel.kit.inner.d": {"chatkernel.kit", "chatkernel.kit.c",
                                                "chatkernel.kit.inner"}}
    assert cycles(graph) == [["chatkernel.kit.a", "chatkernel.kit.b"],
                             ["chatkernel.kit.inner", "chatkernel.kit.inner.d"]]


def test_the_kits_modules_import_one_another_without_a_cycle():
    graph = import_graph(KIT)
    assert "chatkernel.sdk.receiving.transport" in graph["chatkernel.sdk.receiving.webhooks"]
    assert cycles(graph) == []


def test_at_most_fifteen_modules_sit_side_by_side_in_any_folder_of_the_kit():
    folders = [KIT, *(path for path in KIT.rglob("*") if path.is_dir()
                      and path.name != "__pycache__")]
    crowded = {str(folder.relative_to(ROOT)): count for folder in folders
               if (count := sum(1 for path in folder.iterdir() if path.suffix == ".py"
                                or (path / "__init__.py").exists())) > 15}
    assert crowded == {}
