"""A field Telegram sends as JSON ``null`` reads as the field left out, at any depth: an
Update written by a bridge or a library that serializes its empty fields is answered like
Telegram's own, never skipped."""

from __future__ import annotations

import logging
import time

import pytest

from chatkernel.testing import open_contract_run
from telegram_adapters import TelegramAdapter

pytestmark = pytest.mark.anyio

CHAT = 4242
USER = {"id": CHAT, "is_bot": False, "first_name": "Ada", "last_name": None,
        "username": None, "language_code": None}
#: Every optional field of a text message, null.
NULL_FIELDS = {
    "photo": None, "document": None, "voice": None, "audio": None, "video": None,
    "animation": None, "video_note": None, "sticker": None, "caption": None,
    "entities": None, "caption_entities": None, "reply_to_message": None,
    "message_thread_id": None, "is_topic_message": None, "forward_origin": None,
    "edit_date": None, "via_bot": None, "sender_chat": None,
}


def message(n: int, text: str, **fields) -> dict:
    return {"message_id": n, "date": int(time.time()), "from": USER,
            "chat": {"id": CHAT, "type": "private", "first_name": "Ada", "title": None},
            "text": text, **fields}


UPDATES = {
    "every optional field null": {"message": message(1, "all null nf01z", **NULL_FIELDS)},
    "a null entity's offset": {"message": message(2, "/start nf02z", entities=[
        {"type": "bot_command", "offset": None, "length": 6, "user": None}])},
    "a reply to a message whose sender is null": {"message": message(
        3, "a reply nf03z", reply_to_message={"message_id": 1, "date": 0, "from": None,
                                              "chat": {"id": CHAT, "type": "private"}})},
    "null update kinds beside the message": {
        "message": message(4, "beside nf04z"), "edited_message": None,
        "callback_query": None, "my_chat_member": None},
}


@pytest.mark.parametrize("name", UPDATES)
async def test_an_update_with_null_fields_is_answered_like_one_without_them(
        tmp_path, caplog, name):
    caplog.set_level(logging.WARNING)
    update = UPDATES[name]
    token = update["message"]["text"].split()[-1]
    async with TelegramAdapter() as adapter:
        async with open_contract_run(adapter, tmp_path / "kernel") as run:
            adapter.api.inject_update(update)
            await run.wait_for_tokens(str(CHAT), [token])
            await run.settle()
            assert run.agent_texts() == [update["message"]["text"]]
    assert "skipped" not in caplog.text


async def test_null_update_kinds_alone_are_no_message_and_no_error(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    async with TelegramAdapter() as adapter:
        async with open_contract_run(adapter, tmp_path / "kernel") as run:
            adapter.api.inject_update({"message": None, "edited_message": None})
            adapter.api.inject_update({"message": message(9, "after nf09z")})
            await run.wait_for_tokens(str(CHAT), ["nf09z"])
            await run.settle()
            assert run.agent_texts() == ["after nf09z"]
    assert "skipped" not in caplog.text
