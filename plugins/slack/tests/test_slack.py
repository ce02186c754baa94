"""The Slack channel's own behaviour, against the fake Slack, one test per failure the
peer gateways are known for (each named in its docstring) and per Slack specific."""

from __future__ import annotations

import collections
import json
import logging
import time
from contextlib import asynccontextmanager

import aiohttp
import anyio
import pytest

import chatkernel_slack
from chatkernel.channels import ConfigError, PlatformError
from chatkernel.testing import (
    KernelHarness,
    ManualClock,
    ScaledClock,
    agent_plugin,
    free_port,
    open_contract_run,
    png_bytes,
    scripted_agent,
    wait_until,
)
from chatkernel_slack.fake import SlackSigner
from chatkernel_slack.api import TOKEN_PATTERNS, SlackAPI
from chatkernel_slack.fake import FakeSlack
from slack_adapters import SlackEventsAdapter, SlackSocketAdapter

pytestmark = pytest.mark.anyio

DM, CHANNEL, USER = "D0DIRECT01", "C0GENERAL1", "U0USER0001"


@asynccontextmanager
async def slack_run(tmp_path, adapter_class=SlackSocketAdapter, *, account=None, channel=None,
                    allow_from=("*",), loop=True, clock=None,
                    rate_clock: ScaledClock | None = None):
    """A kernel with the Slack channel against a fresh fake (an open_contract_run);
    ``clock``: the channel's (a ManualClock), else real time; with ``rate_clock``, the
    kernel's rate limits and the fake's windows both count in it."""
    async with adapter_class() as adapter:
        adapter.account_extra.update(account or {})
        adapter.channel_extra.update(channel or {})
        if rate_clock is not None:
            adapter.slack.rates.clock = rate_clock.monotonic
        async with open_contract_run(adapter, tmp_path / "kernel", allow_from=allow_from,
                                     loop=loop, channel_clock=clock,
                                     pacing=rate_clock and rate_clock.pacing) as run:
            yield run


async def connected(run):
    """The receive loop is up (a socket open, or the webhook taking requests), and the
    account counts as started, as under the gateway's supervisor."""
    run.account.runtime.loop_started(time.time())
    if run.channel.config.mode == "events":
        await run.wait(lambda: run.account.transport.accepting, what="the webhook")
    else:
        await run.wait(lambda: run.adapter.slack.app.open_sockets, what="a socket")


def answered(run, chat, token, thread_ts=None):
    return [t for t in run.adapter.sent_texts(chat, thread_id=thread_ts) if token in t]


# -- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(("account", "names"), [
    ({"bot_token": "xoxp-1111-2222-SECRETUSERTOKEN", "app_token": "xapp-1-A1-1-SECRETAPP"},
     ["bot_token", "user token"]),
    ({"bot_token": "xapp-1-A1-1-SECRETAPPINBOT", "app_token": "xapp-1-A1-1-SECRETAPP"},
     ["bot_token", "app_token"]),
    ({"bot_token": "xoxb-1-2-SECRETBOT"}, ["app_token", "socket mode"]),
    ({"bot_token": "xoxb-1-2-SECRETBOT", "app_token": "xoxb-SECRETINAPP"}, ["app_token"]),
    ({"bot_token": "xoxb-1-2-SECRETBOT", "mode": "events"}, ["signing_secret", "events mode"]),
    ({"app_token": "xapp-1-A1-1-SECRETAPP"}, ["bot_token", "required"]),
])
async def test_missing_or_malformed_secrets_are_config_errors_naming_the_key(
        tmp_path, account, names):
    config = {"channels": {"slack": {"accounts": {"main": account}}}}
    with pytest.raises(ConfigError) as info:
        async with KernelHarness(tmp_path, config=config,
                                 plugins=[("slack", chatkernel_slack)]):
            pass
    message = str(info.value)
    assert "channels.slack.accounts.main" in message
    for name in names:
        assert name in message, message
    assert "SECRET" not in message, message


# -- inbound, Socket Mode ------------------------------------------------------------------


async def test_envelopes_redelivered_after_an_outage_are_processed(tmp_path):
    """vercel/chat#666: envelopes with retry_attempt > 0 acknowledged and discarded, though
    they are the only delivery of events sent while the socket was down."""
    async with slack_run(tmp_path, loop=False) as run:
        slack = run.adapter.slack
        await run.adapter.inject(DM, "while the socket was down rd10z", sender_id=USER)
        await run.start_loop()
        await run.wait_for_tokens(DM, ["rd10z"])
        assert [e.retry_attempt for e in slack.envelopes if e.payload["event"].get("user")
                == USER] == [1]
        assert slack.dropped == []


async def test_an_unacknowledged_envelope_comes_again_and_is_answered_once(tmp_path):
    """Slack sends an envelope again when its ack is late; the journal takes it once."""
    async with slack_run(tmp_path) as run:
        slack = run.adapter.slack
        await connected(run)
        await run.adapter.inject(DM, "first ua01z", sender_id=USER)
        await run.wait_for_tokens(DM, ["ua01z"])
        [event_id] = run.adapter._last
        for _ in range(2):  # Slack sent it again twice, as if its acks had been late
            slack.redeliver(event_id)
        await run.adapter.inject(DM, "then ua02z", sender_id=USER)
        await run.wait_for_tokens(DM, ["ua02z"])
        await run.settle()
        assert len(answered(run, DM, "ua01z")) == 1
        assert [e.retry_attempt for e in slack.envelopes if e.event_id == event_id] == [0, 1, 1]
        assert sum("ua01z" in t for t in run.agent_texts()) == 1


