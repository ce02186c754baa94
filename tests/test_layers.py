"""Imports run down the layers, never up: no module of the core (chatkernel/core)
imports a built-in plugin, the web chat, the CLI or the test kit. The core defines the
contract; what sits above it plugs in through a hook, a registration or a parameter.

And the subsystems the kernel assembles are given their collaborators by name: no module
of such a subsystem imports the kernel or holds it (a ``kernel`` parameter or attribute)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "chatkernel" / "core"
#: What sits above the core.
ABOVE = ("chatkernel.builtin", "chatkernel.webchat", "chatkernel.cli", "chatkernel.testing")
IMPORTERS = {"import_module", "__import__"}  # importlib.import_module("..."), __import__
#: The composition root, and the subsystems it builds with named collaborators only.
KERNEL = "chatkernel.core.kernel"
ASSEMBLED = ("outbound",)


def module_name(path: Path, root: Path) -> str:
    """``chatkernel.core.heartbeat.scheduler`` for ``<root>/chatkernel/core/heartbeat/
    scheduler.py`` (a package's ``__init__`` is the package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(source: str, module: str, *, package: bool = False) -> list[str]:
    """Every module ``source`` (the module ``module``) imports, anywhere in the file: at
    the top, in a function body, under ``TYPE_CHECKING``; relative imports resolved,
    ``from chatkernel import x`` as ``chatkernel.x``, and literal names given to
    ``importlib.import_module`` or ``__import__``."""
    base = module.split(".") if package else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            where = base[:len(base) - node.level + 1] if node.level else []
            name = ".".join(where + ([node.module] if node.module else []))
            found += [f"{name}.{alias.name}" for alias in node.names] \
                if name in ("chatkernel", *ABOVE) or node.module is None else [name]
        elif isinstance(node, ast.Call) and node.args and \
                isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in IMPORTERS:
                found.append(node.args[0].value)
    return found


def upward(found: list[str]) -> list[str]:
    return [name for name in found
            if any(name == above or name.startswith(above + ".") for above in ABOVE)]


def offences(root: Path) -> dict[str, list[str]]:
    """``{module: the modules above the core it imports}`` for every module under
    ``<root>/chatkernel/core``."""
    found = {}
    for path in sorted((root / "chatkernel" / "core").rglob("*.py")):
        name = module_name(path, root)
        wrong = upward(imported(path.read_text(encoding="utf-8"), name,
                                package=path.stem == "__init__"))
        if wrong:
            found[name] = wrong
    return found


def test_no_core_module_imports_a_layer_above_it():
    assert len(list(CORE.rglob("*.py"))) > 40
    assert offences(ROOT) == {}


# -- the check catches what it is for -----------------------------------------------------------


@pytest.mark.parametrize(("source", "expected"), [
    ("from chatkernel.builtin.heartbeat import DEFAULT_VISIBILITY\n",
     ["chatkernel.builtin.heartbeat"]),
    ("def page():\n    from chatkernel.webchat.landing import render_landing_page\n",
     ["chatkernel.webchat.landing"]),
    ("if TYPE_CHECKING:\n    import chatkernel.testing.clock\n", ["chatkernel.testing.clock"]),
    ("from chatkernel import cli, hookspecs\n", ["chatkernel.cli"]),
    ("from ...builtin import agents\n", ["chatkernel.builtin.agents"]),
    ("from ... import webchat\n", ["chatkernel.webchat"]),
    ("import importlib\nimportlib.import_module('chatkernel.builtin.policy')\n",
     ["chatkernel.builtin.policy"]),
    ("__import__('chatkernel.testing')\n", ["chatkernel.testing"]),
])
def test_the_check_finds_an_upward_import_anywhere(source, expected):
    assert upward(imported(source, "chatkernel.core.heartbeat.scheduler")) == expected


def test_the_check_lets_imports_within_and_below_the_core_pass():
    source = ("from chatkernel.core.config import KernelConfig\n"
              "from chatkernel.sdk.models import Route\nfrom chatkernel import hookspecs\n"
              "from . import ack\nfrom ..turns.agents import Agent\nimport chatkernel_cli\n"
              "import importlib\nimportlib.import_module(name)\n")
    found = imported(source, "chatkernel.core.heartbeat.scheduler")
    assert "chatkernel.core.heartbeat.ack" in found and "chatkernel.core.turns.agents" in found
    assert upward(found) == []


def test_the_check_walks_every_module_of_a_tree(tmp_path):
    core = tmp_path / "chatkernel" / "core" / "heartbeat"
    core.mkdir(parents=True)
    (core / "__init__.py").write_text("from .. import plugins\n")
    (core / "scheduler.py").write_text(
        "def visibility():\n    from chatkernel.builtin.heartbeat import DEFAULT_VISIBILITY\n")
    (tmp_path / "chatkernel" / "core" / "__init__.py").write_text("")
    (tmp_path / "chatkernel" / "core" / "endpoints.py").write_text(
        "from ..webchat import landing\n")
    assert offences(tmp_path) == {
        "chatkernel.core.endpoints": ["chatkernel.webchat.landing"],
        "chatkernel.core.heartbeat.scheduler": ["chatkernel.builtin.heartbeat"],
    }


# -- the kernel gives each component its collaborators by name ------------------------------


def kernel_references(source: str, module: str) -> list[str]:
    """What in ``source`` (the module ``module``) reaches for the whole kernel: an import
    of :mod:`chatkernel.core.kernel`, a parameter named ``kernel``, an attribute named
    ``kernel`` or ``_kernel`` (read or written)."""
    found = [f"imports {name}" for name in imported(source, module)
             if name == KERNEL or name.startswith(KERNEL + ".")]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                        *filter(None, (args.vararg, args.kwarg))]:
                if arg.arg.lstrip("_") == "kernel":
                    found.append(f"line {arg.lineno}: parameter {arg.arg}")
        elif isinstance(node, ast.Attribute) and node.attr.lstrip("_") == "kernel":
            found.append(f"line {node.lineno}: attribute {node.attr}")
    return found


