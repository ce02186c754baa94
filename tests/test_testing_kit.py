"""``chatkernel.testing``: every name a plugin's tests need, cheap to import."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import chatkernel.testing as kit

DOCS = Path(__file__).resolve().parents[1] / "docs" / "testing.md"


def test_every_exported_name_resolves() -> None:
    for name in kit.__all__:
        assert getattr(kit, name) is not None, name
    from chatkernel.testing import BUSY_HINT, AgentEvent, KernelHarness  # noqa: F401


def test_importing_the_kit_loads_nothing_beyond_the_package() -> None:
    code = ("import sys, chatkernel; before = set(sys.modules); import chatkernel.testing; "
            "print(sorted(set(sys.modules) - before))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "['chatkernel.testing']", out.stdout


def documented_names(text: str) -> set[str]:
    """The names in backticks of docs/testing.md's section "The kit's names"."""
    section = text.split("## The kit's names", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", section))


def test_the_kits_names_are_those_its_guide_lists() -> None:
    fixtures = {"chatkernel_home", "chatkernel_kernel", "redis_server", "redis_prefix",
                "small_disk"}
    # Words of the section's prose that are not names of the kit.
    prose = {"__all__", "chatkernel"}
    assert documented_names(DOCS.read_text()) - fixtures - prose == set(kit.__all__)


def test_the_kit_keeps_no_old_names() -> None:
    for old in ("SlackSigner", "MetaSigner"):  # moved to their plugins' fakes
        assert not hasattr(kit, old), old


KIT = Path(kit.__file__).resolve().parent


def test_the_kit_is_grouped_by_concern() -> None:
    """At most 15 modules side by side, and none over 800 lines: a new concern gets a
    package of its own (contract/, fakes/, loopback/, sample/)."""
    assert len(list(KIT.glob("*.py"))) <= 15, sorted(p.name for p in KIT.glob("*.py"))
    long = {str(p.relative_to(KIT)): n for p in KIT.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 800}
    assert long == {}


def test_the_pytest_plugin_keeps_its_entry_point_path() -> None:
    import tomllib

    pyproject = tomllib.loads((KIT.parents[1] / "pyproject.toml").read_text())
    assert pyproject["project"]["entry-points"]["pytest11"] == {
        "chatkernel": "chatkernel.testing.plugin"}
    import chatkernel.testing.plugin as plugin

    assert callable(plugin.pytest_configure)


def test_no_name_of_the_kit_is_hidden_by_a_module_of_it() -> None:
    """``import chatkernel.testing.x`` sets the package's ``x`` to the module: a kit name
    ``x`` would then be the module for whoever imported it after."""
    modules = {path.stem for path in KIT.glob("*.py")} | {
        path.name for path in KIT.iterdir() if (path / "__init__.py").exists()}
    assert modules & set(kit.__all__) == set()