@pytest.mark.slow
@pytest.mark.parametrize("adapter_class", [SlackSocketAdapter, SlackEventsAdapter])
@pytest.mark.parametrize("first", ["message", "mention"])
async def test_a_mention_is_answered_once_whichever_of_its_two_events_comes_first(
        tmp_path, adapter_class, first):
    """openclaw/openclaw#34833: one @mention is a message and an app_mention event; a
    dedupe keyed the wrong way dropped half the mentions or answered them twice."""
    async with slack_run(tmp_path, adapter_class) as run:
        slack = run.adapter.slack
        slack.mention_order = first
        await run.adapter.inject(CHANNEL, "hey there mn01z", sender_id=USER, group=True,
                                 mention=True)
        await run.adapter.inject(CHANNEL, "and again mn02z", sender_id=USER, group=True,
                                 mention=True)
        await run.wait_for_tokens(CHANNEL, ["mn01z", "mn02z"])
        await run.settle()
        kinds = [w["event"]["type"] for _, w in slack.emitted if w["event"].get("user") == USER]
        assert kinds == ([first if first == "message" else "app_mention",
                          "app_mention" if first == "message" else "message"] * 2)
        assert len(answered(run, CHANNEL, "mn01z")) == len(answered(run, CHANNEL, "mn02z")) == 1
        assert [t for t in run.agent_texts()] == ["hey there mn01z", "and again mn02z"]
        duplicates = [m.message_id for m, outcome in run.deliveries if outcome == "duplicate"]
        # The second event of each mention is answered without a journal write (issue
        # 31): over Socket Mode acknowledged, over the Events API answered 200.
        assert duplicates == []


@pytest.mark.parametrize("first", ["message", "mention"])
async def test_a_mentions_second_envelope_is_acknowledged_without_a_journal_write(
        tmp_path, first):
    """Issue 31: a mention is two envelopes; over Socket Mode only one is journaled and
    processed, and the other is acknowledged all the same (Slack does not send it
    again), whether the two come in one batch or one after the other."""
    async with slack_run(tmp_path) as run:
        slack = run.adapter.slack
        slack.mention_order = first
        await connected(run)
        for n in range(3):
            slack.inject_message(CHANNEL, f"mention {n} tw0{n}z", user=USER, mention=True)
        await run.wait_for_tokens(CHANNEL, ["tw00z", "tw01z", "tw02z"])
        await run.settle()
        mine = [e for e in slack.envelopes if e.payload["event"].get("user") == USER]
        assert len(mine) == 6 and all(e.acked for e in mine)
        assert [e.retry_attempt for e in mine] == [0] * 6
        assert sorted(outcome for _, outcome in run.deliveries) == ["accepted"] * 3
        assert [t for t in run.agent_texts()] == [f"mention {n} tw0{n}z" for n in range(3)]


@pytest.mark.slow
async def test_a_disconnect_frame_or_a_dropped_socket_loses_no_event(tmp_path):
    async with slack_run(tmp_path, account={"ping_interval": 0.5}) as run:
        slack = run.adapter.slack
        slack.disconnect_grace = 0.2
        await run.adapter.inject(DM, "before dc01z", sender_id=USER)
        await run.wait_for_tokens(DM, ["dc01z"])
        await slack.disconnect("refresh_requested")
        await run.adapter.inject(DM, "during the refresh dc02z", sender_id=USER)
        await run.wait_for_tokens(DM, ["dc02z"])
        slack.drop_sockets()
        await run.adapter.inject(DM, "after the drop dc03z", sender_id=USER)
        await run.wait_for_tokens(DM, ["dc03z"])
        await run.settle()
        tokens = ["dc01z", "dc02z", "dc03z"]
        assert run.tokens_sent(DM, tokens) == tokens
        assert len(slack.calls_to("apps.connections.open")) >= 3
        assert slack.dropped == []


@pytest.mark.slow
async def test_an_open_but_dead_socket_turns_health_red_then_recovers(tmp_path):
    """NousResearch/hermes-agent#106849: Socket Mode dies silently while the gateway
    reports healthy. Liveness comes from Slack's frames, pongs included."""
    async with slack_run(tmp_path, account={"ping_interval": 0.3, "silent_after": 1.0}) as run:
        slack = run.adapter.slack
        health = run.health
        await connected(run)
        await run.adapter.inject(DM, "alive sd01z", sender_id=USER)
        await run.wait_for_tokens(DM, ["sd01z"])
        # Green while frames come; a loaded machine may stall the loop past silent_after
        # for a moment, so wait for green rather than read it once.
        await run.wait(lambda: health.account_snapshot(run.account, time.time()).ok,
                       what="the account's health green while Slack's frames come")
        slack.freeze()  # the socket stays open; nothing comes, not even a pong
        await run.wait(lambda: not health.account_snapshot(run.account, time.time()).ok,
                       what="the account's health to turn red")
        problems = health.account_snapshot(run.account, time.time()).problems
        assert any("silent" in p for p in problems), problems
        await slack.thaw()
        await run.wait(lambda: health.account_snapshot(run.account, time.time()).ok,
                       what="the account's health to recover",
                       state=lambda: health.account_snapshot(run.account, time.time()).problems)
        await run.adapter.inject(DM, "back sd02z", sender_id=USER)
        await run.wait_for_tokens(DM, ["sd02z"])


