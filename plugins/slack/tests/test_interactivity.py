"""Slack's form posts on the Events API URL: interactivity (buttons, modals, shortcuts:
``payload=<JSON>``) and slash commands (``command=...``), posted there by an app whose
Interactivity or Slash Commands URL is the same. They are verified like every request and
answered 200 with a logged "not supported" (Slack turns off a URL that keeps failing);
another content type gets a 415 that says what the URL takes."""

from __future__ import annotations

import json
import logging
import time
import urllib.parse

import aiohttp
import pytest

from chatkernel.testing import open_contract_run
from chatkernel_slack.fake import SlackSigner
from slack_adapters import SlackEventsAdapter

pytestmark = pytest.mark.anyio

FORM = "application/x-www-form-urlencoded"
BUTTON = {"type": "block_actions", "team": {"id": "T0TEAM0001"},
          "user": {"id": "U0USER0001"}, "actions": [{"action_id": "a", "value": "v"}]}
FORMS = {
    "interactivity block_actions": urllib.parse.urlencode({"payload": json.dumps(BUTTON)}),
    "interactivity view_submission": urllib.parse.urlencode(
        {"payload": json.dumps({"type": "view_submission", "view": {"id": "V1"}})}),
    "slash command /ask": "token=x&team_id=T0TEAM0001&command=%2Fask&text=hello"
                         "&user_id=U0USER0001&channel_id=C0GENERAL1",
}


def signed(secret: str, body: bytes, content_type: str = FORM) -> dict[str, str]:
    return {"Content-Type": content_type, **SlackSigner(secret, clock=time.time)(body)}


@pytest.mark.parametrize("kind", FORMS)
async def test_a_signed_form_post_is_answered_200_and_logged_as_not_supported(
        tmp_path, caplog, kind):
    caplog.set_level(logging.INFO)
    body = FORMS[kind].encode()
    async with SlackEventsAdapter() as adapter:
        async with open_contract_run(adapter, tmp_path / "kernel") as run:
            slack = adapter.slack
            await run.wait(lambda: run.account.transport.accepting, what="the webhook")
            async with aiohttp.ClientSession() as http:
                async with http.post(slack.app.request_url, data=body,
                                     headers=signed(slack.signing_secret, body)) as answer:
                    assert answer.status == 200
                    assert await answer.read() == b""  # a slash command would show a body
            await run.settle()
            assert run.deliveries == [] and run.agent.requests == []
    assert f"slack:main: not supported: {kind}" in caplog.text


async def test_a_form_post_is_verified_like_any_request(tmp_path, caplog):
    body = FORMS["interactivity block_actions"].encode()
    async with SlackEventsAdapter() as adapter:
        async with open_contract_run(adapter, tmp_path / "kernel") as run:
            slack = adapter.slack
            await run.wait(lambda: run.account.transport.accepting, what="the webhook")
            async with aiohttp.ClientSession() as http:
                for headers in ({"Content-Type": FORM},
                                signed("not-the-signing-secret", body)):
                    async with http.post(slack.app.request_url, data=body,
                                         headers=headers) as answer:
                        assert answer.status == 401
    assert "not supported" not in caplog.text


@pytest.mark.parametrize("content_type", ["text/plain", "multipart/form-data; boundary=x",
                                          "application/xml"])
async def test_another_content_type_gets_a_415_saying_what_the_url_takes(
        tmp_path, content_type):
    body = b'{"type": "event_callback"}'
    async with SlackEventsAdapter() as adapter:
        async with open_contract_run(adapter, tmp_path / "kernel") as run:
            slack = adapter.slack
            await run.wait(lambda: run.account.transport.accepting, what="the webhook")
            async with aiohttp.ClientSession() as http:
                async with http.post(slack.app.request_url, data=body, headers=signed(
                        slack.signing_secret, body, content_type)) as answer:
                    assert answer.status == 415
                    error = (await answer.json())["error"]
    assert "Events API as application/json" in error and FORM in error