def kernel_holders(root: Path, subsystem: str) -> dict[str, list[str]]:
    """``{module: what reaches for the kernel}`` under ``<root>/chatkernel/core/<subsystem>``."""
    found = {}
    for path in sorted((root / "chatkernel" / "core" / subsystem).rglob("*.py")):
        name = module_name(path, root)
        wrong = kernel_references(path.read_text(encoding="utf-8"), name)
        if wrong:
            found[name] = wrong
    return found


@pytest.mark.parametrize("subsystem", ASSEMBLED)
def test_no_module_of_an_assembled_subsystem_holds_the_kernel(subsystem):
    assert len(list((CORE / subsystem).rglob("*.py"))) > 3
    assert kernel_holders(ROOT, subsystem) == {}


@pytest.mark.parametrize(("source", "expected"), [
    ("from chatkernel.core.kernel import Kernel\n", ["imports chatkernel.core.kernel"]),
    ("if TYPE_CHECKING:\n    from ..kernel import Kernel\n", ["imports chatkernel.core.kernel"]),
    ("import chatkernel.core.kernel\n", ["imports chatkernel.core.kernel"]),
    ("class Outbox:\n    def __init__(self, kernel):\n        pass\n",
     ["line 2: parameter kernel"]),
    ("async def send(*, _kernel=None):\n    pass\n", ["line 1: parameter _kernel"]),
    ("def later(outbox):\n    return outbox._kernel.store\n", ["line 2: attribute _kernel"]),
    ("def fill(self, k):\n    self.kernel = k\n", ["line 2: attribute kernel"]),
])
def test_the_check_finds_a_kernel_held_anyhow(source, expected):
    assert kernel_references(source, "chatkernel.core.outbound.outbox") == expected


def test_the_check_lets_named_collaborators_pass(tmp_path):
    source = ("from chatkernel.core.store.base import Store\n"
              "class Deliveries:\n    def __init__(self, *, store, metrics):\n"
              "        self._store = store\n        self._metrics = metrics\n"
              "KERNEL_NAME = 'kernel'\n")
    assert kernel_references(source, "chatkernel.core.outbound.deliveries") == []
    outbound = tmp_path / "chatkernel" / "core" / "outbound"
    outbound.mkdir(parents=True)
    (outbound / "ok.py").write_text(source)
    (outbound / "bad.py").write_text("def send(kernel):\n    return kernel\n")
    assert kernel_holders(tmp_path, "outbound") == {
        "chatkernel.core.outbound.bad": ["line 1: parameter kernel"]}
