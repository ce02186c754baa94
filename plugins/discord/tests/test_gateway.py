"""The gateway connection: heartbeats, reconnects, resumes, invalid sessions and the fatal
close codes, against the fake Discord, each of "Discord" in the peers' known failures
among them (a resume loop that never ends, no reconnect after a 1006, a reconnect racing
a heartbeat, messages lost in the reconnect window, a dead gateway host feeding the
loop). Most begin with the gateway up (the ``up`` fixture, conftest.py); timers run on a
ManualClock (the ``clock`` fixture) where the test is about them."""

from __future__ import annotations

import logging

import pytest

from chatkernel.testing import ManualClock
from discord_runs import USER, discord_run, gateway_up, replies

pytestmark = pytest.mark.anyio
INTERVAL = 41.25  # the fake's heartbeat interval, seconds


async def advance_until(run, clock: ManualClock, done, what: str, steps: int = 40) -> list[float]:
    """Move the clock to each next sleeper's deadline until ``done()``; the waits seen.
    After each move, a heartbeat that went out is given its (real-time) ACK before the
    clock moves on: a clock faster than the loopback would make every connection a zombie."""
    waits = []
    gateway = run.channel.gateway
    for _ in range(steps):
        if done():
            return waits
        deadline = await clock.sleeper(after=clock.now())
        waits.append(deadline - clock.now())
        clock.set(deadline)
        await run.settle()
        await run.wait(lambda: gateway.heartbeat is None or gateway.heartbeat.acked
                       or gateway.state == "reconnecting", what="the heartbeat's ACK")
    assert done(), f"not {what} after {steps} waits: {waits}"
    return waits


async def answered_once(run, chat: str, tokens: list[str]) -> None:
    await run.wait_for_tokens(chat, tokens)
    await run.settle()
    for token in tokens:
        assert len(replies(run, chat, token)) == 1, (token, run.texts(chat))
        assert sum(token in text for text in run.agent_texts()) == 1, run.agent_texts()


async def test_op_7_resumes_on_the_resume_url_and_loses_and_repeats_nothing(up):
    run, discord, chat = up.run, up.discord, up.chat
    discord.reconnect()
    for n in range(2, 6):  # sent while the bot reconnects: replayed by the RESUME
        discord.inject_message(chat, f"during re0{n}z", author=USER, dm=True)
    await answered_once(run, chat, [up.first, *(f"re0{n}z" for n in range(2, 6))])
    (resume,) = discord.resumes()
    assert resume.path == "/resume"
    assert len(discord.identifies()) == 1
    assert up.gateway.resumes == 1


async def test_a_withheld_heartbeat_ack_is_a_zombie_resumed_without_loss(up, clock):
    run, discord, chat, gateway = up.run, up.discord, up.chat, up.gateway
    discord.zombie()
    discord.inject_message(chat, "into the void zb02z", author=USER, dm=True)
    clock.advance(INTERVAL)  # the first beat (jittered) goes out, never acknowledged
    await run.wait(lambda: gateway.heartbeat.beats == 1, what="the first beat")
    assert discord.resumes() == []
    clock.advance(INTERVAL)  # the next is due with no ACK: a zombie
    await answered_once(run, chat, [up.first, "zb02z"])
    assert len(discord.resumes()) == 1 and len(discord.identifies()) == 1
    closed = discord.connections[0]
    assert closed.closed_by_client == 4000  # not 1000/1001, which would end the session


async def test_op_9_resumable_resumes_and_loses_nothing(up):
    run, discord, chat = up.run, up.discord, up.chat
    discord.invalidate(resumable=True)
    discord.inject_message(chat, "meanwhile iv02z", author=USER, dm=True)
    await answered_once(run, chat, [up.first, "iv02z"])
    assert len(discord.resumes()) == 1 and len(discord.identifies()) == 1


@pytest.fixture
def logged(caplog):
    """The channel's log, from INFO up (set before the run starts)."""
    caplog.set_level(logging.INFO, logger="chatkernel.discord")
    return caplog


