"""Imports run down the layers, never up: no module of the core (chatkernel/core)
imports a built-in plugin, the web chat, the CLI or the test kit. The core defines the
contract; what sits above it plugs in through a hook, a registration or a parameter.

And the subsystems the kernel assembles are given their collaborators by name: no module
of such a subsystem imports the kernel or holds it (a ``kernel`` parameter or attribute),
short of the explicit allowances below.

And the core knows no channel by name: the web chat's cases (its implied account) come
from its plugin through a hook, the channels this project publishes from
``chatkernel.catalog``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "chatkernel" / "core"
#: What sits above the core.
ABOVE = ("chatkernel.builtin", "chatkernel.webchat", "chatkernel.cli", "chatkernel.testing")
IMPORTERS = {"import_module", "__import__"}  # importlib.import_module("..."), __import__
#: The composition root, and the subsystems it builds with named collaborators only
#: (with how many modules each has at least, so a moved tree is not checked as empty).
KERNEL_MODULE = "chatkernel.core.kernel"
KERNEL_NAMES = {"kernel", "_kernel"}  # and any name ending in "_kernel"
ASSEMBLED = {"gateway": 9, "health": 6, "heartbeat": 9, "inbound": 5, "outbound": 10,
             "runtime": 6}
#: The reaches allowed, by module (each one still needed: a test fails on one left over).
#: The gateway process is the
#: composition root of a gateway: it makes the kernel and hands it its GatewayParts,
#: then serves the app and the receive loops built from the kernel's components. A
#: reload is the kernel's own operation (``Kernel.reload`` runs ``apply_config``, which
#: names the kernel's type for its annotations alone): it swaps the config and the
#: accounts of the kernel as a whole; the gateway's ConfigReloader is given
#: ``Kernel.reload``, not the kernel.
ALLOWED_REACHES = {
    "chatkernel.core.gateway.process": {"imports chatkernel.core.kernel", "parameter kernel"},
    "chatkernel.core.runtime.reload": {"imports chatkernel.core.kernel", "parameter kernel"},
}


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


@pytest.mark.slow
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


# -- the core names no channel --------------------------------------------------------------

#: Channel names the core must not hold: not in code, a string, a comment or a docstring.
CHANNEL_NAMES = ("webchat",)


def channel_mentions(root: Path) -> dict[str, list[str]]:
    """``{module: ["<line>: <text>", ...]}`` for every line of ``<root>/chatkernel/core``
    that holds one of :data:`CHANNEL_NAMES` (in any case: ``WEBCHAT`` too)."""
    found: dict[str, list[str]] = {}
    for path in sorted((root / "chatkernel" / "core").rglob("*.py")):
        lines = [f"{number}: {line.strip()}"
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if any(name in line.lower() for name in CHANNEL_NAMES)]
        if lines:
            found[module_name(path, root)] = lines
    return found


def test_the_core_holds_no_channel_name():
    assert len(list(CORE.rglob("*.py"))) > 40
    assert channel_mentions(ROOT) == {}


def test_the_channel_name_check_finds_a_name_anywhere_in_a_line(tmp_path):
    config = tmp_path / "chatkernel" / "core" / "config"
    config.mkdir(parents=True)
    (config / "__init__.py").write_text('"""Config."""\nfrom .schema import KernelConfig\n')
    (config / "schema.py").write_text('WEBCHAT = "web"\nNAME = "webchat"\n'
                                      "x = 1  # the webchat's account\n"
                                      '"""the web chat, in words, is no name"""\n')
    assert channel_mentions(tmp_path) == {"chatkernel.core.config.schema": [
        '1: WEBCHAT = "web"', '2: NAME = "webchat"', "3: x = 1  # the webchat's account"]}


# -- the assembled subsystems are given their collaborators, not the kernel -------------------


def is_kernel_name(name: str) -> bool:
    return name in KERNEL_NAMES or name.endswith("_kernel")


def kernel_reach(source: str, module: str, *, package: bool = False) -> list[str]:
    """How ``source`` (the module ``module``) reaches for the whole kernel: an import of
    :mod:`chatkernel.core.kernel` anywhere (``from chatkernel.core import kernel``
    included), a parameter, an attribute or a field named ``kernel`` or ``..._kernel``."""
    found = [f"imports {name}" for name in imported(source, module, package=package)
             if name == KERNEL_MODULE or name.startswith(KERNEL_MODULE + ".")]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "chatkernel.core" and \
                any(alias.name == "kernel" for alias in node.names):
            found.append(f"imports {KERNEL_MODULE}")
        elif isinstance(node, ast.arg) and is_kernel_name(node.arg):
            found.append(f"line {node.lineno}: parameter {node.arg}")
        elif isinstance(node, ast.Attribute) and is_kernel_name(node.attr):
            found.append(f"line {node.lineno}: attribute .{node.attr}")
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and \
                is_kernel_name(node.target.id):
            found.append(f"line {node.lineno}: field {node.target.id}")
    return found


def all_kernel_reaches(root: Path, subsystem: str) -> dict[str, list[str]]:
    """``{module: how it reaches for the kernel}`` for every module under
    ``<root>/chatkernel/core/<subsystem>`` that does."""
    found = {}
    for path in sorted((root / "chatkernel" / "core" / subsystem).rglob("*.py")):
        name = module_name(path, root)
        reaches = kernel_reach(path.read_text(encoding="utf-8"), name,
                               package=path.stem == "__init__")
        if reaches:
            found[name] = reaches
    return found


def kernel_reaches(root: Path, subsystem: str) -> dict[str, list[str]]:
    """:func:`all_kernel_reaches` less :data:`ALLOWED_REACHES`."""
    found = {}
    for name, reaches in all_kernel_reaches(root, subsystem).items():
        allowed = ALLOWED_REACHES.get(name, set())
        wrong = [reach for reach in reaches if reach.split(": ", 1)[-1] not in allowed]
        if wrong:
            found[name] = wrong
    return found


@pytest.mark.slow
@pytest.mark.parametrize(("subsystem", "modules"), sorted(ASSEMBLED.items()))
def test_no_module_of_an_assembled_subsystem_holds_or_imports_the_kernel(subsystem, modules):
    assert len(list((CORE / subsystem).rglob("*.py"))) >= modules
    assert kernel_reaches(ROOT, subsystem) == {}


@pytest.mark.parametrize("module", sorted(ALLOWED_REACHES))
def test_every_allowance_is_still_needed(module):
    subsystem = module.split(".")[2]
    assert subsystem in ASSEMBLED  # an allowance outside the checked tree would go unseen
    used = {reach.split(": ", 1)[-1]
            for reach in all_kernel_reaches(ROOT, subsystem).get(module, [])}
    assert ALLOWED_REACHES[module] <= used, "an allowance outlived its reach: remove it"


def test_health_cluster_and_control_are_checked_and_allowed_nothing():
    for module in ("chatkernel.core.health.probes", "chatkernel.core.health.monitor",
                   "chatkernel.core.runtime.cluster", "chatkernel.core.runtime.control",
                   "chatkernel.core.gateway.control", "chatkernel.core.gateway.endpoints",
                   "chatkernel.core.runtime.supervisor"):
        path = ROOT / Path(*module.split(".")).with_suffix(".py")
        assert path.is_file(), module
        assert module not in ALLOWED_REACHES


@pytest.mark.parametrize(("source", "expected"), [
    ("if TYPE_CHECKING:\n    from chatkernel.core.kernel import Kernel\n",
     ["imports chatkernel.core.kernel"]),
    ("from chatkernel.core import kernel\n", ["imports chatkernel.core.kernel"]),
    ("from ..kernel import Kernel\n", ["imports chatkernel.core.kernel"]),
    ("def f():\n    import chatkernel.core.kernel\n", ["imports chatkernel.core.kernel"]),
    ("class Runner:\n    def __init__(self, kernel):\n        self.kernel = kernel\n",
     ["line 2: parameter kernel", "line 3: attribute .kernel"]),
    ("async def resolve(*, kernel, state):\n    pass\n", ["line 1: parameter kernel"]),
    ("async def send(*, _kernel=None):\n    pass\n", ["line 1: parameter _kernel"]),
    ("def busy(scheduler):\n    return scheduler._kernel.queue\n",
     ["line 2: attribute ._kernel"]),
    ("def later(delivery):\n    return delivery.outbox._kernel.outbound.send_payload\n",
     ["line 2: attribute ._kernel"]),
    ("@dataclass\nclass Parts:\n    kernel: object\n", ["line 3: field kernel"]),
    ("def build(*, legacy_kernel):\n    return legacy_kernel()\n",
     ["line 1: parameter legacy_kernel"]),
    ("def old(gateway):\n    return gateway._legacy_kernel()\n",
     ["line 2: attribute ._legacy_kernel"]),
])
def test_the_kernel_check_finds_a_kernel_reached_for(source, expected):
    assert kernel_reach(source, "chatkernel.core.heartbeat.runner") == expected


def test_the_kernel_check_lets_named_collaborators_pass(tmp_path):
    source = ("from chatkernel.core.store.base import Store\n"
              "class Jobs:\n    def __init__(self, store: Store) -> None:\n"
              "        self._store = store  # of one kernel\n"
              "KERNEL_NAME = 'kernel'\n")
    assert kernel_reach(source, "chatkernel.core.heartbeat.jobs") == []
    for subsystem in ("heartbeat", "outbound"):
        tree = tmp_path / "chatkernel" / "core" / subsystem
        tree.mkdir(parents=True)
        (tree / "jobs.py").write_text(source)
        (tree / "targets.py").write_text("def last_chat(kernel):\n    return kernel.inbound\n")
        assert kernel_reaches(tmp_path, subsystem) == {
            f"chatkernel.core.{subsystem}.targets": ["line 1: parameter kernel"]}


def test_the_kernel_check_allows_the_gateway_process_alone_in_the_gateway(tmp_path):
    tree = tmp_path / "chatkernel" / "core" / "gateway"
    tree.mkdir(parents=True)
    assembly = ("from chatkernel.core.kernel import Kernel\n"
                "def build_app(kernel: Kernel):\n    return kernel.control\n")
    (tree / "process.py").write_text(assembly)
    (tree / "cluster.py").write_text(
        "class Cluster:\n    def __init__(self, kernel):\n        self.kernel = kernel\n")
    (tree / "control.py").write_text(assembly)
    assert kernel_reaches(tmp_path, "gateway") == {
        "chatkernel.core.gateway.cluster": ["line 2: parameter kernel",
                                            "line 3: attribute .kernel"],
        "chatkernel.core.gateway.control": ["imports chatkernel.core.kernel",
                                            "line 2: parameter kernel"]}


def test_the_kernel_check_allows_commands_no_kernel(tmp_path):
    tree = tmp_path / "chatkernel" / "core" / "inbound"
    tree.mkdir(parents=True)
    legacy = ("class Gateway:\n    def __init__(self, *, legacy_kernel):\n"
              "        self._legacy_kernel = legacy_kernel\n")
    (tree / "commands.py").write_text(legacy)
    assert kernel_reaches(tmp_path, "inbound") == {
        "chatkernel.core.inbound.commands": ["line 2: parameter legacy_kernel",
                                             "line 3: attribute ._legacy_kernel"]}
