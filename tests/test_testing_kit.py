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
    fixtures = {"chatkernel_home", "chatkernel_kernel", "redis_server", "redis_prefix"}
    # Words of the section's prose that are not names of the kit.
    prose = {"__all__", "chatkernel"}
    assert documented_names(DOCS.read_text()) - fixtures - prose == set(kit.__all__)


def test_the_kit_keeps_no_old_names() -> None:
    for old in ("SlackSigner", "MetaSigner"):  # moved to their plugins' fakes
        assert not hasattr(kit, old), old