async def test_op_9_not_resumable_identifies_afresh_after_one_to_five_seconds(logged, up,
                                                                             clock):
    run, discord, chat, gateway = up.run, up.discord, up.chat, up.gateway
    discord.invalidate(resumable=False)
    await run.wait(lambda: gateway.state == "reconnecting", what="the end of the session")
    wait = await clock.sleeper(after=clock.now())
    assert 1.0 <= wait - clock.now() <= 5.0
    await advance_until(run, clock, lambda: len(discord.identifies()) == 2,
                        "identified afresh")
    await up.adapter.inject(chat, "after is02z", sender_id=USER)
    await answered_once(run, chat, [up.first, "is02z"])
    assert discord.resumes() == []
    assert any("a new gateway session after the last one was lost" in r.getMessage()
               and "was not replayed" in r.getMessage() for r in logged.records)


async def test_a_restart_of_the_gateway_resumes_the_session_it_kept(up):
    run, discord, chat = up.run, up.discord, up.chat
    await run.stop_loop()
    discord.inject_message(chat, "while stopped rs02z", author=USER, dm=True)
    await run.start_loop()
    await answered_once(run, chat, [up.first, "rs02z"])
    assert len(discord.identifies()) == 1 and len(discord.resumes()) == 1


# -- the peers' failures --------------------------------------------------------------------


async def test_failed_resumes_back_off_with_jitter_then_identify_afresh(logged, up, clock):
    """openclaw#20668 and others: RESUME retried every second for hours after a 1006,
    never falling back to IDENTIFY, the bot online and deaf."""
    run, discord, chat = up.run, up.discord, up.chat
    discord.failing_resumes = 1000  # every RESUME dropped, as a 1006
    discord.close(None)
    await advance_until(run, clock, lambda: len(discord.identifies()) == 2,
                        "identified afresh")
    waits = [wait for wait, _ in up.gateway.waited]
    assert len(discord.resumes()) == 3  # a few tries, then a new session
    # Each wait after the first quick one is jittered and longer than the one before.
    assert 0.5 <= waits[0] <= 1.0 and 1.0 <= waits[1] <= 2.0 and 2.0 <= waits[2] <= 4.0, \
        waits
    # Meanwhile health said so, with the count (reported from the second try on).
    said = [r.getMessage() for r in logged.records if "reconnecting (" in r.getMessage()]
    assert any("reconnecting (2)" in line for line in said), said
    await up.adapter.inject(chat, "after rl02z", sender_id=USER)
    await answered_once(run, chat, [up.first, "rl02z"])


async def test_a_server_side_1006_reconnects_inside_the_channel_and_turns_go_on(up):
    """openclaw#99681: no reconnect after a 1006 until the whole gateway restarted, killing
    the turns in flight."""
    import anyio

    run, discord, chat = up.run, up.discord, up.chat
    run.agent.gate = anyio.Event()
    await up.adapter.inject(chat, "a long one ab01z", sender_id=USER)
    await run.wait(lambda: run.agent.running == 1, what="the turn to start")
    discord.close(None)  # no close frame: 1006 on the client
    await run.wait(lambda: len(discord.resumes()) == 1, what="the resume")
    discord.inject_message(chat, "after the drop ab02z", author=USER, dm=True)
    run.agent.gate.set()
    await answered_once(run, chat, [up.first, "ab01z", "ab02z"])
    assert not run.account.runtime.restarts


async def test_op_7_a_missed_ack_and_a_close_at_once_end_the_connection_once(up, clock):
    """openclaw#18410: a reconnect racing the heartbeat crashed the process ("Attempted
    to reconnect zombie connection"). One owner ends the connection, once."""
    run, discord, chat, gateway = up.run, up.discord, up.chat, up.gateway
    clock.advance(INTERVAL)
    await run.wait(lambda: gateway.heartbeat.beats == 1, what="the first beat")
    discord.zombie()
    discord.reconnect()
    discord.close(4000)
    clock.advance(INTERVAL)  # and the missed ACK, all at once
    await run.wait(lambda: len(discord.resumes()) == 1, what="the resume")
    await up.adapter.inject(chat, "after rc02z", sender_id=USER)
    await answered_once(run, chat, [up.first, "rc02z"])
    assert len(discord.connections) == 2, [c.path for c in discord.connections]
    run.check_loop()


