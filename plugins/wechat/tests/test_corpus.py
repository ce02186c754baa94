"""Messages from the test data of Tencent's own iLink client (tests/data/corpus/README.md),
served by the fake gateway's getupdates and read by the channel's own poll: none raises
or is refused as unreadable; a message with something said comes in as exactly one
message; one whose items the channel cannot read is logged as not answered, naming
them; one with no items at all is no message."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from chatkernel.testing import open_contract_run
from chatkernel_wechat.contract import WeChatAdapter

pytestmark = pytest.mark.anyio

CORPUS = json.loads((Path(__file__).parent / "data" / "corpus" / "messages.json").read_text())


@pytest.mark.parametrize("entry", CORPUS, ids=[entry["name"] for entry in CORPUS])
async def test_a_captured_message_is_read_as_the_platform_meant_it(tmp_path, caplog, entry):
    caplog.set_level(logging.INFO)
    async with WeChatAdapter() as adapter:
        async with open_contract_run(adapter, tmp_path / "kernel") as run:
            served = adapter.ilink.inject_captured(entry["message"])
            await run.wait(lambda: adapter.ilink.acked == len(adapter.ilink.updates),
                           what="the message acknowledged by the next poll")
            await run.settle()
            delivered = [message for message, _ in run.deliveries]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
    not_answered = [r.getMessage() for r in caplog.records if "not answered" in r.getMessage()]
    outcome = ("message" if len(delivered) == 1 and not not_answered else
               "not answered" if not delivered and len(not_answered) == 1 else
               "none" if not delivered and not not_answered else
               f"{len(delivered)} messages, {len(not_answered)} not answered")
    assert outcome == entry["expect"], (outcome, delivered, not_answered)
    if delivered:
        (message,) = delivered
        assert message.message_id == str(served["message_id"])
        assert message.chat_id == message.sender_id == served["from_user_id"]