@pytest.mark.slow
async def test_pongs_alone_keep_a_quiet_socket_healthy(tmp_path):
    """No events for longer than silent_after is not a failure while Slack answers pings.

    The socket's silence is judged on the channel's clock, moved by hand past
    silent_after without an event; the pongs (slack_sdk pings every 0.2 real seconds)
    are what the watchdog finds."""
    silent_after = 0.8
    clock = ManualClock()
    async with slack_run(tmp_path, account={"ping_interval": 0.2, "silent_after": silent_after},
                         clock=clock) as run:
        runtime = run.account.runtime
        await connected(run)
        await run.adapter.inject(DM, "once qs01z", sender_id=USER)
        await run.wait_for_tokens(DM, ["qs01z"])
        opened = len(run.adapter.slack.calls_to("apps.connections.open"))
        last_event = clock.now()
        for _ in range(3):
            heard = runtime.last_event_at
            await run.wait(lambda: runtime.last_event_at != heard, what="a pong")
            clock.advance(0.6)  # less than silent_after since that pong
            # The watchdog sleeps until silent_after past the last frame it saw: it did
            # not close the socket (a reconnect would sleep its backoff, a second or more).
            deadline = await clock.sleeper()
            assert clock.now() < deadline <= clock.now() + silent_after
        assert clock.now() - last_event > 2 * silent_after  # no event all that time
        assert runtime.problem is None
        assert run.health.account_snapshot(run.account, time.time()).ok
        assert len(run.adapter.slack.calls_to("apps.connections.open")) == opened


async def test_a_shared_app_token_is_warned_about(tmp_path, caplog):
    """openclaw/openclaw#17216: "connected but no events": another process shares the app
    token and Slack gives each event to one connection at random."""
    async with SlackSocketAdapter() as adapter, aiohttp.ClientSession() as http:
        slack = adapter.slack
        async with http.post(f"{slack.base_url}/api/apps.connections.open",
                             headers={"Authorization": f"Bearer {slack.app_token}"}) as answer:
            url = (await answer.json())["url"]
        other = await http.ws_connect(url)  # the other process, connected first
        async with open_contract_run(adapter, tmp_path / "kernel") as run:
            await run.wait(lambda: run.channel.connections == 2,
                           what="hello's num_connections")
            result = await run.probe()
            assert result.ok and "2 connections share this app token" in result.detail
            assert result.extra["connections"] == 2
            assert "another process" in caplog.text
            assert "share this app token" in (run.account.runtime.last_error or "")
        await other.close()


async def test_a_refused_app_token_is_a_problem_naming_app_token(tmp_path):
    async with slack_run(tmp_path, account={"app_token": "xapp-1-A0NOPE-1-unknown"}) as run:
        await run.wait(lambda: run.account.runtime.problem is not None,
                       what="the problem reported")
        assert "app_token" in run.account.runtime.problem
        assert not run.account.runtime.problem_restartable
        result = await run.probe()
        assert not result.ok and "app_token" in result.detail


@pytest.mark.slow
async def test_a_refused_bot_token_fails_the_account_with_what_to_do(tmp_path):
    """Slack answers a bad token with ``ok: false`` (HTTP 200): the kit classifies it as a
    refused identity all the same."""
    token = "xoxb-0-0-not-a-token-Slack-knows"
    clock = ManualClock()
    async with slack_run(tmp_path, account={"bot_token": token}, clock=clock) as run:
        runtime = run.account.runtime
        await run.wait(lambda: runtime.state == "failed", what="the account failed")
        expected = ("Slack refused bot_token (invalid_auth): the token is not one Slack "
                    "knows: copy it again from the app's config page (OAuth & Permissions), "
                    "set it in channels.slack.accounts.main.bot_token and restart the gateway")
        assert runtime.detail == expected and runtime.last_error == expected
        snapshot = await run.health.snapshot()
        assert any(expected in problem for problem in snapshot.problems)
        assert token not in repr(snapshot)
        # The next try waits a minute: the loop sleeps until then, no auth.test storm.
        assert await clock.sleeper() == clock.now() + 60
        assert len(run.adapter.slack.calls_to("auth.test")) == 1
        clock.advance(60)  # tried again, refused again: the wait doubles
        assert await clock.sleeper() == clock.now() + 120
        assert len(run.adapter.slack.calls_to("auth.test")) == 2
        assert runtime.detail == expected


async def test_per_channel_order_is_kept_while_channels_run_concurrently(tmp_path):
    chats = ["D0DIRECT01", "D0DIRECT02", "C0GENERAL1", "C0RANDOM01"]
    async with slack_run(tmp_path, loop=False, account={"channel_replies": "channel"},
                         channel={"rate_limits": {"chat": "1000/s", "account": "1000/s"}}) as run:
        for n in range(10):
            for chat in chats:
                await run.adapter.inject(chat, f"n{n:02d}z", sender_id=USER,
                                         group=chat.startswith("C"), mention=chat.startswith("C"))
        await run.start_loop()
        for chat in chats:
            await run.wait_for_tokens(chat, [f"n{n:02d}z" for n in range(10)])
        await run.settle()
        for chat in chats:
            tokens = [f"n{n:02d}z" for n in range(10)]
            assert run.tokens_sent(chat, tokens) == tokens, run.texts(chat)


