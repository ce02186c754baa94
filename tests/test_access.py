"""Access control on the MemoryChannel: the DM policies, pairing, groups (docs/access.md)."""

from __future__ import annotations

import re

import pytest

from chatkernel.core.inbound.access import CODE_ALPHABET, MAX_PENDING, decide
from chatkernel.sdk.accounts import AccountConfig
from chatkernel.sdk.models import InboundMessage
from chatkernel.testing import KernelHarness, ManualClock, scripted_agent
from chatkernel.testing.agents import agent_plugin

pytestmark = pytest.mark.anyio

CODE = re.compile(rf"\b([{CODE_ALPHABET}]{{8}})\b")


def harness(home, account=None, *, agent=None, clock=None):
    config = {"channels": {"memory": {"accounts": {"main": account or {}}}}}
    plugins = [("agent", agent_plugin(agent))] if agent is not None else []
    if agent is not None:
        config["agent"] = {"kind": agent.name}
    return KernelHarness(home, config=config, plugins=plugins, channel_clock=clock)


def codes(texts):
    """The code each text gives (the first of its eight-character words)."""
    return [found.group(1) for found in map(CODE.search, texts) if found]


async def test_a_stranger_gets_a_code_and_never_reaches_the_agent(tmp_path):
    agent, clock = scripted_agent(), ManualClock()
    async with harness(tmp_path, {"allow_from": ["owner"]}, agent=agent, clock=clock) as h:
        assert await h.channel.receive("secret plans", sender_id="stranger",
                                       chat_id="dm-stranger", sender_name="Mallory") == \
            "rejected"
        await h.settle()
        texts = h.channel.texts("dm-stranger")
        assert len(texts) == 1
        (code,) = codes(texts)
        assert f"chatkernel pairing approve memory {code}" in texts[0]
        assert "allow_from" not in texts[0]  # the code replaces "your id is"
        (request,) = await h.pairing_requests()
        assert (request.code, request.channel, request.account, request.sender, request.name,
                request.chat) == (code, "memory", "main", "stranger", "Mallory", "dm-stranger")
        assert request.expires_at - request.created_at == 3600
        assert request.created_at == clock.now()
        assert agent.requests == []
        # Their words are kept nowhere: not in a session, not in the journal.
        assert await h.session_keys() == []
        store = h.kernel.store
        await store.flush()
        rows = store._db.execute("SELECT message FROM inbound_journal").fetchall()
        assert rows and not any("secret plans" in row[0] for row in rows)


async def test_the_code_is_reused_and_sent_again_at_most_once_a_minute(tmp_path):
    clock = ManualClock()
    async with harness(tmp_path, clock=clock) as h:
        for _ in range(5):
            await h.channel.receive("hello?", sender_id="s1", chat_id="c1")
        await h.settle()
        assert len(h.channel.texts("c1")) == 1
        clock.advance(59)
        await h.channel.receive("hello??", sender_id="s1", chat_id="c1")
        await h.settle()
        assert len(h.channel.texts("c1")) == 1
        clock.advance(1)
        for _ in range(3):
            await h.channel.receive("anyone?", sender_id="s1", chat_id="c1")
        await h.settle()
        texts = h.channel.texts("c1")
        assert len(texts) == 2 and len(set(codes(texts))) == 1  # the same code, again
        assert len(await h.pairing_requests()) == 1
        # An hour on, the code is gone: a new one comes.
        clock.advance(3600)
        assert await h.pairing_requests() == []
        await h.channel.receive("still here", sender_id="s1", chat_id="c1")
        await h.settle()
        texts = h.channel.texts("c1")
        assert len(texts) == 3 and codes(texts)[2] != codes(texts)[0]


async def test_codes_are_eight_characters_of_the_alphabet(tmp_path):
    async with harness(tmp_path) as h:
        for n in range(MAX_PENDING):
            await h.channel.receive("hi", sender_id=f"s{n}", chat_id=f"c{n}")
        await h.settle()
        for request in await h.pairing_requests():
            assert len(request.code) == 8 and set(request.code) <= set(CODE_ALPHABET)


async def test_at_most_three_pending_and_a_fourth_stranger_gets_nothing(tmp_path):
    clock = ManualClock()
    async with harness(tmp_path, clock=clock) as h:
        for n in range(MAX_PENDING + 2):
            await h.channel.receive("hi", sender_id=f"s{n}", chat_id=f"c{n}")
        await h.settle()
        assert [len(h.channel.texts(f"c{n}")) for n in range(5)] == [1, 1, 1, 0, 0]
        assert sorted(r.sender for r in await h.pairing_requests()) == ["s0", "s1", "s2"]
        # Once one is denied, the next stranger gets a code.
        code = (await h.pairing_requests())[0].code
        await h.pairing_deny("memory", code)
        await h.channel.receive("me too", sender_id="s3", chat_id="c3")
        await h.settle()
        assert len(h.channel.texts("c3")) == 1
        assert len(await h.pairing_requests()) == MAX_PENDING


