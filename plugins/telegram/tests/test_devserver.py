"""The dev server and ``chatkernel run`` as two real processes: a Telegram bot, offline."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from contextlib import contextmanager

from chatkernel.testing.process import gateway_process, wait_for_messages


@contextmanager
def devserver():
    process = subprocess.Popen(
        [sys.executable, "-m", "chatkernel_telegram.devserver", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError("the dev server did not start: " + process.stderr.read())
        yield json.loads(line)
    finally:
        process.terminate()
        process.wait(timeout=10)


def post(url, body):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def sent(base_url, chat_id, want, timeout=15.0):
    return wait_for_messages(f"{base_url}/_fake/sent?chat_id={chat_id}", want, timeout)


def test_chatkernel_run_answers_a_user_of_the_dev_server(tmp_path):
    with devserver() as fake:
        base = fake["base_url"]
        assert post(f"{base}/_fake/messages", {"chat_id": "x"})[0] == 400
        assert post(f"{base}/_fake/messages", {"chat_id": 7, "colour": "red"})[0] == 400
        home = tmp_path / "home"
        home.mkdir()
        (home / "config.toml").write_text(
            '[queue]\nmode = "followup"\ndebounce_ms = 0\n\n'  # one echo per message
            "[channels.telegram.accounts.main]\n"
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
