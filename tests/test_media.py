"""Inbound media saved under the workspace, with a size cap, noted for the agent."""

from __future__ import annotations

import re
import stat

import pytest

from chatkernel.sdk.media import save_inbound_media
from chatkernel.testing.agents import agent_plugin, scripted_agent
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio


async def test_saved_under_workspace_by_channel_account_and_day(tmp_path):
    ref = await save_inbound_media(tmp_path, "telegram", "main", b"jpeg bytes", kind="image",
                                   filename="../../etc/cat photo.jpg", mime="image/jpeg")
    assert ref.path is not None and ref.size == 10
    relative = ref.path.relative_to(tmp_path)
    assert re.fullmatch(r"media/inbound/telegram/main/\d{4}-\d{2}-\d{2}/\d{6}-[0-9a-f]{8}-"
                        r"cat_photo\.jpg", relative.as_posix())
    assert ref.path.read_bytes() == b"jpeg bytes"
    assert stat.S_IMODE(ref.path.stat().st_mode) == 0o600


async def test_streamed_chunks_and_names_never_collide(tmp_path):
    async def body():
        for part in (b"a" * 10, b"b" * 10):
            yield part

    first = await save_inbound_media(tmp_path, "c", "a", body(), kind="document", filename="x")
    second = await save_inbound_media(tmp_path, "c", "a", [b"z"], kind="document", filename="x")
    assert first.path != second.path
    assert first.path.read_bytes() == b"a" * 10 + b"b" * 10


async def test_over_the_cap_is_not_kept_and_says_why(tmp_path):
    ref = await save_inbound_media(tmp_path, "c", "a", [b"x" * 600, b"x" * 600], kind="video",
                                   filename="big.mp4", max_bytes=1000)
    assert ref.path is None and "over the" in ref.note
    assert list((tmp_path / "media").rglob("*.mp4")) == []  # the partial file is gone
    declared = await save_inbound_media(tmp_path, "c", "a", [b"never read"], kind="video",
                                        max_bytes=1000, declared_size=5000)
    assert declared.path is None and declared.size == 5000


async def test_channel_saves_media_and_the_agent_reads_the_note(tmp_path):
    agent = scripted_agent()
    config = {"agent": {"kind": agent.name},
              "channels": {"memory": {"accounts": {"main": {"allow_from": ["*"],
                                                            "max_inbound_media_mb": 0.001}}}}}
    async with KernelHarness(tmp_path, config=config,
                             plugins=[("agent", agent_plugin(agent))]) as h:
        small = await h.channel.context.save_media(b"tiny", kind="image", filename="a.png")
        large = await h.channel.context.save_media(b"x" * 5000, kind="document", filename="b.pdf")
        await h.channel.receive("two files", media=[small, large])
        await h.settle()
        text = agent.requests[0].text
        assert f"[image saved: {small.path}]" in text
        assert "[document b.pdf received, not saved: " in text
        assert small.path.is_relative_to(tmp_path / "workspace" / "media" / "inbound" / "memory")


async def test_the_test_kit_fixture_runs_a_kernel(chatkernel_kernel):
    await chatkernel_kernel.channel.receive("through the fixture")
    sent = await chatkernel_kernel.channel.wait_for_sent(1)
    assert sent[0].text == "through the fixture"