async def test_approve_admits_at_once_and_revoke_removes_at_once(tmp_path):
    agent, clock = scripted_agent(), ManualClock()
    async with harness(tmp_path, agent=agent, clock=clock) as h:
        await h.channel.receive("let me in", sender_id="alice", chat_id="dm-a")
        await h.settle()
        (request,) = await h.pairing_requests()
        with pytest.raises(LookupError, match="wrong or expired"):
            await h.pairing_approve("memory", "ZZZZZZZZ")
        with pytest.raises(LookupError, match="wrong or expired"):
            await h.pairing_approve("memory", request.code, account="other")
        approved = await h.pairing_approve("memory", request.code.lower())
        assert approved.sender == "alice"
        await h.outbox_idle()
        assert h.channel.texts("dm-a")[-1].startswith("You're in")
        assert [(a.account, a.sender) for a in await h.approved_senders()] == [("main", "alice")]
        assert await h.pairing_requests() == []
        assert await h.channel.receive("hello", sender_id="alice", chat_id="dm-a") == "started"
        await h.settle()
        assert [r.text for r in agent.requests] == ["hello"]
        # The code was spent.
        with pytest.raises(LookupError):
            await h.pairing_approve("memory", request.code)
        assert await h.pairing_revoke("memory", "alice") == "main"
        assert await h.channel.receive("again", sender_id="alice", chat_id="dm-a") == \
            "rejected"
        with pytest.raises(LookupError, match="not approved"):
            await h.pairing_revoke("memory", "alice")


async def test_a_message_refused_while_pending_never_reaches_the_agent_later(tmp_path):
    """A platform that sends a refused message again (a socket reconnecting with it not
    acknowledged, a webhook retried) after the owner approved its sender: the refused
    entry is kept for the dedupe, so the agent never gets it."""
    agent, clock = scripted_agent(), ManualClock()
    async with harness(tmp_path, agent=agent, clock=clock) as h:
        assert await h.channel.receive("still here", sender_id="alice", chat_id="dm-a",
                                       message_id="m-1") == "rejected"
        await h.settle()
        (request,) = await h.pairing_requests()
        await h.pairing_approve("memory", request.code)
        assert await h.channel.receive("still here", sender_id="alice", chat_id="dm-a",
                                       message_id="m-1") == "duplicate"
        assert await h.channel.receive("hello", sender_id="alice", chat_id="dm-a",
                                       message_id="m-2") == "started"
        await h.settle()
        assert [r.text for r in agent.requests] == ["hello"]


async def test_an_expired_code_cannot_be_approved(tmp_path):
    clock = ManualClock()
    async with harness(tmp_path, clock=clock) as h:
        await h.channel.receive("hi", sender_id="late", chat_id="c")
        await h.settle()
        (request,) = await h.pairing_requests()
        clock.advance(3600)
        with pytest.raises(LookupError, match="wrong or expired"):
            await h.pairing_approve("memory", request.code)
        assert await h.approved_senders() == []


async def test_an_approval_survives_a_restart(tmp_path):
    agent = scripted_agent()
    async with harness(tmp_path, agent=agent) as h:
        await h.channel.receive("hi", sender_id="bob", chat_id="c")
        await h.settle()
        (request,) = await h.pairing_requests()
        await h.pairing_approve("memory", request.code)
    async with harness(tmp_path, agent=agent) as h:
        assert await h.channel.receive("back", sender_id="bob", chat_id="c",
                                       message_id="after-restart") == "started"


async def test_allowlist_keeps_the_once_a_day_reply_and_admits_the_approved(tmp_path):
    async with harness(tmp_path, {"allow_from": ["owner"]}) as h:  # pairing, then...
        await h.channel.receive("hi", sender_id="paired", chat_id="c-paired")
        await h.settle()
        (request,) = await h.pairing_requests()
        await h.pairing_approve("memory", request.code)
    async with harness(tmp_path, {"allow_from": ["owner"], "dm_policy": "allowlist"}) as h:
        for n in range(2):  # message ids of their own: the first run's m1... are journaled
            assert await h.channel.receive("hi", sender_id="stranger",
                                           message_id=f"again-{n}") == "rejected"
        await h.settle()
        (text,) = h.channel.texts("chat-1")
        assert "Your id is stranger" in text and codes([text]) == []
        assert await h.pairing_requests() == []
        assert await h.channel.receive("hi", sender_id="owner", chat_id="c2",
                                       message_id="again-2") == "started"
        assert await h.channel.receive("hi", sender_id="paired", chat_id="c-paired",
                                       message_id="again-3") == "started"


async def test_open_admits_everyone_and_disabled_nobody(tmp_path):
    async with harness(tmp_path, {"dm_policy": "open"}) as h:
        assert await h.channel.receive("hi", sender_id="anyone") == "started"
    async with harness(tmp_path / "off", {"dm_policy": "disabled",
                                          "allow_from": ["owner"]}) as h:
        assert await h.channel.receive("hi", sender_id="owner") == "rejected"
        assert await h.channel.receive("hi", sender_id="stranger") == "rejected"
        await h.settle()
        assert h.channel.texts() == []


