"""The dev server and ``chatkernel run`` as two real processes: a Telegram bot, offline."""

from __future__ import annotations

import pytest

from chatkernel.testing import gateway_home, gateway_process, post_json as post, wait_for_messages
from chatkernel.testing.process import devserver as run_devserver


def devserver():
    return run_devserver("chatkernel_telegram.devserver")


def sent(base_url, chat_id, want, timeout=15.0):
    return wait_for_messages(f"{base_url}/_fake/sent?chat_id={chat_id}", want, timeout)


@pytest.mark.slow
def test_chatkernel_run_answers_a_user_of_the_dev_server(tmp_path):
    with devserver() as fake:
        base = fake["base_url"]
        assert post(f"{base}/_fake/messages", {"chat_id": "x"})[0] == 400
        assert post(f"{base}/_fake/messages", {"chat_id": 7, "colour": "red"})[0] == 400
        home = gateway_home(
            tmp_path / "home", "[channels.telegram.accounts.main]\n"
            f'bot_token = "{fake["token"]}"\napi_base = "{base}"\nallow_from = ["*"]\n'
            "poll_timeout = 1\n")
        with gateway_process(home):
            status, answer = post(f"{base}/_fake/messages", {"chat_id": 42, "text": "hello"})
            assert status == 200 and answer["update_id"] >= 1
            post(f"{base}/_fake/messages", {"chat_id": -100, "chat_type": "supergroup",
                                            "chat_title": "team", "text": "chatter"})
            post(f"{base}/_fake/messages", {"chat_id": 42, "text": "again"})
            messages = sent(base, 42, 2)
            assert [m["text"] for m in messages] == ["hello", "again"]
            assert all(m["method"] == "sendMessage" for m in messages)
        # In a group the bot answers only when mentioned (require_mention, the default).
        assert sent(base, -100, 1, timeout=0.5) == []


@pytest.mark.slow
def test_the_dev_server_refuses_unknown_chats_and_shows_parse_modes():
    with devserver() as fake:
        base, token = fake["base_url"], fake["token"]
        # A chat nobody wrote from: Telegram's own answer, exactly.
        assert post(f"{base}/bot{token}/sendMessage", {"chat_id": 777, "text": "hi"}) == (
            400, {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"})
        post(f"{base}/_fake/messages", {"chat_id": 42, "text": "hello"})
        status, _ = post(f"{base}/bot{token}/sendMessage",
                         {"chat_id": 42, "text": "<b>bold</b>", "parse_mode": "HTML"})
        assert status == 200
        post(f"{base}/bot{token}/sendMessage", {"chat_id": 42, "text": "plain"})
        assert [(m["text"], m["parse_mode"]) for m in sent(base, 42, 2)] == [
            ("bold", "HTML"), ("plain", None)]


def test_the_dev_server_takes_any_chat_when_asked():
    with run_devserver("chatkernel_telegram.devserver", "--any-chat") as fake:
        base, token = fake["base_url"], fake["token"]
        status, answer = post(f"{base}/bot{token}/sendMessage", {"chat_id": 777, "text": "hi"})
        assert status == 200 and answer["ok"]



@pytest.mark.slow
def test_the_dev_server_tells_on_stderr_what_the_bot_sent_and_what_was_refused():
    import json
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-m", "chatkernel_telegram.devserver",
                                "--port", "0"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        fake = json.loads(process.stdout.readline())
        api = f"{fake['base_url']}/bot{fake['token']}"
        assert post(f"{api}/sendMessage", {"chat_id": 9, "text": "x"})[0] == 400  # nobody's
        post(f"{fake['base_url']}/_fake/messages", {"chat_id": 42, "text": "hello"})
        assert post(f"{api}/sendMessage", {"chat_id": 42, "text": "hi"})[0] == 200
        process.terminate()
        _, err = process.communicate(timeout=15)
    finally:
        process.kill()
    lines = err.splitlines()
    assert "bot -> sendMessage refused: Bad Request: chat not found" in lines
    assert "bot -> chat 42: sendMessage (parse_mode none, text): 'hi'" in lines
