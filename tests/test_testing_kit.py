"""``chatkernel.testing``: every name a plugin's tests need, cheap to import."""

from __future__ import annotations

import subprocess
import sys

import chatkernel.testing as kit


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