async def test_the_bots_own_and_other_bots_messages_are_ignored_unless_allowed(tmp_path):
    for allow, expected in ((False, ["ob02z"]), (True, ["ob01z", "ob02z"])):
        async with slack_run(tmp_path / str(allow), account={"allow_bots": allow}) as run:
            slack = run.adapter.slack
            slack.inject_message(DM, "from another bot ob01z", user="U0OTHERBOT",
                                 bot_id="B0OTHERBOT1")
            # This app's own, posted with a bot_message subtype and no user at all.
            slack.inject_event({"type": "message", "subtype": "bot_message",
                                "bot_id": slack.app.bot_id, "text": "mine ob00z",
                                "ts": slack.next_ts(), "channel": DM, "channel_type": "im"})
            await run.adapter.inject(DM, "from a person ob02z", sender_id=USER)
            await run.wait_for_tokens(DM, ["ob02z"])
            await run.settle()
            assert run.tokens_sent(DM, ["ob00z", "ob01z", "ob02z"]) == expected
            # Every reply came back as a message event of the bot's own: none answered.
            echoes = [w for _, w in slack.emitted if w["event"].get("bot_id") == slack.app.bot_id
                      and w["event"].get("user") == slack.bot_user]
            assert len(echoes) == len(run.texts(DM))


async def test_bang_commands_are_slash_commands(tmp_path):
    async with slack_run(tmp_path) as run:
        await run.adapter.inject(DM, "!status", sender_id=USER)
        await run.adapter.inject(CHANNEL, "!status", sender_id=USER, group=True, mention=True)
        await run.wait(lambda: run.texts(DM) and run.texts(CHANNEL), what="two answers")
        await run.settle()
        assert "slack" in run.texts(DM)[0] and "slack" in run.texts(CHANNEL)[0]
        assert run.agent.requests == []


# -- inbound, Events API -------------------------------------------------------------------


def signed(secret: str, body: bytes, *, at: float | None = None) -> dict[str, str]:
    return {"Content-Type": "application/json",
            **SlackSigner(secret, clock=(lambda: at) if at is not None else time.time)(body)}


async def test_forged_stale_or_missing_signatures_are_refused_and_nothing_is_journaled(
        tmp_path):
    async with slack_run(tmp_path, SlackEventsAdapter) as run:
        slack = run.adapter.slack
        url = slack.app.request_url
        event = {"type": "message", "user": USER, "text": "forged fg01z", "ts": slack.next_ts(),
                 "channel": DM, "channel_type": "im", "event_ts": slack.next_ts()}
        slack.channel(DM)
        body = json.dumps(slack.wrap(event, slack.app)).encode()
        attempts = {
            "missing": {"Content-Type": "application/json"},
            "forged": signed("not-the-signing-secret", body),
            "stale": signed(slack.signing_secret, body, at=time.time() - 360),
            "future": signed(slack.signing_secret, body, at=time.time() + 360),
        }
        async with aiohttp.ClientSession() as http:
            for name, headers in attempts.items():
                async with http.post(url, data=body, headers=headers) as answer:
                    assert answer.status == 401, name
            async with http.post(url, data=body + b" ",  # signed, then changed
                                 headers=signed(slack.signing_secret, body)) as answer:
                assert answer.status == 401
            await run.settle()
            assert run.deliveries == [] and run.agent.requests == []
            async with http.post(url, data=body,
                                 headers=signed(slack.signing_secret, body)) as answer:
                assert answer.status == 200
        await run.wait_for_tokens(DM, ["fg01z"])


async def test_url_verification_is_answered_with_the_challenge(tmp_path):
    async with slack_run(tmp_path, SlackEventsAdapter) as run:
        slack = run.adapter.slack
        await connected(run)
        url = slack.app.request_url
        assert await slack.verify_url(url)
        impostor = slack.add_app(mode="events")  # signs with another secret
        assert not await slack.verify_url(url, app=impostor)


async def test_the_webhook_is_answered_before_the_turn_ends(tmp_path):
    """Slack retries an event whose request is not answered within 3 s."""
    async with slack_run(tmp_path, SlackEventsAdapter) as run:
        slack = run.adapter.slack
        run.agent.gate = anyio.Event()
        await run.adapter.inject(DM, "take your time wa01z", sender_id=USER)
        await run.wait(lambda: run.agent.running == 1, what="the turn to start")
        await run.wait(lambda: any(status == 200 for _, status, _ in slack.deliveries),
                       what="the webhook's 200 while the turn runs")
        assert run.texts(DM) == []
        run.agent.gate.set()
        await run.wait_for_tokens(DM, ["wa01z"])
        [event_id] = run.adapter._last
        assert [n for n, _, e in slack.deliveries if e == event_id] == [0]  # no retry needed


@pytest.mark.parametrize("broken", [
    "not an event", ["a", "list"],
    {"type": "message", "channel": ["C0GENERAL1"], "user": USER, "text": "x", "ts": "1.1"},
    {"type": "message", "channel": DM, "user": USER, "text": {"a": 1}, "ts": "1.2"},
    {"type": "message", "channel": DM, "user": USER, "text": "x", "ts": "1.3", "files": "abc"},
    {"type": "message", "channel": DM, "user": ["U"], "text": "x", "ts": "1.4",
     "blocks": "nope"},
])
async def test_a_malformed_signed_event_gets_its_200_and_the_next_is_answered(
        tmp_path, caplog, broken):
    async with slack_run(tmp_path, SlackEventsAdapter) as run:
        slack = run.adapter.slack
        await connected(run)
        slack.emit(broken)  # signed by the fake, as Slack signs
        await run.adapter.inject(DM, "still here me01z", sender_id=USER)
        await run.wait_for_tokens(DM, ["me01z"])
        assert {status for _, status, _ in slack.deliveries} == {200}  # the broken one too
        assert not any(r.exc_info for r in caplog.records)


