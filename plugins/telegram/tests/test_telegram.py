"""chatkernel-telegram against the fake Bot API over real HTTP: the Telegram specifics."""

from __future__ import annotations

import logging
import time
from contextlib import asynccontextmanager

import aiohttp
import anyio
import pytest

import chatkernel_telegram
from chatkernel.channels import InboundMessage, PlatformError
from chatkernel.testing import (
    BUSY_HINT,
    AgentEvent,
    KernelHarness,
    ManualClock,
    agent_plugin,
    free_port,
    gateway_config,
    run_gateway,
    scripted_agent,
    wait_until,
)
from chatkernel_telegram import channel as telegram_channel
from chatkernel_telegram.api import BotAPI
from chatkernel_telegram.fake import FakeBotAPI
from chatkernel_telegram.receiving import TelegramPolling

pytestmark = pytest.mark.anyio

TOKEN = "123456:AAExampleTokenForTestsOnly_abcdefghij"


@asynccontextmanager
async def telegram(tmp_path, *, agent=None, account=None, channel=None, run=True, api=None,
                   clock=None):
    """A kernel with one Telegram account against a FakeBotAPI, its loop running;
    ``clock``: the channel's (a ManualClock), else real time."""
    agent = agent or scripted_agent()
    if api is None:
        async with FakeBotAPI(token=TOKEN, username="chatkernel_bot") as fake:
            async with telegram(tmp_path, agent=agent, account=account, channel=channel,
                                run=run, api=fake, clock=clock) as parts:
                yield parts
        return
    fake = api
    config = {
        "agent": {"kind": agent.name},
        "queue": {"mode": "followup", "debounce_ms": 0},
        "channels": {"telegram": {
            "retry": {"attempts": 3, "base_delay_ms": 10, "jitter": 0},
            "rate_limits": {"chat": "100/s", "account": "1000/s", "group": "1000/s"},
            **(channel or {}),
            "accounts": {"main": {"bot_token": fake.token, "api_base": fake.base_url,
                                  "allow_from": ["*"], "poll_timeout": 1,
                                  **(account or {})}}}}}
    async with KernelHarness(tmp_path, config=config, channel_clock=clock, plugins=[
            ("telegram", chatkernel_telegram), ("agent", agent_plugin(agent))]) as h:
        async with anyio.create_task_group() as tg:
            if run:
                tg.start_soon(h.receive_loop, "telegram")
            yield fake, h, h.account("telegram").channel, agent
            tg.cancel_scope.cancel()


async def test_private_chat_round_trip_with_html_from_markdown(tmp_path):
    agent = scripted_agent(script=lambda r: [AgentEvent.reply(f"**{r.text}** & more")])
    async with telegram(tmp_path, agent=agent) as (api, h, channel, _):
        api.inject_message(42, "hello")
        sent = await api.wait_for_sent(1)
        assert sent[0].chat_id == 42 and sent[0].parse_mode == "HTML"
        assert sent[0].text == "<b>hello</b> &amp; more"
        assert sent[0].plain_text == "hello & more"
        assert agent.requests[0].envelope.startswith("[channel: telegram | user: 42")


async def test_offset_is_persisted_and_nothing_is_answered_twice_across_a_restart(tmp_path):
    async with FakeBotAPI(token=TOKEN, username="chatkernel_bot") as api:
        async with telegram(tmp_path, api=api) as (api, h, channel, agent):
            first = api.inject_message(42, "first")
            await api.wait_for_sent(1)
            await h.settle()

            async def saved() -> bool:
                return await channel.context.load_cursor() == str(first + 1)

            await wait_until(saved, timeout=5, what="the offset after the first update")
        polls = len(api.calls_to("getUpdates"))
        async with telegram(tmp_path, api=api) as (api, h, channel, agent):
            api.inject_message(42, "second")
            api.inject_message(42, "third")
            # Answered in order: a first answered twice would have come before the third.
            await api.wait_for_sent(3)
            await h.settle()
            assert api.texts(42) == ["re: first", "re: second", "re: third"]
            # the second run started where the first stopped
            assert int(api.calls_to("getUpdates")[polls].params["offset"]) == first + 1


async def test_unconfirmed_updates_are_redelivered_and_deduped(tmp_path):
    async with telegram(tmp_path) as (api, h, channel, agent):
        update_id = api.inject_message(42, "once")
        await api.wait_for_sent(1)
        await h.settle()
        api.inject_update(api.update(update_id))  # Telegram serves it again
        api.inject_message(42, "after")
        # Read in order: an answer to the redelivered update would have come before this.
        await api.wait_for_sent(2)
        await h.settle()
        assert api.texts(42) == ["re: once", "re: after"]


