"""What is specific to the discord platform: its account config,
its error answers, its probe. Examples to grow: test every error code your platform
documents, and every failure the platform is known for."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from chatkernel.channels import Account, OutboundPayload, Route, SendError
from chatkernel.testing import open_contract_run
from chatkernel_discord.channel import DiscordAccount, DiscordChannel
from chatkernel_discord.contract import DiscordAdapter
from chatkernel_discord.fake import DiscordPlatform

pytestmark = pytest.mark.anyio


def make_channel(platform: DiscordPlatform, **config) -> DiscordChannel:
    settings = {"token": platform.token, "base_url": platform.base_url,
                **config}
    account = Account(channel_name="discord", name="main",
                      config=DiscordAccount(**settings))
    return DiscordChannel(account)


def route(chat_id: str = "dm-1") -> Route:
    return Route(channel="discord", account="main", chat_id=chat_id)


def test_an_account_needs_a_token():
    with pytest.raises(ValidationError, match="token"):
        DiscordAccount(token="")


async def test_a_text_reaches_the_chat_with_the_platforms_message_id():
    async with DiscordPlatform() as platform:
        channel = make_channel(platform)
        try:
            result = await channel.send(route(), OutboundPayload(text="hello"))
        finally:
            await channel.aclose()
    assert platform.texts("dm-1") == ["hello"]
    assert result.message_id == "1"


async def test_a_send_repeated_with_its_key_makes_one_message():
    """The kernel's retries and a resend after a crash carry the payload's key."""
    async with DiscordPlatform() as platform:
        channel = make_channel(platform)
        try:
            first = await channel.send(route(), OutboundPayload(text="hello", key="k-1"))
            again = await channel.send(route(), OutboundPayload(text="hello", key="k-1"))
        finally:
            await channel.aclose()
    assert platform.texts("dm-1") == ["hello"] and platform.deduped == 1
    assert again.message_id == first.message_id


async def test_a_429_is_retryable_after_the_platforms_delay():
    async with DiscordPlatform() as platform:
        platform.fail_next(429, retry_after=7)
        channel = make_channel(platform)
        try:
            with pytest.raises(SendError) as caught:
                await channel.send(route(), OutboundPayload(text="hello"))
        finally:
            await channel.aclose()
    assert caught.value.retryable and caught.value.retry_after == 7
    assert platform.texts() == []


async def test_a_file_is_sent_with_its_kind_and_name(tmp_path: Path):
    photo = tmp_path / "cat.png"
    photo.write_bytes(b"\x89PNG not really")
    async with DiscordPlatform() as platform:
        channel = make_channel(platform)
        try:
            await channel.send(route(), OutboundPayload(media_path=photo, media_kind="image",
                                                        caption="a cat"))
        finally:
            await channel.aclose()
    assert platform.media("dm-1") == [("image", "cat.png")]


async def test_a_revoked_token_fails_the_probe_without_showing_the_token():
    async with DiscordPlatform(token="s3cret-token") as platform:
        channel = make_channel(platform)
        try:
            assert (await channel.probe()).ok
            platform.revoke()
            probe = await channel.probe()
        finally:
            await channel.aclose()
    assert not probe.ok and not probe.restartable
    assert "401" in probe.detail and "s3cret-token" not in probe.detail


async def test_events_that_are_not_messages_are_not_normalized():
    async with DiscordPlatform() as platform:
        channel = make_channel(platform)
        edit = platform.inject("dm-1", "edited", kind="edit")
        message = platform.inject("dm-1", "hi")
        assert await channel.normalize(edit) is None
        normalized = await channel.normalize(message)
        await channel.aclose()
    assert (normalized.chat_id, normalized.text, normalized.message_id) == ("dm-1", "hi", "m2")


async def test_a_chat_that_refuses_the_bot_gets_a_note_in_its_session(tmp_path: Path):
    """Through a whole kernel: a proactive send (as ``chatkernel send`` makes it) to a chat
    the platform refuses fails for good, and the session's log says why. The kernel is
    driven and read through the test kit's verbs (``run.harness``), never its insides."""
    async with DiscordAdapter() as adapter, open_contract_run(adapter, tmp_path) as run:
        await run.harness.send_text("discord", "dm-1", "hello")
        await adapter.refuse_chat("dm-2")
        await run.harness.send_text("discord", "dm-2", "anyone there?")
        await run.settle()
        assert adapter.sent_texts("dm-1") == ["hello"] and adapter.sent_texts("dm-2") == []
        notes = await run.harness.session_log("discord:main:dm-2",
                                              roles=("notification",))
        assert len(notes) == 1, notes