# -- threads ---------------------------------------------------------------------------------


async def test_a_channel_mention_is_answered_in_a_thread_under_it_and_the_thread_goes_on(
        tmp_path):
    async with slack_run(tmp_path) as run:
        slack = run.adapter.slack
        ts = slack.inject_message(CHANNEL, "start a thread tt01z", user=USER, mention=True)
        await run.wait(lambda: answered(run, CHANNEL, "tt01z", thread_ts=ts),
                       what="the answer in the thread", state=lambda: slack.sent(CHANNEL))
        # In the bot's thread, no mention is needed any more.
        slack.inject_message(CHANNEL, "and a follow-up tt02z", user=USER, thread_ts=ts)
        await run.wait(lambda: answered(run, CHANNEL, "tt02z", thread_ts=ts),
                       what="the follow-up answered in the thread")
        # Elsewhere in the channel it still is.
        slack.inject_message(CHANNEL, "unrelated tt03z", user=USER)
        await run.settle()
        assert not answered(run, CHANNEL, "tt03z")
        sessions = {r.session_key for r in run.agent.requests}
        assert sessions == {f"slack:main:{CHANNEL}:{ts}"}


async def test_channel_replies_can_go_in_the_channel(tmp_path):
    async with slack_run(tmp_path, account={"channel_replies": "channel"}) as run:
        slack = run.adapter.slack
        slack.inject_message(CHANNEL, "answer here cr01z", user=USER, mention=True)
        await run.wait_for_tokens(CHANNEL, ["cr01z"])
        assert [m.thread_ts for m in slack.sent(CHANNEL)] == [None]
        thread = slack.inject_message(CHANNEL, "in a thread cr02z", user=USER, mention=True,
                                      thread_ts="1600000000.000009")
        assert thread
        await run.wait(lambda: answered(run, CHANNEL, "cr02z", thread_ts="1600000000.000009"),
                       what="a thread message answered in its thread")


# -- files -----------------------------------------------------------------------------------


async def test_an_inbound_file_is_downloaded_with_the_bot_token_into_the_media_store(tmp_path):
    async with slack_run(tmp_path) as run:
        slack = run.adapter.slack
        picture = png_bytes(3, 3)
        slack.inject_message(DM, "look fi01z", user=USER,
                             files=[("chart.png", picture, "image/png")])
        await run.wait_for_tokens(DM, ["fi01z"])
        [media] = run.turn_for("fi01z").media
        assert media.kind == "image" and media.path is not None
        assert media.path.read_bytes() == picture
        assert str(run.harness.workspace) in str(media.path)
        assert "inbound" in str(media.path)


async def test_a_file_is_sent_in_the_thread_with_the_upload_v2_flow(tmp_path):
    async with slack_run(tmp_path) as run:
        slack = run.adapter.slack
        notes = run.harness.workspace / "notes.txt"
        notes.parent.mkdir(parents=True, exist_ok=True)
        notes.write_text("the notes\n")
        run.replies["fo01z"] = f"here they are fo01z\nMEDIA: {notes}"
        ts = slack.inject_message(CHANNEL, "the notes please fo01z", user=USER, mention=True)
        await run.wait(lambda: any(m.files for m in slack.sent(CHANNEL)), what="the file")
        await run.settle()
        [shared] = [m for m in slack.sent(CHANNEL) if m.files]
        assert shared.thread_ts == ts and shared.files[0].data == b"the notes\n"
        assert shared.files[0].name == "notes.txt"
        steps = [c.method for c in slack.calls if c.method in (
            "files.getUploadURLExternal", "upload", "files.completeUploadExternal")]
        assert steps == ["files.getUploadURLExternal", "upload", "files.completeUploadExternal"]
        assert slack.calls_to("files.upload") == []  # the retired API is never used
        assert slack.unknown_params == []


@pytest.mark.slow
async def test_a_file_send_retried_after_a_429_uploads_the_bytes_once(tmp_path):
    async with slack_run(tmp_path) as run:
        slack = run.adapter.slack
        slack.fail_next_with_retry_after("files.completeUploadExternal", 1)
        notes = run.harness.workspace / "report.txt"
        notes.parent.mkdir(parents=True, exist_ok=True)
        notes.write_text("report\n")
        run.replies["fr01z"] = f"MEDIA: {notes}"
        await run.adapter.inject(DM, "report please fr01z", sender_id=USER)
        await run.wait(lambda: run.adapter.sent_media(DM), what="the file")
        await run.settle()
        assert len(slack.calls_to("files.getUploadURLExternal")) == 1
        assert len(slack.calls_to("upload")) == 1
        assert len(slack.calls_to("files.completeUploadExternal")) == 2
        assert run.adapter.sent_media(DM) == [("file", "report.txt")]


