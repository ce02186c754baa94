"""The kit's sample channel is the plugin template's: scripts/bake-sample bakes the
template as a polling channel named "sample" into chatkernel/testing/sample/, and the
loopback channel and platform the kernel's tests run are subclasses of it. Here: the
kit's copy is the template baked, byte for byte, and the check says which file drifted."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chatkernel.channels import LiveReplies
from chatkernel.testing.loopback import LoopbackChannel, LoopbackPlatform
from chatkernel.testing.sample.channel import SampleChannel
from chatkernel.testing.sample.fake import SamplePlatform

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bake-sample"


def bake_sample(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(root / "scripts" / "bake-sample"), *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_kits_sample_is_the_template_baked_byte_for_byte():
    result = bake_sample(ROOT, "--check")
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_a_template_change_not_baked_is_named_and_baking_makes_them_one(tmp_path):
    """On a copy of the tree: the template changes, the check fails naming the file;
    the script writes it and the check passes."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "cookiecutter-plugin", tree / "cookiecutter-plugin")
    shutil.copytree(ROOT / "scripts", tree / "scripts")
    shutil.copytree(ROOT / "chatkernel" / "testing" / "sample",
                    tree / "chatkernel" / "testing" / "sample")
    fake = next((tree / "cookiecutter-plugin").glob("*/*/fake.py"))
    fake.write_text(fake.read_text().replace('bot_id = "bot-1"', 'bot_id = "bot-2"'))

    stale = bake_sample(tree, "--check")
    assert stale.returncode == 1
    assert stale.stderr.strip() == ("out of date with the template (run scripts/bake-sample): "
                                    "chatkernel/testing/sample/fake.py")
    assert bake_sample(tree).returncode == 0
    assert 'bot_id = "bot-2"' in (tree / "chatkernel/testing/sample/fake.py").read_text()
    assert bake_sample(tree, "--check").returncode == 0


def test_the_loopback_channel_and_platform_are_the_sample():
    assert issubclass(LoopbackChannel, SampleChannel)
    assert issubclass(LoopbackPlatform, SamplePlatform)
    # Only the tuning lives in the subclass, and the live replies the template does not
    # show (the loopback platform's previews): the rest of the wire is the sample's.
    own = {name for name in vars(LoopbackChannel) if not name.startswith("__")}
    live = {name for name in vars(LiveReplies) if not name.startswith("_")}
    assert own - live == {"name", "account_model", "limits", "config_example", "transport"}
