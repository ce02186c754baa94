"""Access on Telegram (docs/access.md): a forum topic of an admitted supergroup is
answered in its topic when the bot is mentioned or replied to; a supergroup not admitted
gets nothing, and its members get no pairing code; a stranger in private does. Through
the fake Bot API and the real kernel."""

from __future__ import annotations

import pytest
from telegram_adapters import TelegramAdapter

from chatkernel.testing import open_contract_run

pytestmark = pytest.mark.anyio


@pytest.fixture
async def adapter():
    async with TelegramAdapter() as adapter:
        yield adapter


async def test_a_topic_of_an_admitted_group_follows_the_mention_rule(adapter, tmp_path):
    group, topic, user = adapter.group_chat(1), adapter.thread_id(1), adapter.user_id(1)
    async with open_contract_run(adapter, tmp_path, allow_from=[f"chat:{group}"]) as run:
        await adapter.inject(group, "chatter ta01z", sender_id=user, group=True,
                             thread_id=topic)
        await adapter.inject(group, "bot? ta02z", sender_id=user, group=True, mention=True,
                             thread_id=topic)
        await run.wait_for_tokens(group, ["ta02z"], thread_id=topic)
        await run.settle()
        assert run.tokens_sent(group, ["ta01z", "ta02z"], thread_id=topic) == ["ta02z"]
        assert f"thread: {topic}" in run.turn_for("ta02z").envelope


async def test_a_group_not_admitted_gets_nothing_and_a_private_stranger_a_code(adapter,
                                                                              tmp_path):
    group, user = adapter.group_chat(2), adapter.user_id(2)
    async with open_contract_run(adapter, tmp_path, allow_from=[adapter.user_id(9)]) as run:
        await adapter.inject(group, "hello tb01z", sender_id=user, group=True, mention=True,
                             thread_id=adapter.thread_id(2))
        await adapter.inject(adapter.direct_chat(2), "hello tb02z", sender_id=user)
        await run.wait(lambda: run.texts(adapter.direct_chat(2)), what="a pairing code")
        await run.settle()
        assert run.texts(group) == [] and run.agent_texts() == []
        (request,) = await run.harness.pairing_requests("telegram")
        assert (request.sender, request.chat) == (user, adapter.direct_chat(2))
        assert request.code in run.texts(adapter.direct_chat(2))[0]