async def test_a_missing_files_write_scope_is_named_in_the_chat(tmp_path):
    """openclaw/openclaw#44544: file sends failing with missing_scope, unexplained."""
    async with slack_run(tmp_path) as run:
        slack = run.adapter.slack
        slack.app.scopes.discard("files:write")
        notes = run.harness.workspace / "notes.txt"
        notes.parent.mkdir(parents=True, exist_ok=True)
        notes.write_text("x\n")
        run.replies["ms01z"] = f"MEDIA: {notes}"
        await run.adapter.inject(DM, "the file ms01z", sender_id=USER)
        await run.wait(lambda: any("upload failed" in t for t in run.texts(DM)),
                       what="the failure in the chat", state=lambda: run.texts(DM))
        [note] = [t for t in run.texts(DM) if "upload failed" in t]
        assert "notes.txt" in note and "files:write" in note


# -- outbound ----------------------------------------------------------------------------------


async def test_a_post_whose_answer_was_lost_is_not_posted_again(tmp_path):
    """openclaw/openclaw#22780: the same chat.postMessage twice ~77 ms apart, an SDK retry
    after a lost answer. The kernel decides, and "delivery unknown" is never repeated."""
    async with slack_run(tmp_path) as run:
        slack = run.adapter.slack
        slack.drop_next("chat.postMessage", after_processing=True)
        await run.adapter.inject(DM, "once only dp01z", sender_id=USER)
        await run.wait(lambda: answered(run, DM, "dp01z"), what="the post")
        await run.settle()
        # The chat's sends go in order: a retry of the first would come before the next.
        await run.adapter.inject(DM, "the next dp02z", sender_id=USER)
        await run.wait(lambda: answered(run, DM, "dp02z"), what="the next post")
        await run.settle()
        assert len(answered(run, DM, "dp01z")) == 1
        assert len(slack.calls_to("chat.postMessage")) == 2
        assert await run.harness.outbox_statuses() == ["unknown", "sent"]
        notes = await run.harness.session_log(f"slack:main:{DM}", roles=("notification",))
        assert any("unknown" in n.text for n in notes), [n.text for n in notes]


@pytest.mark.slow
async def test_slack_sdks_default_retry_handlers_would_post_twice(tmp_path):
    """The failure above, reproduced with slack_sdk's defaults against the same fake:
    why the channel's client runs with retry_handlers=[]."""
    from slack_sdk.web.async_client import AsyncWebClient

    async with FakeSlack() as slack, aiohttp.ClientSession() as session:
        slack.inject_message(DM, "hi", user=USER)
        client = AsyncWebClient(token=slack.bot_token, base_url=f"{slack.base_url}/api/",
                                session=session)  # its default retry handlers
        slack.drop_next("chat.postMessage", after_processing=True)
        await client.chat_postMessage(channel=DM, text="posted twice")
        assert [m.text for m in slack.sent(DM)] == ["posted twice", "posted twice"]
        ours = SlackAPI(slack.bot_token, f"{slack.base_url}/api/")
        try:
            slack.drop_next("chat.postMessage", after_processing=True)
            with pytest.raises(PlatformError) as info:
                await ours.call("chat.postMessage",
                                lambda c: c.chat_postMessage(channel=DM, text="once"))
            assert info.value.kind == "no_answer" and not info.value.repeatable
            assert [m.text for m in slack.sent(DM)].count("once") == 1
        finally:
            await ours.close()


async def test_markdown_becomes_mrkdwn_and_plain_text_is_escaped(tmp_path):
    async with slack_run(tmp_path) as run:
        slack = run.adapter.slack
        run.replies["mk01z"] = "**bold** and [a link](https://example.com) mk01z"
        await run.adapter.inject(DM, "format mk01z", sender_id=USER)
        await run.wait_for_tokens(DM, ["mk01z"])
        sent = slack.sent(DM)[-1]
        assert sent.text == "*bold* and <https://example.com|a link> mk01z" and sent.mrkdwn
        # Plain text (notes, command answers) still gets Slack's escapes: no stray pings.
        await run.harness.send_text("slack", DM, "ping <!channel> & co", fmt="plain")
        await run.wait(lambda: len(slack.sent(DM)) == 2, what="the plain text")
        plain = slack.sent(DM)[-1]
        assert plain.text == "ping &lt;!channel&gt; &amp; co" and not plain.mrkdwn


async def test_markup_slack_refuses_is_resent_as_plain_text(tmp_path):
    async with slack_run(tmp_path) as run:
        slack = run.adapter.slack
        slack.fail_next("chat.postMessage", "invalid_blocks")
        run.replies["pf01z"] = "**bold** <b> pf01z"
        await run.adapter.inject(DM, "plain please pf01z", sender_id=USER)
        await run.wait(lambda: slack.sent(DM), what="the plain resend")
        await run.settle()
        posts = slack.calls_to("chat.postMessage")
        assert [c.error.error if c.error else None for c in posts] == ["invalid_blocks", None]
        assert posts[0].params["mrkdwn"] is True and posts[1].params["mrkdwn"] is False
        [sent] = slack.sent(DM)
        assert sent.text == "bold &lt;b&gt; pf01z"  # the kernel's plain text, escaped


