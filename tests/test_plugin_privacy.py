"""Plugins build on what the kernel documents: no plugin source or plugin test touches a
leading-underscore attribute it does not define itself (a private name of the kernel, the
kit or the test kit), since those change without notice."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def plugin_packages() -> list[Path]:
    """Each plugin's folder: the four channels and the template's project."""
    found = sorted(p for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").exists())
    found += sorted((ROOT / "cookiecutter-plugin").glob("{{*"))
    return found


def python_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if ".venv" not in p.parts)


def parse(path: Path) -> ast.AST | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except SyntaxError:  # the template's Jinja: tests/test_cookiecutter_plugin.py bakes it
        return None


def own_private_names(trees: list[ast.AST]) -> set[str]:
    """Every leading-underscore name a plugin defines: functions, classes, attributes it
    assigns (``self._x = ...``, ``_x: int``), parameters."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name.split(".")[0])
    return {name for name in names if name.startswith("_")}


def foreign_private_uses(trees: dict[str, ast.AST]) -> list[str]:
    """``file:line expression`` for each ``x._name`` whose ``_name`` the plugin does not
    define (dunders aside)."""
    own = own_private_names(list(trees.values()))
    found = []
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__") and node.attr not in own):
                found.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    return sorted(found)


def test_the_check_finds_a_private_attribute_of_the_kernel():
    trees = {"t.py": ast.parse("class A:\n    def __init__(self):\n        self._mine = 1\n"
                               "def f(h, a):\n    a._mine\n    h.kernel.store._run('x')\n"
                               "    h.__class__\n")}
    assert foreign_private_uses(trees) == ["t.py:6 h.kernel.store._run"]


@pytest.mark.slow
def test_no_plugin_touches_a_private_attribute_it_does_not_define():
    packages = plugin_packages()
    assert len(packages) >= 5
    offences = {}
    for package in packages:
        trees = {str(path.relative_to(ROOT)): tree for path in python_files(package)
                 if (tree := parse(path)) is not None}
        if found := foreign_private_uses(trees):
            offences[package.name] = found
    assert offences == {}


# -- health and scale-out through the test kit's surface, not the kernel -------------------

#: The kernel's parts a plugin test reaches through ``h.health``, ``run.health`` and
#: ``h.owns`` instead (docs/testing.md).
KERNEL_PARTS = {"health", "monitor", "cluster", "supervisors", "control", "gateway_parts"}


def kernel_parts_reached(trees: dict[str, ast.AST]) -> list[str]:
    """``file:line expression`` for each ``<anything>.kernel.<part>`` of :data:`KERNEL_PARTS`."""
    found = []
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr in KERNEL_PARTS
                    and isinstance(node.value, ast.Attribute) and node.value.attr == "kernel"):
                found.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    return sorted(found)


def test_the_check_finds_a_kernel_part_reached_for():
    trees = {"t.py": ast.parse("async def t(h, run):\n    await h.kernel.health.probe()\n"
                               "    run.kernel.cluster.owns('x')\n    h.health.snapshot()\n"
                               "    h.kernel.accounts\n")}
    assert kernel_parts_reached(trees) == ["t.py:2 h.kernel.health",
                                           "t.py:3 run.kernel.cluster"]


@pytest.mark.slow
def test_no_plugin_reaches_health_or_the_cluster_through_the_kernel():
    offences = {}
    for package in plugin_packages():
        trees = {str(path.relative_to(ROOT)): tree for path in python_files(package)
                 if (tree := parse(path)) is not None}
        if found := kernel_parts_reached(trees):
            offences[package.name] = found
    assert offences == {}


# -- plugin tests use the test kit's verbs, never the kernel behind them ----------------------

#: ``h.kernel``, ``run.kernel.store``, ``x._kernel``: a reach past the harness.
KERNEL_REACH = re.compile(r"\._?kernel\b")


def plugin_test_files() -> list[Path]:
    """Every test module of every plugin present under plugins/ (a new one is covered
    as it is added) and of the template's project."""
    folders = sorted(p / "tests" for p in (ROOT / "plugins").iterdir() if p.is_dir())
    folders += sorted((ROOT / "cookiecutter-plugin").glob("{{*/tests"))
    return [path for folder in folders if folder.is_dir() for path in python_files(folder)]


def kernel_reaches(name: str, text: str) -> list[str]:
    """``file:line text`` for each line that goes through ``.kernel`` or ``._kernel``.
    Read as lines, not parsed: the template's tests are Jinja until baked."""
    return [f"{name}:{number} {line.strip()}"
            for number, line in enumerate(text.splitlines(), 1) if KERNEL_REACH.search(line)]


def test_the_check_finds_a_reach_through_the_kernel():
    text = ("await h.kernel.outbox.wait_idle()\n"
            "store = run._kernel\n"
            "deliver = h.kernel\n"
            "import chatkernel.testing  # the kernel's kit\n"
            "await h.outbox_idle()\n")
    assert kernel_reaches("t.py", text) == ["t.py:1 await h.kernel.outbox.wait_idle()",
                                            "t.py:2 store = run._kernel",
                                            "t.py:3 deliver = h.kernel"]


def test_no_plugin_test_reaches_through_the_kernel():
    files = plugin_test_files()
    plugins = {path.relative_to(ROOT).parts[1] for path in files
               if path.relative_to(ROOT).parts[0] == "plugins"}
    assert {"slack", "telegram", "wechat", "whatsapp"} <= plugins
    assert any("cookiecutter-plugin" in path.parts for path in files)
    offences = [found for path in files
                for found in kernel_reaches(str(path.relative_to(ROOT)),
                                            path.read_text(encoding="utf-8"))]
    assert offences == [], ("use the test kit's verbs (KernelHarness, ContractRun: "
                            "docs/testing.md), not the kernel behind them")
