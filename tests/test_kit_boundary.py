"""The channel kit (chatkernel.sdk, imported through chatkernel.channels) stands on its own:
it imports nothing of the kernel, the gateway or a store, so a plugin built on it depends on
the contract alone and the kernel can change behind it."""

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
    names = sorted(f"chatkernel.sdk.{p.stem}" for p in KIT.glob("*.py") if p.stem != "__init__")
    script = ("import importlib, sys\nimport chatkernel.channels\n"
              f"for name in {names!r}:\n    importlib.import_module(name)\n"
              "print(sorted(m for m in sys.modules if m.startswith('chatkernel.')\n"
              "             and not m.startswith(('chatkernel.sdk', 'chatkernel.channels',\n"
              "                                   'chatkernel.hookspecs'))))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