async def test_markdown_that_renders_to_nothing_is_sent_as_written(tmp_path):
    """A reply whose mrkdwn is empty (a dangerous link alone) would be refused (no_text)."""
    async with slack_run(tmp_path) as run:
        slack = run.adapter.slack
        run.replies["pe01z"] = "![](javascript:alert(1))"
        await run.adapter.inject(DM, "nothing pe01z", sender_id=USER)
        await run.wait(lambda: slack.sent(DM), what="the post")
        await run.settle()
        [post] = slack.calls_to("chat.postMessage")
        assert post.status == 200 and post.params["mrkdwn"] is False
        assert slack.sent(DM)[0].text == "![](javascript:alert(1))"


async def test_long_replies_are_chunks_of_at_most_4000_characters_in_order(tmp_path):
    async with slack_run(tmp_path) as run:
        words = [f"w{n:05d}" for n in range(1500)]
        run.replies["lg01z"] = " ".join(words)
        await run.adapter.inject(DM, "a lot lg01z", sender_id=USER)
        await run.wait(lambda: sum(len(t.split()) for t in run.texts(DM)) >= 1500,
                       what="the whole reply")
        texts = run.texts(DM)
        assert len(texts) >= 3 and all(len(t) <= 4000 for t in texts)
        assert " ".join(texts).split() == words


@pytest.mark.slow
async def test_a_429_is_waited_out_and_the_message_posted_once(tmp_path):
    async with slack_run(tmp_path) as run:
        slack = run.adapter.slack
        slack.fail_next_with_retry_after("chat.postMessage", 1)
        started = time.monotonic()
        await run.adapter.inject(DM, "eventually rl01z", sender_id=USER)
        await run.wait_for_tokens(DM, ["rl01z"])
        waited = time.monotonic() - started
        await run.settle()
        assert len(answered(run, DM, "rl01z")) == 1
        assert [c.status for c in slack.calls_to("chat.postMessage")] == [429, 200]
        assert waited >= 0.9, "Retry-After was not honoured"


@pytest.mark.slow
async def test_pacing_keeps_a_busy_channel_under_slacks_limit(tmp_path):
    """About one message a second per channel: paced by the kernel, no 429 at all."""
    async with slack_run(tmp_path, channel={"rate_limits": None}) as run:
        slack = run.adapter.slack
        slack.enforce_limits(per_channel_per_second=1)
        run.replies["pc01z"] = "\n\n".join(f"part {n} pc01z " + "x " * 1990 for n in range(3))
        await run.adapter.inject(DM, "three parts pc01z", sender_id=USER)
        await run.wait(lambda: len(run.texts(DM)) >= 3, what="three messages",
                       state=lambda: len(run.texts(DM)))
        assert slack.throttled == 0


@pytest.mark.slow
async def test_300_messages_under_every_limit_get_no_429_and_long_turns_show_the_status(
        tmp_path):
    """Slack's limits enforced (chat.postMessage per channel and per workspace,
    assistant.threads.setStatus per workspace) and the channel's default pacing: 300
    messages over 30 DMs get no 429 on any method. The turns that take long show the
    working status; those whose reply is already on its way need not.

    Both sides count Slack's windows on one clock ten times faster than real time, so the
    minute over which the channel's account limit (300 a minute) spreads the 304 posts
    (four "still working" notices among them) passes in about six seconds, every limit
    enforced at its real figure by the kernel and by the fake alike."""
    chats = [f"D0LIMIT{c:03d}" for c in range(30)]
    slow = chats[:4]  # as many as turns run at once (queue.max_concurrent)
    clock = ScaledClock(10)
    async with slack_run(tmp_path, channel={"rate_limits": None}, rate_clock=clock) as run:
        slack = run.adapter.slack
        slack.enforce_limits()
        run.agent.gate = anyio.Event()
        for chat in slow:
            slack.inject_message(chat, f"slow in {chat} lim01z", user=USER)
        await run.wait(lambda: all(slack.status_calls(chat) for chat in slow),
                       what="the status of every long turn",
                       state=lambda: [chat for chat in slow if not slack.status_calls(chat)])
        run.agent.gate.set()
        for i in range(10):
            for chat in chats:
                if not (i == 0 and chat in slow):
                    slack.inject_message(chat, f"message {i} in {chat} lim01z", user=USER)

        def replies() -> list[str]:
            return [t for t in slack.texts() if t.startswith("re: ") and "lim01z" in t]

        # A minute of the shared clock and more, about 6 real seconds.
        await wait_until(lambda: len(replies()) >= 300, timeout=120, check=run.check_loop,
                         what="300 replies", state=lambda: len(replies()))
        await run.settle()
        refused = collections.Counter(call.method for call in slack.calls
                                      if call.status == 429)
        assert refused == {}, f"429s by method: {dict(refused)}"
        assert slack.throttled == 0
        assert len(replies()) == len(set(replies())) == 300  # each answered once
        # More posts than the channel's account limit (300 a minute) lets through at
        # once: the pacing spread them over more than a minute of the shared clock.
        assert len([c for c in slack.calls if c.method == "chat.postMessage"]) > 300
        for chat in slow:  # the status was set, then cleared by the reply
            assert [s.status for s in slack.status_calls(chat)][:1] == ["is thinking…"]


async def test_the_working_status_shows_while_a_turn_runs_and_is_cleared(tmp_path):
    async with slack_run(tmp_path) as run:
        slack = run.adapter.slack
        run.agent.gate = anyio.Event()
        ts = slack.inject_message(DM, "think ws01z", user=USER)
        await run.wait(lambda: slack.status_calls(DM), what="the status")
        assert slack.status_calls(DM)[0].thread_ts == ts
        assert slack.status_calls(DM)[0].status == "is thinking…"
        run.agent.gate.set()
        await run.wait_for_tokens(DM, ["ws01z"])
        await run.wait(lambda: slack.status_calls(DM)[-1].status == "",
                       what="the status cleared after the top-level reply")