async def test_a_gateway_host_that_stopped_answering_is_asked_for_again(up, clock):
    """openclaw#13910: DNS failures for the cached gateway host fed the reconnect loop.
    After a few failed connections the channel asks GET /gateway/bot again."""
    run, discord, chat = up.run, up.discord, up.chat
    discord.expire_sessions()
    discord.move_gateway()  # the URL the channel cached now fails
    discord.close(None)
    await advance_until(run, clock, lambda: len(discord.identifies()) == 2,
                        "a new session on the new URL")
    assert len(discord.calls_to("getGatewayBot")) == 2
    assert discord.identifies()[-1].path == "/gateway/2"
    await up.adapter.inject(chat, "after gw02z", sender_id=USER)
    await answered_once(run, chat, [up.first, "gw02z"])


# -- the fatal closes -------------------------------------------------------------------------


async def test_4004_turns_the_account_red_naming_the_token_and_does_not_loop(tmp_path,
                                                                            caplog, clock):
    caplog.set_level(logging.DEBUG)
    async with gateway_up(tmp_path, clock=clock) as up:
        run, discord = up.run, up.discord
        token = discord.bot.token
        discord.reconnect()
        await run.wait(lambda: len(discord.resumes()) == 1, what="the resume")
        discord.revoke()  # the token was reset: the gateway closes 4004, REST answers 401
        runtime = run.account.runtime
        await run.wait(lambda: runtime.state == "failed", what="the refusal",
                       state=lambda: (runtime.state, runtime.detail))
        assert "Discord refused the bot token" in runtime.detail
        assert "channels.discord.accounts.main.token" in runtime.detail
        assert "Reset Token" in runtime.detail
        deadline = await clock.sleeper(after=clock.now())
        assert deadline - clock.now() >= 60  # the next try is a minute away, not a loop
        connections, calls = len(discord.connections), len(discord.calls)
        clock.set(deadline)
        await run.wait(lambda: len(discord.calls) > calls, what="the next try")
        await run.settle()
        # The next try asks REST whether the token works before opening the gateway.
        assert len(discord.connections) == connections
        assert await clock.sleeper(after=clock.now()) - clock.now() >= 60
    # Through a whole run (IDENTIFY, RESUME, a 401 and a 4004), no log line holds the token.
    assert caplog.records
    for record in caplog.records:
        text = record.getMessage() + (record.exc_text or "") + repr(record.args)
        assert token not in text and token.split(".")[2] not in text, record.getMessage()


async def test_4014_names_the_message_content_intent_and_where_to_turn_it_on(tmp_path, clock):
    async with discord_run(tmp_path, clock=clock) as run:
        adapter, discord = run.adapter, run.adapter.discord
        discord.bot.privileged = set()  # not turned on in the Developer Portal
        runtime = run.account.runtime
        await run.wait(lambda: runtime.state == "failed", what="the refusal",
                       state=lambda: (runtime.state, runtime.detail))
        assert "4014" in runtime.detail and "Message Content Intent" in runtime.detail
        assert "Developer Portal" in runtime.detail and "Privileged Gateway Intents" in \
            runtime.detail
        assert await clock.sleeper(after=clock.now()) - clock.now() >= 60
        assert len(discord.identifies()) == 1
        discord.bot.privileged = {"MESSAGE_CONTENT"}  # turned on: works at the next try
        await advance_until(run, clock, lambda: runtime.state == "running",
                            "running again", steps=5)
        chat = adapter.direct_chat(1)
        await adapter.inject(chat, "hello mc01z", sender_id=USER)
        await answered_once(run, chat, ["mc01z"])


@pytest.mark.parametrize(("code", "words"), [
    (4010, "sharding"), (4011, "sharding"), (4012, "API v10"), (4013, "no gateway intent")])
async def test_the_other_fatal_closes_are_explained_and_not_looped(tmp_path, clock, code,
                                                                   words):
    async with discord_run(tmp_path, clock=clock) as run:
        discord = run.adapter.discord
        discord.identify_close = code
        runtime = run.account.runtime
        await run.wait(lambda: runtime.state == "failed", what="the refusal",
                       state=lambda: (runtime.state, runtime.detail))
        assert str(code) in runtime.detail and words in runtime.detail, runtime.detail
        assert await clock.sleeper(after=clock.now()) - clock.now() >= 60
        assert len(discord.identifies()) == 1