async def test_groups_need_a_mention_or_a_reply_to_the_bot(tmp_path):
    async with telegram(tmp_path) as (api, h, channel, agent):
        api.inject_message(-1001, "just chatting", chat_type="supergroup", from_id=7)
        api.inject_message(-1001, "hey @chatkernel_bot what's up", chat_type="supergroup",
                           from_id=7)
        await api.wait_for_sent(1)
        api.inject_message(-1001, "and this?", chat_type="supergroup", from_id=7,
                           reply_to_bot=True)
        await api.wait_for_sent(2)
        await h.settle()
        assert [r.text for r in agent.requests] == ["hey @chatkernel_bot what's up",
                                                    "and this?"]
        # in groups the reply quotes the message it answers
        assert all(m.reply_to is not None for m in api.sent(chat_id=-1001))


async def test_forum_topics_are_threads(tmp_path):
    async with telegram(tmp_path, account={"require_mention": False}) as (api, h, channel,
                                                                          agent):
        api.inject_message(-1002, "in topic 7", chat_type="supergroup", from_id=7,
                           message_thread_id=7, is_topic_message=True)
        sent = await api.wait_for_sent(1)
        assert sent[0].message_thread_id == 7
        assert agent.requests[0].session_key == "telegram:main:-1002:7"


async def test_inbound_photo_is_downloaded_into_the_workspace(tmp_path):
    async with telegram(tmp_path) as (api, h, channel, agent):
        file_id = api.add_file(b"\x89PNG fake image", filename="cat.png", mime="image/png")
        api.inject_message(42, None, photo=file_id, caption="look")
        await api.wait_for_sent(1)
        text = agent.requests[0].text
        assert text.startswith("look\n[image saved: ")
        saved = agent.requests[0].media[0].path
        assert saved.read_bytes() == b"\x89PNG fake image"
        assert "media/inbound/telegram/main" in saved.as_posix()