async def test_a_reply_posted_at_once_sets_no_working_status(tmp_path):
    """Issue 31: a status set for a turn that replies at once would be cleared by the
    reply a moment later: two setStatus calls the user never sees. The turns below reply
    within the channel's indicator_delay, 100 at once; none sets a status (sets and
    clears: none)."""
    async with slack_run(tmp_path) as run:
        slack = run.adapter.slack
        await connected(run)
        chats = [f"D0QUICK{c:03d}" for c in range(20)]
        for n in range(5):
            for chat in chats:
                slack.inject_message(chat, f"quick {n} in {chat} qk01z", user=USER)
        await run.wait(lambda: all(len(answered(run, chat, "qk01z")) == 5 for chat in chats),
                       what="every reply")
        await run.settle()
        assert [s for s in slack.statuses if s.channel in chats] == []


# -- health and secrets ------------------------------------------------------------------------


async def test_the_probe_names_the_team_and_bot_and_what_to_do_about_a_refused_token(tmp_path):
    async with slack_run(tmp_path) as run:
        slack = run.adapter.slack
        result = await run.probe()
        assert result.ok and result.detail == "Fake Workspace as @chatkernel"
        assert result.extra["team_id"] == slack.app.team_id
        assert result.extra["user_id"] == slack.bot_user and result.latency_ms is not None
        slack.revoke()
        refused = await run.probe()
        assert not refused.ok and not refused.restartable
        assert "bot_token" in refused.detail and "token_revoked" in refused.detail
        assert "reinstall" in refused.detail
        slack.app.revoked = False
        slack.app.bot_token = "xoxb-0-0-rotated"  # the configured token is now unknown
        unknown = await run.probe()
        assert not unknown.ok and "invalid_auth" in unknown.detail


async def test_tokens_never_appear_in_errors_reprs_or_logs(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    closed = free_port()
    # A refused connection fails the send at once here (the gateway would wait it out).
    retry = {"attempts": 3, "base_delay_ms": 10, "jitter": 0, "unreachable_max_age": "0"}
    async with slack_run(tmp_path, channel={"retry": retry}) as run:
        slack = run.adapter.slack
        secrets = (slack.bot_token, slack.app_token)
        assert not any(s in repr(run.channel.config) for s in secrets)
        await run.adapter.inject(DM, "hello tk01z", sender_id=USER)
        await run.wait_for_tokens(DM, ["tk01z"])
        await run.channel.api.close()
        run.channel.api = SlackAPI(slack.bot_token, f"http://127.0.0.1:{closed}/api/")
        result = await run.probe()
        assert not result.ok and not any(s in result.detail for s in secrets)
        await run.harness.send_text("slack", DM, "hi")
        await run.settle()
        notes = await run.harness.session_log(f"slack:main:{DM}", roles=("notification",))
        assert notes and not any(s in n.text for s in secrets for n in notes)
    assert not any(s in caplog.text for s in secrets)


def test_the_secret_patterns_match_every_kind_of_slack_token():
    import re

    for token in ("xoxb-17653672481-19874698323-pdFZKVeTuE8sk7oOcBrzbqgy",
                  "xoxp-1234-5678-90123-abcdef0123456789", "xoxe-1-My0xLTIzNDU2Nzg5",
                  "xapp-1-A0123456789-1234567890123-0123456789abcdef"):
        line = f"request with Bearer {token} failed"
        redacted = line
        for pattern in TOKEN_PATTERNS:
            redacted = re.sub(pattern, "***", redacted)
        assert token not in redacted, token


# -- several workspaces --------------------------------------------------------------------------


async def test_several_workspaces_at_once_each_answer_with_their_own_app(tmp_path):
    async with FakeSlack() as slack:
        second = slack.add_app(team_name="Other Workspace", bot_name="other")
        agent = scripted_agent()
        accounts = {name: {"bot_token": app.bot_token, "app_token": app.app_token,
                           "api_base": f"{slack.base_url}/api/", "allow_from": ["*"]}
                    for name, app in (("one", slack.app), ("two", second))}
        config = {"agent": {"kind": agent.name}, "queue": {"mode": "followup", "debounce_ms": 0},
                  "channels": {"slack": {"accounts": accounts,
                                         "rate_limits": {"chat": "100/s", "account": "1000/s"}}}}
        async with KernelHarness(tmp_path, config=config, plugins=[
                ("slack", chatkernel_slack), ("agent", agent_plugin(agent))]) as h:
            async with anyio.create_task_group() as tg:
                for name in ("one", "two"):
                    tg.start_soon(h.receive_loop, "slack", name)
                slack.inject_message("D0DIRECTAA", "to one", user=USER)
                slack.inject_message("D0DIRECTBB", "to two", user=USER, app=second)
                await slack.wait_until(lambda: len(slack.sent()) == 2, timeout=10)
                tg.cancel_scope.cancel()
        assert [m.text for m in slack.sent(app=slack.app)] == ["re: to one"]
        assert [m.text for m in slack.sent(app=second)] == ["re: to two"]
        assert {m.channel for m in slack.sent(app=second)} == {"D0DIRECTBB"}

