"""What is specific to Discord: the account config, messages in servers, threads and DMs,
replies and mentions, files, rate limits, and how the channel reads Discord's errors."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import anyio
import pytest
from pydantic import ValidationError

from chatkernel.channels import OutboundPayload, Route, SendError
from chatkernel.testing import ManualClock, ScaledClock, long_text, wait_until
from chatkernel_discord.channel import DiscordAccount, DiscordChannel, allowed_mentions
from chatkernel_discord.fake import FakeDiscord
from discord_runs import USER, discord_run, make_channel, replies

pytestmark = pytest.mark.anyio


# -- the account's config ------------------------------------------------------------------


def test_an_account_needs_a_token():
    with pytest.raises(ValidationError, match="token"):
        DiscordAccount(token="")


def test_the_default_intents_are_guilds_messages_dms_and_message_content():
    account = DiscordAccount(token="t")
    assert account.intents_value == (1 << 0) | (1 << 9) | (1 << 12) | (1 << 15)
    assert account.api_base == "https://discord.com/api/v10"
    assert DiscordAccount(token="t", intents=["guilds", "DIRECT_MESSAGES"]).intents_value == \
        (1 << 0) | (1 << 12)
    assert DiscordAccount(token="t", intents=513).intents_value == 513


@pytest.mark.parametrize(("intents", "words"), [
    (["GUILD_MESAGES"], "unknown intent 'GUILD_MESAGES'"), (1 << 30, "no gateway intent")])
def test_an_intent_that_does_not_exist_is_refused_by_name(intents, words):
    with pytest.raises(ValidationError, match=words):
        DiscordAccount(token="t", intents=intents)


# -- servers, threads, DMs ------------------------------------------------------------------


async def test_ten_channels_and_three_dms_are_answered_once_each_and_in_order(tmp_path):
    async with discord_run(tmp_path) as run:
        adapter, discord = run.adapter, run.adapter.discord
        channels = [adapter.group_chat(n) for n in range(1, 11)]
        dms = [adapter.direct_chat(n) for n in range(1, 4)]
        await adapter.connected()
        for i in range(3):
            for n, chat in enumerate(channels):
                discord.inject_message(chat, f"m{i} c{n} or01z", author=adapter.user_id(n),
                                       mention=True)
            for n, chat in enumerate(dms):
                discord.inject_message(chat, f"m{i} d{n} or01z", author=adapter.user_id(20 + n),
                                       dm=True)
        every = channels + dms
        await run.wait(lambda: all(len(replies(run, c, "or01z")) >= 3 for c in every),
                       what="three answers in every chat",
                       state=lambda: {c: len(replies(run, c, "or01z")) for c in every})
        await run.settle()
        for chat in every:
            got = replies(run, chat, "or01z")
            assert [t.split()[1] for t in got] == ["m0", "m1", "m2"], (chat, got)
        assert discord.rate_limited_calls == []


async def test_a_server_message_counts_only_with_a_mention_which_is_stripped(tmp_path):
    async with discord_run(tmp_path) as run:
        adapter, discord = run.adapter, run.adapter.discord
        chat = adapter.group_chat(1)
        await adapter.connected()
        discord.inject_message(chat, "not for the bot mn01z", author=USER)
        discord.inject_message(chat, "for the bot mn02z", author=USER, mention=True)
        await run.wait_for_tokens(chat, ["mn02z"])
        await run.settle()
        assert replies(run, chat, "mn01z") == []
        # The agent reads the text without the mention; the reply quotes the message and
        # pings nobody.
        assert any(t.startswith("for the bot mn02z") for t in run.agent_texts()), \
            run.agent_texts()
        sent = discord.sent(chat)[-1]
        assert sent.allowed_mentions == {"parse": [], "replied_user": False}


async def test_a_reply_to_the_bot_counts_as_a_mention(tmp_path):
    async with discord_run(tmp_path) as run:
        adapter, discord = run.adapter, run.adapter.discord
        chat = adapter.group_chat(1)
        await adapter.connected()
        discord.inject_message(chat, "first rp01z", author=USER, mention=True)
        await run.wait_for_tokens(chat, ["rp01z"])
        bot_message = discord.sent(chat)[-1].id
        discord.inject_message(chat, "and then rp02z", author=USER, reply_to=bot_message)
        await run.wait_for_tokens(chat, ["rp02z"])


async def test_other_bots_and_system_messages_are_not_answered(tmp_path):
    async with discord_run(tmp_path) as run:
        adapter, discord = run.adapter, run.adapter.discord
        chat = adapter.direct_chat(1)
        await adapter.connected()
        discord.inject_message(chat, "a bot bt01z", author="399", author_is_bot=True, dm=True,
                               dm_user=USER)
        discord.inject_message(chat, "pinned bt02z", author=USER, dm=True, kind=6)
        discord.inject_message(chat, "a person bt03z", author=USER, dm=True)
        await run.wait_for_tokens(chat, ["bt03z"])
        await run.settle()
        assert [t for t in run.agent_texts() if "bt0" in t] == ["a person bt03z"]


async def test_a_thread_is_a_session_of_its_own_answered_in_the_thread(tmp_path):
    async with discord_run(tmp_path) as run:
        adapter, discord = run.adapter, run.adapter.discord
        chat, thread = adapter.group_chat(1), adapter.thread_id(1)
        await adapter.connected()
        discord.inject_message(chat, "in the channel th01z", author=USER, mention=True)
        discord.inject_message(thread, "in the thread th02z", author=USER, thread_of=chat,
                               mention=True)
        await run.wait_for_tokens(chat, ["th01z"])
        await run.wait(lambda: replies(run, chat, "th02z", thread), what="the thread's reply")
        assert replies(run, chat, "th02z") == []  # not in the channel itself
        keys = await run.harness.session_keys()
        assert any(thread in key for key in keys) and any(
            chat in key and thread not in key for key in keys), keys


async def test_an_attachment_reaches_the_agent_as_media(tmp_path):
    async with discord_run(tmp_path) as run:
        adapter, discord = run.adapter, run.adapter.discord
        chat = adapter.direct_chat(1)
        await adapter.connected()
        discord.inject_message(chat, "look at this at01z", author=USER, dm=True,
                               attachments=[("cat.png", b"\x89PNG not really", "image/png")])
        await run.wait_for_tokens(chat, ["at01z"])
        request = run.turn_for("at01z")
        (media,) = request.media
        assert media.kind == "image" and media.filename == "cat.png" and media.note is None
        assert media.path is not None and media.path.read_bytes() == b"\x89PNG not really"


async def test_without_the_message_content_intent_only_mentions_have_text(tmp_path):
    async with discord_run(tmp_path, account={
            "intents": ["GUILDS", "GUILD_MESSAGES", "DIRECT_MESSAGES"]}) as run:
        adapter, discord = run.adapter, run.adapter.discord
        chat = adapter.group_chat(1)
        await adapter.connected()
        discord.inject_message(chat, "no mention ic01z", author=USER)
        discord.inject_message(chat, "mentioned ic02z", author=USER, mention=True)
        await run.wait_for_tokens(chat, ["ic02z"])
        await run.settle()
        assert len(run.agent.requests) == 1


# -- sending ------------------------------------------------------------------------------------


async def test_a_3000_character_answer_arrives_as_two_messages(tmp_path):
    async with discord_run(tmp_path) as run:
        adapter = run.adapter
        chat = adapter.direct_chat(1)
        answer = long_text(2000, 1.5)[:3000].rstrip()
        assert 2990 <= len(answer) <= 3000
        run.replies["lg01z"] = answer
        await adapter.inject(chat, "say a lot lg01z", sender_id=USER)
        await run.wait(lambda: len(adapter.sent_texts(chat)) >= 2, what="two messages")
        await run.settle()
        sent = adapter.sent_texts(chat)
        assert len(sent) == 2 and all(len(text) <= 2000 for text in sent), \
            [len(t) for t in sent]
        assert " ".join(sent).split() == answer.split()


def test_allowed_mentions_ping_only_whom_the_text_names():
    assert allowed_mentions("hello @everyone and @here") == {"parse": [],
                                                             "replied_user": False}
    assert allowed_mentions("<@123> and <@!123> and <@&77>") == {
        "parse": [], "replied_user": False, "users": ["123"], "roles": ["77"]}


async def test_a_group_reply_quotes_the_message_it_answers(tmp_path):
    async with discord_run(tmp_path) as run:
        adapter, discord = run.adapter, run.adapter.discord
        chat = adapter.group_chat(1)
        await adapter.connected()
        asked = discord.inject_message(chat, "quote me qt01z", author=USER, mention=True)
        await run.wait_for_tokens(chat, ["qt01z"])
        assert discord.sent(chat)[-1].reference == asked["id"]


async def test_a_send_to_a_user_opens_the_dm_channel_first(tmp_path):
    async with FakeDiscord() as discord:
        channel = make_channel(discord)
        try:
            route = Route(channel="discord", account="main", chat_id=f"user:{USER}")
            await channel.send(route, OutboundPayload(text="hi dm01z"))
            await channel.send(route, OutboundPayload(text="again dm02z"))
        finally:
            await channel.aclose()
        (dm,) = [c for c in discord.channels.values() if c["type"] == 1]
        assert discord.texts(dm["id"]) == ["hi dm01z", "again dm02z"]
        assert len(discord.calls_to("createDM")) == 1


async def test_a_send_repeated_with_its_key_makes_one_message():
    """The kernel's retries and a resend after a crash carry the payload's key: Discord's
    nonce with enforce_nonce."""
    async with FakeDiscord() as discord:
        channel = make_channel(discord)
        discord.text_channel("500000000000000001")
        route = Route(channel="discord", account="main", chat_id="500000000000000001")
        try:
            first = await channel.send(route, OutboundPayload(text="hello", key="a" * 24))
            again = await channel.send(route, OutboundPayload(text="hello", key="a" * 24))
        finally:
            await channel.aclose()
        assert discord.texts("500000000000000001") == ["hello"]
        assert again.message_id == first.message_id


async def test_a_file_over_discords_limit_is_refused_with_the_reason(tmp_path):
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * 2048)
    async with FakeDiscord() as discord:
        discord.upload_limit = 1024
        channel = make_channel(discord)
        discord.text_channel("500000000000000001")
        route = Route(channel="discord", account="main", chat_id="500000000000000001")
        try:
            with pytest.raises(SendError) as caught:
                await channel.send(route, OutboundPayload(media_path=big, media_kind="file"))
        finally:
            await channel.aclose()
    assert not caught.value.retryable and "Request entity too large" in str(caught.value)
    assert DiscordChannel.limits.media_refusal(11 * 1024 * 1024) == \
        "larger than the platform's 10 MB limit for files"


async def test_a_file_goes_as_multipart_with_its_caption(tmp_path):
    photo = tmp_path / "cat.png"
    photo.write_bytes(b"\x89PNG not really")
    async with FakeDiscord() as discord:
        channel = make_channel(discord)
        discord.text_channel("500000000000000001")
        route = Route(channel="discord", account="main", chat_id="500000000000000001")
        try:
            await channel.send(route, OutboundPayload(media_path=photo, media_kind="file",
                                                      caption="a cat"))
        finally:
            await channel.aclose()
        (sent,) = discord.sent("500000000000000001")
        assert sent.content == "a cat"
        assert [(a["filename"], a["size"]) for a in sent.attachments] == [("cat.png", 15)]


# -- rate limits -------------------------------------------------------------------------------


async def test_a_forced_429_is_waited_out_with_no_early_request():
    """The 429's retry_after blocks its bucket: the channel's next request to it waits
    that long (the kernel's retry honours it too, below), on the account's clock."""
    clock = ManualClock()
    async with FakeDiscord() as discord:
        discord.rates.clock = clock.monotonic
        channel = make_channel(discord)
        channel.api.buckets.clock = clock
        discord.text_channel("500000000000000001")
        route = Route(channel="discord", account="main", chat_id="500000000000000001")
        discord.fail_next("createMessage", 429, retry_after=3.0)
        try:
            with pytest.raises(SendError) as caught:
                await channel.send(route, OutboundPayload(text="first"))
            assert caught.value.retryable and caught.value.retry_after == 3.0
            async with anyio.create_task_group() as tg:
                tg.start_soon(channel.send, route, OutboundPayload(text="again"))
                assert await clock.sleeper() == pytest.approx(clock.now() + 3.0)
                clock.advance(2.9)
                assert await clock.sleeper() == pytest.approx(clock.now() + 0.1)
                assert len(discord.calls_to("createMessage")) == 1  # nothing early
                clock.advance(0.1)
        finally:
            await channel.aclose()
        assert discord.texts("500000000000000001") == ["again"]
        assert len(discord.rate_limited_calls) == 1


async def test_a_429_on_a_reply_is_retried_once_after_it(tmp_path):
    async with discord_run(tmp_path) as run:
        adapter, discord = run.adapter, run.adapter.discord
        chat = adapter.direct_chat(1)
        discord.fail_next("createMessage", 429, retry_after=0.2)
        await adapter.inject(chat, "hold on rl01z", sender_id=USER)
        await run.wait_for_tokens(chat, ["rl01z"])
        await run.settle()
        assert len(discord.rate_limited_calls) == 1
        assert len(replies(run, chat, "rl01z")) == 1


async def test_a_bucket_announced_empty_holds_the_next_request_until_it_resets():
    clock = ManualClock()
    async with FakeDiscord() as discord:
        discord.rates.clock = clock.monotonic
        channel = make_channel(discord)
        channel.api.buckets.clock = clock
        discord.text_channel("500000000000000001")
        route = Route(channel="discord", account="main", chat_id="500000000000000001")
        try:
            for n in range(5):
                await channel.send(route, OutboundPayload(text=f"m{n}"))
            async with anyio.create_task_group() as tg:
                tg.start_soon(channel.send, route, OutboundPayload(text="sixth"))
                deadline = await clock.sleeper()
                assert deadline == pytest.approx(clock.now() + 5.0)
                assert len(discord.calls_to("createMessage")) == 5
                clock.advance(5.0)
        finally:
            await channel.aclose()
        assert discord.texts("500000000000000001")[-1] == "sixth"
        assert discord.rate_limited_calls == []


async def test_a_revoked_token_stops_every_call_after_the_first_401():
    async with FakeDiscord() as discord:
        channel = make_channel(discord)
        discord.text_channel("500000000000000001")
        route = Route(channel="discord", account="main", chat_id="500000000000000001")
        discord.revoke()
        try:
            for _ in range(20):
                with pytest.raises(SendError):
                    await channel.send(route, OutboundPayload(text="hello"))
            probe = await channel.probe()
        finally:
            await channel.aclose()
        assert len([c for c in discord.calls if c.status == 401]) == 1
        assert not probe.ok and "token" in probe.detail and "Reset Token" in probe.detail


# -- health ----------------------------------------------------------------------------------------


async def test_the_probe_names_the_bot_and_the_gateways_heartbeat(tmp_path):
    clock = ManualClock()
    async with discord_run(tmp_path, clock=clock) as run:
        discord = run.adapter.discord
        await run.adapter.connected()
        clock.advance(41.25)  # the first beat is due by now, jitter whatever it was
        await run.wait(lambda: run.channel.gateway.latency is not None, what="an ACK")
        result = await run.probe()
        assert result.ok, result
        assert f"@chatkernel-bot ({discord.bot.id})" in result.detail
        assert "gateway ready, heartbeat" in result.detail and " ms" in result.detail


async def test_a_bad_token_turns_that_account_red_and_leaves_the_others_working(tmp_path,
                                                                               caplog):
    caplog.set_level(logging.DEBUG)
    bad = "MTIzNDU2Nzg5MDEyMzQ1Njc4.GfAkE1.thisisnotthetokenofanybotatallxxxxxxx"
    async with discord_run(tmp_path, accounts={"other": {
            "token": bad, "allow_from": ["*"]}}) as run:
        adapter = run.adapter
        async with anyio.create_task_group() as tg:
            tg.start_soon(run.harness.receive_loop, "discord", "other")
            other = run.harness.account("discord", "other")
            await run.wait(lambda: other.runtime.state == "failed", what="the refusal",
                           state=lambda: (other.runtime.state, other.runtime.detail))
            detail = other.runtime.detail
            assert "Discord refused the bot token" in detail
            assert "channels.discord.accounts.other.token" in detail
            chat = adapter.direct_chat(1)
            await adapter.inject(chat, "still here bt01z", sender_id=USER)
            await run.wait_for_tokens(chat, ["bt01z"])
            assert run.account.runtime.state == "running"
            tg.cancel_scope.cancel()
    text = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)
    assert bad not in text and adapter.discord.bot.token not in text


class ScaledChannelClock:
    """A ScaledClock as a channel's clock (which also reads the wall time)."""

    def __init__(self, scaled: ScaledClock) -> None:
        self.scaled = scaled

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return self.scaled.monotonic()

    async def sleep(self, seconds: float) -> None:
        await self.scaled.sleep(seconds)


@pytest.mark.slow
async def test_1000_replies_to_20_channels_get_no_429(tmp_path):
    """Discord's limits enforced by the fake (5 messages per 5 s in a channel, fixed
    windows, and 50 requests a second) with the channel's own pacing and buckets: 1,000
    replies over 20 channels, none refused. The kernel, the channel and the fake count on
    one clock 25 times faster than real time (a minute of Discord's in a few seconds)."""
    scaled = ScaledClock(25)
    # The channel's own pacing (no test override), and room for 50 waiting messages a chat.
    async with discord_run(tmp_path, channel={"rate_limits": None, "queue": {"cap": 60}},
                           clock=ScaledChannelClock(scaled), pacing=scaled.pacing) as run:
        adapter, discord = run.adapter, run.adapter.discord
        discord.rates.clock = scaled.monotonic
        chats = [adapter.direct_chat(n) for n in range(1, 21)]
        await adapter.connected()
        for i in range(50):
            for n, chat in enumerate(chats):
                discord.inject_message(chat, f"m{i:02d} bu01z", author=adapter.user_id(n),
                                       dm=True)

        def answered() -> int:
            return sum(len(replies(run, chat, "bu01z")) for chat in chats)

        await wait_until(lambda: answered() >= 1000, what="1,000 replies", timeout=120,
                         state=answered, check=run.check_loop)
        await run.settle()
        assert discord.rate_limited_calls == [] and discord.throttled == 0
        for chat in chats:
            got = [t.split()[1] for t in replies(run, chat, "bu01z")]
            assert got == [f"m{i:02d}" for i in range(50)], (chat, got[:5])


@pytest.mark.slow
async def test_an_answer_that_is_not_json_frees_its_slot_and_is_classified_by_status():
    from chatkernel.testing import ErrorAnswer

    async with FakeDiscord() as discord:
        channel = make_channel(discord)

        class Html(ErrorAnswer):
            def response(self):
                from aiohttp import web

                return web.Response(status=502, text="<html>bad gateway</html>",
                                    content_type="text/html")

        # More than the global window's 50 slots: a slot kept by an unreadable answer
        # would leave the last probe waiting for ever.
        discord.faults.fail("getCurrentUser", Html(502, None), times=60)
        try:
            for _ in range(60):
                result = await channel.probe()
                assert not result.ok and "502" in result.detail
            with anyio.fail_after(5):
                assert (await channel.probe()).ok
        finally:
            await channel.aclose()
