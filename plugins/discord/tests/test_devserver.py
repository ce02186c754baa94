"""The dev server and ``chatkernel run`` as two real processes: the channel, offline."""

from __future__ import annotations

import json
import urllib.request

import pytest

from chatkernel.testing import gateway_home, gateway_process, post_json, wait_for_messages
from chatkernel.testing.process import devserver

MODULE = "chatkernel_discord.devserver"


@pytest.mark.slow
def test_the_gateway_answers_a_user_of_the_dev_server(tmp_path):
    with devserver(MODULE) as fake:
        base = fake["base_url"]
        home = gateway_home(
            tmp_path / "home", "[channels.discord.accounts.main]\n"
            f'token = "{fake["token"]}"\napi_base = "{fake["api_base"]}"\n'
            'allow_from = ["*"]\n')
        with gateway_process(home):
            with urllib.request.urlopen(f"{base}/_fake/session?wait=20", timeout=30) as answer:
                assert json.load(answer)["connected"]  # what comes before the bot is lost
            status, answer = post_json(f"{base}/_fake/messages", {"text": "hello"})
            assert status == 200, answer
            messages = wait_for_messages(
                f"{base}/_fake/sent?channel_id={answer['channel_id']}&wait=10", 1, 20)
        assert [m["content"] for m in messages] == ["hello"]


@pytest.mark.slow
def test_the_dev_server_names_what_is_wrong_with_a_message():
    with devserver(MODULE) as fake:
        status, answer = post_json(f"{fake['base_url']}/_fake/messages", {"txt": "hi"})
        assert status == 400 and "text is required" in answer["error"], answer
