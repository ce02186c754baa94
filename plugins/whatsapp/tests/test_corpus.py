"""Real webhook notifications, from the public test data of pywa (tests/data/corpus/
README.md), posted signed to the channel's webhook against the fake Graph API, with the
account (and the fake) serving the number each is for: each is answered 200 without an error; a message
someone wrote comes in as exactly one message; any other notification (a status, a
reaction, a system message, an unsupported type) is no message."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import aiohttp
import pytest

from chatkernel.testing import open_contract_run
from chatkernel_whatsapp.fake import MetaSigner
from chatkernel_whatsapp.testing import APP_SECRET, WhatsAppAdapter

pytestmark = pytest.mark.anyio

CORPUS = json.loads((Path(__file__).parent / "data" / "corpus" /
                     "notifications.json").read_text())


def phone_number_id(notification: dict) -> str:
    """The business number the notification is for."""
    return notification["entry"][0]["changes"][0]["value"]["metadata"]["phone_number_id"]


@pytest.mark.parametrize("entry", CORPUS, ids=[entry["name"] for entry in CORPUS])
async def test_a_captured_notification_is_read_as_the_platform_meant_it(tmp_path, caplog,
                                                                         entry):
    caplog.set_level(logging.INFO)
    body = json.dumps(entry["notification"]).encode()
    adapter = WhatsAppAdapter()
    number = phone_number_id(entry["notification"])
    if number.isdigit():  # else a placeholder ("<BUSINESS_PHONE_NUMBER_ID>"): no account's
        adapter.graph.phone_number_id = number
    async with adapter:
        async with open_contract_run(adapter, tmp_path / "kernel") as run:
            await run.wait(lambda: run.account.transport.accepting, what="the webhook")
            headers = {"Content-Type": "application/json", **MetaSigner(APP_SECRET)(body)}
            async with aiohttp.ClientSession() as http:
                async with http.post(f"{adapter.gateway}/whatsapp/main/webhook", data=body,
                                     headers=headers) as answer:
                    status = answer.status
            await run.settle()
            delivered = [message for message, _ in run.deliveries]
    assert status == 200
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
    outcome = ("message" if len(delivered) == 1 else "none" if not delivered else
               f"{len(delivered)} messages")
    assert outcome == entry["expect"], (outcome, delivered)
