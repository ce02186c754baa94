"""The guides' commands, pasted side by side, do not fight over a port: each channel's dev
server has a port of its own (the guide's and the plugin's default alike), and the
scale-out guide's instances each listen on their own address."""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHANNELS = ("slack", "telegram", "wechat", "whatsapp")


def shell_block(guide: Path, heading: str) -> str:
    """The first ```sh block after ``heading`` (what tests/test_channel_guides.py runs)."""
    text = guide.read_text()
    return re.search(r"```sh\n(.*?)```", text[text.index(heading):], re.S)[1]


def test_each_channels_dev_server_has_a_port_of_its_own():
    ports = {}
    for channel in CHANNELS:
        block = shell_block(ROOT / "docs" / "channels" / f"{channel}.md",
                            "## Developing offline")
        (port,) = re.findall(rf"chatkernel_{channel}\.devserver --port (\d+)", block)
        default = importlib.import_module(f"chatkernel_{channel}.devserver").server.port
        assert int(port) == default, channel  # the guide's is the one it picks alone
        ports[channel] = default
    assert len(set(ports.values())) == len(ports), ports


def test_the_scale_out_guides_instances_listen_each_on_its_own_address():
    block = shell_block(ROOT / "docs" / "scale-out.md", "## Setting it up")
    listens = []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if "run" not in words:
            continue
        # `--listen` wins over the shared config's gateway.listen (default 127.0.0.1:8787).
        listens.append(words[words.index("--listen") + 1] if "--listen" in words
                       else "127.0.0.1:8787")
    assert len(listens) == 2 and len(set(listens)) == 2, listens
