"""Real Slack payloads, from the public test data of Slack's Bolt for Python
(tests/data/corpus/README.md), posted signed to the channel's Events API URL against the
fake Slack: each is answered 200; a message someone wrote comes in as exactly one message;
an interactivity payload or a slash command (a form post) is logged as not supported; any
other event (a reaction, an edit, a bot's message) is no message."""

from __future__ import annotations

import json
import logging
import time
import urllib.parse
from pathlib import Path

import aiohttp
import pytest

from chatkernel.testing import open_contract_run
from chatkernel_slack.fake import SlackSigner
from slack_adapters import SlackEventsAdapter

pytestmark = pytest.mark.anyio

CORPUS = json.loads((Path(__file__).parent / "data" / "corpus" / "payloads.json").read_text())


def request(entry: dict, fake: str) -> tuple[bytes, str]:
    """The body Slack posts for the entry, and its content type. Its file links go to
    the fake (``fake``: its address) instead of files.slack.com: no test reaches out."""
    if entry["kind"] == "event":
        body = json.dumps(entry["body"]).replace("https://files.slack.com", fake)
        return body.encode(), "application/json"
    if entry["kind"] == "interactivity":
        form = urllib.parse.urlencode({"payload": json.dumps(entry["body"])})
    else:  # a slash command: the form as Slack posts it
        form = entry["body"]
    return form.encode(), "application/x-www-form-urlencoded"


@pytest.mark.parametrize("entry", CORPUS, ids=[entry["name"] for entry in CORPUS])
async def test_a_captured_payload_is_read_as_the_platform_meant_it(tmp_path, caplog, entry):
    caplog.set_level(logging.INFO)
    async with SlackEventsAdapter() as adapter:
        async with open_contract_run(adapter, tmp_path / "kernel") as run:
            slack = adapter.slack
            body, content_type = request(entry, slack.base_url)
            await run.wait(lambda: run.account.transport.accepting, what="the webhook")
            headers = {"Content-Type": content_type,
                       **SlackSigner(slack.signing_secret, clock=time.time)(body)}
            async with aiohttp.ClientSession() as http:
                async with http.post(slack.app.request_url, data=body,
                                     headers=headers) as answer:
                    status = answer.status
            await run.settle()
            delivered = [message for message, _ in run.deliveries]
    assert status == 200
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
    unsupported = [r.getMessage() for r in caplog.records
                   if "not supported" in r.getMessage()]
    outcome = ("message" if len(delivered) == 1 and not unsupported else
               "not supported" if not delivered and len(unsupported) == 1 else
               "none" if not delivered and not unsupported else
               f"{len(delivered)} messages, {len(unsupported)} not supported")
    assert outcome == entry["expect"], (outcome, delivered, unsupported)