async def test_media_out_by_extension_as_multipart(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    for name in ("a.jpg", "b.ogg", "c.gif", "d.mp3", "e.pdf"):
        (workspace / name).write_bytes(b"x" * 100)
    with open(workspace / "big.jpg", "wb") as handle:  # over the 10 MB photo cap
        handle.truncate(11 * 1024 * 1024)
    reply = "\n".join(f"MEDIA: {n}" for n in ("a.jpg", "b.ogg", "c.gif", "d.mp3", "e.pdf",
                                              "big.jpg"))
    agent = scripted_agent(script=lambda r: [AgentEvent.reply(reply)])
    async with telegram(tmp_path, agent=agent) as (api, h, channel, _):
        api.inject_message(42, "files please")
        sent = await api.wait_for_sent(6, timeout=20)
        assert [m.method for m in sent] == ["sendPhoto", "sendVoice", "sendAnimation",
                                            "sendAudio", "sendDocument", "sendDocument"]
        assert sent[0].files[0].filename == "a.jpg"


async def test_markup_refused_is_resent_as_plain_text(tmp_path):
    agent = scripted_agent(script=lambda r: [AgentEvent.reply("**bold** move")])
    async with telegram(tmp_path, agent=agent) as (api, h, channel, _):
        api.fail_next("sendMessage", 400, "Bad Request: can't parse entities: "
                      "Can't find end tag corresponding to start tag \"b\" at byte offset 0")
        api.inject_message(42, "x")
        sent = await api.wait_for_sent(1)
        assert sent[0].parse_mode is None and sent[0].text == "bold move"
        assert not h.metric("chatkernel_send_retries_total", channel="telegram", account="main")


@pytest.mark.slow
async def test_429_retry_after_is_honoured(tmp_path):
    async with telegram(tmp_path) as (api, h, channel, agent):
        api.fail_next_with_retry_after("sendMessage", 1)
        api.inject_message(42, "slow down")
        sent = await api.wait_for_sent(1, timeout=10)
        attempts = [c.when for c in api.calls_to("sendMessage")]
        assert len(attempts) == 2 and attempts[1] - attempts[0] >= 0.9
        assert sent[0].text == "re: slow down"


async def test_migrated_group_updates_the_route(tmp_path):
    agent = scripted_agent(gate=True)
    async with telegram(tmp_path, agent=agent, account={"require_mention": False}) as (
            api, h, channel, _):
        api.inject_message(-5, "hi", chat_type="group", from_id=7)
        await wait_until(lambda: agent.requests, timeout=5, what="the turn")
        api.migrate_chat(-5, -1005)
        agent.gate.set()
        sent = await api.wait_for_sent(1)
        assert sent[0].chat_id == -1005
        route = await h.session_route("telegram:main:-5")
        assert route.chat_id == "-1005"


async def test_typing_is_shown_while_a_turn_runs(tmp_path):
    agent = scripted_agent(gate=True)
    async with telegram(tmp_path, agent=agent) as (api, h, channel, _):
        api.inject_message(42, "think")
        await api.wait_for_chat_actions(1)
        assert api.chat_actions[0].action == "typing"
        agent.gate.set()
        await api.wait_for_sent(1)


async def _probe(h):
    """The account probed the way ``chatkernel health`` probes it: timed by the kernel."""
    return (await h.health.probe())["telegram:main"]


async def test_probe_reports_the_bot_and_a_rejected_token(tmp_path):
    async with telegram(tmp_path, run=False) as (api, h, channel, agent):
        result = await _probe(h)
        assert result.ok and result.detail == "@chatkernel_bot" and result.latency_ms >= 0
        api.revoke_token(api.token)
        result = await _probe(h)
        assert not result.ok and result.detail.startswith(
            "the Bot API rejected the token (401 Unauthorized): get a new token from @BotFather")
        assert result.restartable is False  # the health monitor will not restart for it


@pytest.mark.slow
async def test_a_rejected_token_fails_the_account_with_what_to_do(tmp_path):
    async with FakeBotAPI(token=TOKEN, username="chatkernel_bot") as api:
        api.revoke_token(api.token)  # every method answers 401 Unauthorized
        clock = ManualClock()
        async with telegram(tmp_path, api=api, clock=clock) as (api, h, channel, agent):
            runtime = h.account("telegram").runtime
            await wait_until(lambda: runtime.state == "failed", timeout=5,
                             what="the account failed", state=lambda: runtime.state)
            expected = ("the Bot API rejected the token (401 Unauthorized): get a new token "
                        "from @BotFather (/token, or /revoke for a leaked one) and set it in "
                        "channels.telegram.accounts.main.bot_token, then restart the gateway")
            assert runtime.detail == expected and runtime.last_error == expected
            snapshot = await h.health.snapshot()
            assert any(expected in problem for problem in snapshot.problems)
            secret = TOKEN.split(":")[1]
            assert secret not in repr(snapshot)
            # The next try waits a minute: the loop sleeps until then, no getMe storm.
            assert await clock.sleeper() == clock.now() + 60
            assert api.unauthorized_calls == ["getMe"]
            clock.advance(60)  # tried again, refused again: the wait doubles
            assert await clock.sleeper() == clock.now() + 120
            assert api.unauthorized_calls == ["getMe", "getMe"]
            assert runtime.detail == expected


async def test_health_another_poller_is_a_problem_a_restart_cannot_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(telegram_channel, "CONFLICT_WAIT_SECONDS", 30)
    async with telegram(tmp_path) as (api, h, channel, agent):
        runtime = h.account("telegram").runtime
        api.fail_next("getUpdates", 409, "Conflict: terminated by other getUpdates request")
        await wait_until(lambda: runtime.problem is not None, timeout=5, what="the problem")
        # getMe still works, but the kernel's probe path reports the loop's problem,
        # and says a restart cannot fix it (so the health monitor leaves it alone).
        result = await _probe(h)
        assert not result.ok and result.restartable is False
        assert result.detail == "another instance is polling this bot token"
        assert runtime.problem_restartable is False and runtime.problem_since is not None
        snapshot = await h.health.snapshot()
        assert any("another instance is polling this bot token" in problem
                   for problem in snapshot.problems), snapshot.problems


@pytest.mark.slow
async def test_health_answered_polls_are_signs_of_life_and_webhook_mode_is_quiet(tmp_path):
    async with telegram(tmp_path) as (api, h, channel, agent):
        runtime = h.account("telegram").runtime
        runtime.last_event_at = None
        # An empty poll answered is enough.
        await wait_until(lambda: runtime.last_event_at is not None, timeout=5,
                         what="a sign of life")
        assert h.account("telegram").transport.quiet is False
    webhook = {"mode": "webhook", "webhook_url": "http://127.0.0.1:1/telegram/main/webhook",
               "secret_token": "s3cret"}
    async with telegram(tmp_path / "w", run=False, account=webhook) as (api, h, channel, _):
        assert h.account("telegram").transport.quiet is True


async def test_another_poller_is_reported_not_restarted(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(telegram_channel, "CONFLICT_WAIT_SECONDS", 0.05)
    async with telegram(tmp_path) as (api, h, channel, agent):
        runtime = h.account("telegram").runtime
        api.fail_next("getUpdates", 409, "Conflict: terminated by other getUpdates request; "
                      "make sure that only one bot instance is running")
        await wait_until(lambda: runtime.problem is not None, timeout=5, what="the problem")
        assert runtime.problem == "another instance is polling this bot token"
        assert "another instance is polling this bot token" in caplog.text
        # the loop carries on (no crash, no restart) and recovers by itself
        api.inject_message(42, "still here")
        await api.wait_for_sent(1)
        assert runtime.problem is None
        assert not h.metric("chatkernel_account_restarts_total", channel="telegram",
                            account="main")


async def test_the_token_never_appears_in_errors_or_logs(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    closed_port = free_port()
    # A refused connection fails the send at once here (the gateway would wait it out).
    retry = {"attempts": 3, "base_delay_ms": 10, "jitter": 0, "unreachable_max_age": "0"}
    async with telegram(tmp_path, run=False, channel={"retry": retry}) as (api, h, channel,
                                                                         agent):
        channel.api = BotAPI(TOKEN, f"http://127.0.0.1:{closed_port}")
        result = await _probe(h)
        assert not result.ok and TOKEN not in result.detail
        with pytest.raises(PlatformError) as info:
            await channel.api.call("sendMessage", {"chat_id": 1, "text": "x"})
        assert TOKEN not in str(info.value)
        await h.send_text("telegram", "42", "hello")
        await h.settle()
        notes = await h.session_log("telegram:main:42", roles=("notification",))
        assert notes and all(TOKEN not in n.text for n in notes)
    assert TOKEN not in caplog.text


async def start_webhook_gateway(task_group, tmp_path, api) -> tuple[str, anyio.Event]:
    """Run in ``task_group`` a gateway on a free port whose Telegram account takes
    webhooks from ``api``, with the secret token "s3cret-token"; once ``api`` has the
    webhook, its URL and the event that stops the gateway."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/telegram/main/webhook"
    config = gateway_config({
        "gateway": {"listen": f"127.0.0.1:{port}", "workspace": str(tmp_path / "ws")},
        "store": {"path": str(tmp_path / "state.db")},
        "channels": {"telegram": {"accounts": {"main": {
            "bot_token": api.token, "api_base": api.base_url, "allow_from": ["*"],
            "mode": "webhook", "webhook_url": url, "secret_token": "s3cret-token"}}}}})
    stop, ready = anyio.Event(), anyio.Event()
    task_group.start_soon(lambda: run_gateway(config, on_ready=lambda _: ready.set(),
                                              stop=stop))
    with anyio.fail_after(10):
        await ready.wait()
    await wait_until(lambda: api.webhook_info().get("url"), timeout=10,
                     what="the webhook set")
    return url, stop


@pytest.mark.slow
async def test_webhook_mode_checks_the_secret_token(tmp_path):
    async with FakeBotAPI(token=TOKEN, username="chatkernel_bot") as api, \
            anyio.create_task_group() as tg:
        url, stop = await start_webhook_gateway(tg, tmp_path, api)
        assert api.webhook_info()["url"] == url
        api.inject_message(42, "via webhook")
        await api.wait_for_sent(1)
        assert api.texts(42) == ["via webhook"]
        async with aiohttp.ClientSession() as http:
            update = {"update_id": 999, "message": {
                "message_id": 5, "date": 0, "chat": {"id": 42, "type": "private"},
                "from": {"id": 42, "is_bot": False, "first_name": "X"}, "text": "forged"}}
            for headers in ({}, {"X-Telegram-Bot-Api-Secret-Token": "wrong"}):
                async with http.post(url, json=update, headers=headers) as response:
                    assert response.status == 401
        # A real update after the forged ones: the chat's answers come in order, so once it
        # is answered, a forged update taken in would have been answered before it.
        api.inject_message(42, "after them")
        await api.wait_for_sent(2)
        assert api.texts(42) == ["via webhook", "after them"]  # the forged did nothing
        stop.set()


@pytest.mark.slow
async def test_malformed_updates_posted_to_the_webhook_get_200_and_no_traceback(
        tmp_path, caplog):
    broken = [{"update_id": 900, "message": "abc"}, {"update_id": 901, "message": [1]},
              {"update_id": 902, "message": {"message_id": 1, "chat": "x", "text": "y"}},
              {"update_id": 903, "message": {"message_id": 1, "date": 0, "text": "z",
                                             "chat": {"id": [42], "type": "private"}}},
              {"update_id": "x", "message": {"message_id": 2, "chat": {"id": 42},
                                             "text": ["t"]}}]
    async with FakeBotAPI(token=TOKEN, username="chatkernel_bot") as api, \
            anyio.create_task_group() as tg:
        url, stop = await start_webhook_gateway(tg, tmp_path, api)
        async with aiohttp.ClientSession() as http:
            for update in broken:
                async with http.post(url, json=update, headers={
                        "X-Telegram-Bot-Api-Secret-Token": "s3cret-token"}) as response:
                    assert response.status == 200, update
        api.inject_message(42, "after the broken ones")
        await api.wait_for_sent(1)
        assert api.texts(42) == ["after the broken ones"]
        stop.set()
    assert not any(r.exc_info for r in caplog.records)


@pytest.mark.parametrize("broken", [{"date": "not a number", "text": "broken"},
                                    {"date": 0, "text": 12345}, {"date": 0, "text": {"a": 1}},
                                    {"date": 0, "text": "x", "entities": "nope"}])
async def test_a_malformed_update_is_skipped_and_reported_not_fatal(tmp_path, caplog, broken):
    async with telegram(tmp_path) as (api, h, channel, agent):
        poison = api.inject_update({"message": {
            "message_id": 1, "chat": {"id": 42, "type": "private"}, **broken}})
        api.inject_message(42, "fine")
        sent = await api.wait_for_sent(1)
        assert [m.plain_text for m in sent] == ["re: fine"]
        assert f"update {poison} skipped, it is not a message this channel can read" \
            in caplog.text
        # The poison update is confirmed with the rest: it never comes back.
        assert int(await channel.context.load_cursor()) > poison
        assert [r.text for r in agent.requests] == ["fine"]
        # It is in the journal, refused: a second record of it is a duplicate, and it
        # is not among the entries a restart would replay.
        again = InboundMessage(channel="telegram", account="main", chat_id="42",
                               message_id=f"unreadable:{poison}", sender_id="?")
        assert await channel.context.store.journal_inbound(again) is None
        assert not any(entry.message.message_id == f"unreadable:{poison}"
                       for entry in await channel.context.store.unfinished_inbound())


async def test_a_batch_keeps_order_within_each_chat(tmp_path):
    async with telegram(tmp_path, run=False) as (api, h, channel, agent):
        for i in range(10):
            for chat in (1, 2, 3):
                api.inject_message(chat, f"m{i}")
        async with anyio.create_task_group() as tg:
            tg.start_soon(channel.transport().run, h.receiver)
            await api.wait_until(lambda: sum(
                text.startswith("re:") for chat in (1, 2, 3) for text in api.texts(chat)) == 30)
            tg.cancel_scope.cancel()
        for chat in (1, 2, 3):
            # A burst in one chat may also get the busy hint, once.
            replies = [text for text in api.texts(chat) if text != BUSY_HINT]
            assert replies == [f"re: m{i}" for i in range(10)]


async def test_webhook_mode_without_a_secret_token_makes_one_per_start(tmp_path):
    webhook = {"mode": "webhook", "webhook_url": "http://127.0.0.1:1/telegram/main/webhook"}
    secrets = []
    for run in ("a", "b"):
        async with telegram(tmp_path / run, run=False, account=webhook) as (api, h, channel, _):
            secrets.append(channel.secret_token)
            assert len(channel.secret_token) >= 32
            channel.transport().verifier().verify(
                {"X-Telegram-Bot-Api-Secret-Token": channel.secret_token}, b"{}")
            await channel.transport().register()
            assert api.webhook_info()["url"] == webhook["webhook_url"]
    assert secrets[0] != secrets[1]


async def test_failing_polls_turn_health_red_and_recovery_turns_it_green(tmp_path, monkeypatch):
    monkeypatch.setattr(TelegramPolling, "backoff", (0.01, 0.05))
    async with telegram(tmp_path) as (api, h, channel, agent):
        runtime = h.account("telegram").runtime
        api.fail_next("getUpdates", 502, "Bad Gateway", times=3)
        await wait_until(lambda: runtime.problem is not None, timeout=5, what="the problem")
        assert runtime.problem == "poll failed: Bad Gateway" and runtime.problem_restartable
        snapshot = await h.health.snapshot()
        assert "telegram:main: receiving: poll failed: Bad Gateway" in snapshot.problems
        api.inject_message(42, "back")
        await api.wait_for_sent(1)
        assert runtime.problem is None
        snapshot = await h.health.snapshot()
        assert not any("receiving" in problem for problem in snapshot.problems)