async def test_a_bare_allow_from_admits_exactly_those_senders(tmp_path):
    async with harness(tmp_path, {"allow_from": ["owner", "friend"]}) as h:
        assert await h.channel.receive("hi", sender_id="owner") == "started"
        assert await h.channel.receive("hi", sender_id="friend", chat_id="c2") == "started"
        assert await h.channel.receive("hi", sender_id="other", chat_id="c3") == "rejected"
    async with harness(tmp_path / "star", {"allow_from": ["*"]}) as h:
        assert await h.channel.receive("hi", sender_id="anyone") == "started"


async def test_a_sender_alias_counts_as_the_sender(tmp_path):
    async with harness(tmp_path, {"allow_from": ["15550001"]}) as h:
        assert await h.channel.receive("hi", sender_id="US.1", sender_aliases=("15550001",)) \
            == "started"


GROUP = {"is_group": True, "chat_id": "g1"}


async def test_a_group_not_admitted_gets_nothing(tmp_path):
    async with harness(tmp_path, {"allow_from": ["owner"]}) as h:
        assert await h.channel.receive("@bot hi", sender_id="stranger", mentions_bot=True,
                                       **GROUP) == "rejected"
        await h.settle()
        assert h.channel.texts() == [] and await h.pairing_requests() == []


async def test_groups_follow_the_policy_and_the_mention_rule(tmp_path):
    agent = scripted_agent()
    account = {"allow_from": ["chat:g1"]}
    async with harness(tmp_path, account, agent=agent) as h:
        assert await h.channel.receive("chatter", sender_id="u", **GROUP) == "rejected"
        assert await h.channel.receive("@bot hi", sender_id="u", mentions_bot=True,
                                       **GROUP) == "started"
        await h.settle()
        assert await h.channel.receive("@bot hi", sender_id="u", mentions_bot=True,
                                       is_group=True, chat_id="g2") == "rejected"
    async with harness(tmp_path / "open", {"group_policy": "open",
                                           "require_mention": False}) as h:
        assert await h.channel.receive("chatter", sender_id="u", **GROUP) == "started"
    async with harness(tmp_path / "off", {"group_policy": "disabled",
                                          "allow_from": ["*"]}) as h:
        assert await h.channel.receive("@bot hi", sender_id="u", mentions_bot=True,
                                       **GROUP) == "rejected"


async def test_group_allow_from_narrows_who_triggers_the_bot(tmp_path):
    account = {"allow_from": ["chat:g1"], "group_allow_from": ["boss"]}
    async with harness(tmp_path, account) as h:
        assert await h.channel.receive("@bot hi", sender_id="intern", mentions_bot=True,
                                       **GROUP) == "rejected"
        assert await h.channel.receive("@bot hi", sender_id="boss", reply_to_bot=True,
                                       **GROUP) == "started"


def test_a_group_never_gets_a_pairing_code():
    config = AccountConfig()
    message = InboundMessage("memory", "main", "g", "1", "stranger", is_group=True,
                             mentions_bot=True)
    verdict = decide(config, message)
    assert not verdict and verdict.stranger == "refused" and verdict.reply is None


async def test_a_thousand_strangers_leave_three_requests_and_no_growth(tmp_path):
    clock = ManualClock()
    async with harness(tmp_path, clock=clock) as h:
        kernel = h.kernel
        db = kernel.store._db

        async def flood(start):
            for n in range(start, start + 500):  # within a minute on the channels' clock
                await h.channel.receive("spam", sender_id=f"x{n}", chat_id=f"x{n}")
                clock.advance(0.05)
            await h.settle()

        def footprint():
            """What a stranger could leave behind: rows of the store, but the journal
            entry each message has for its dedupe, and the kernel's per-chat memory."""
            counts = {table: db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                      for table in ("pairing_requests", "approved_senders", "account_state",
                                    "sessions", "routes", "session_log", "outbox")}
            sessions = kernel.sessions
            return {**counts, "session records": len(sessions._records),
                    "routes": len(sessions._routes), "last chats": len(kernel.inbound._last_chat),
                    "lanes": len(kernel.queue.lanes)}

        await flood(0)
        first = footprint()
        await flood(500)
        assert footprint() == first
        assert first["pairing_requests"] == MAX_PENDING and first["outbox"] == MAX_PENDING
        assert first["account_state"] == 0 and first["sessions"] == 0
        assert len(await h.pairing_requests()) == MAX_PENDING
        assert len(h.channel.sent) == MAX_PENDING  # three codes, nothing else
        journal = db.execute("SELECT message FROM inbound_journal").fetchall()
        assert len(journal) == 1000 and not any("spam" in row[0] for row in journal)


async def test_status_mentions_the_pending_requests(tmp_path):
    from chatkernel.core.health.report import render_status

    async with harness(tmp_path) as h:
        await h.channel.receive("hi", sender_id="s1", chat_id="c1")
        await h.settle()
        snapshot = (await h.health.snapshot()).model_dump(mode="json")
        assert snapshot["sessions"]["pairing_pending"] == 1
        assert "Pairing: 1 request(s) waiting for your approval (chatkernel pairing list)" \
            in render_status(snapshot)
