"""The dev server and ``chatkernel run`` as two real processes: a Slack bot, offline, in
both modes: DMs, mentions and threads answered, files both ways."""

from __future__ import annotations

import time

import pytest

from chatkernel.testing import gateway_home, gateway_process, post_json as post, wait_for_messages
from chatkernel.testing.process import devserver as run_devserver

DM, CHANNEL = "D0DIRECT01", "C0GENERAL1"


def devserver(mode):
    return run_devserver("chatkernel_slack.devserver", "--mode", mode)


def sent(base_url, channel, want, timeout=15.0):
    return wait_for_messages(f"{base_url}/_fake/sent?channel={channel}", want, timeout)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["socket", "events"])
def test_chatkernel_run_answers_dms_mentions_and_threads_with_files(tmp_path, mode):
    with devserver(mode) as fake:
        base = fake["base_url"]
        assert post(f"{base}/_fake/messages", {"channel": 7})[0] == 400
        assert post(f"{base}/_fake/messages", {"channel": DM, "colour": "red"})[0] == 400
        secret = (f'app_token = "{fake["app_token"]}"\n' if mode == "socket" else
                  f'mode = "events"\nsigning_secret = "{fake["signing_secret"]}"\n')
        home = gateway_home(
            tmp_path / "home", "[channels.slack.accounts.main]\n"
            f'bot_token = "{fake["bot_token"]}"\n{secret}api_base = "{fake["api_base"]}"\n'
            'allow_from = ["*"]\n')
        outgoing = tmp_path / "report.txt"
        outgoing.write_text("the report\n")
        with gateway_process(home) as gateway:
            if mode == "events":
                url = f"{gateway.url}/slack/main/webhook"
                deadline = time.monotonic() + 10
                while not post(f"{base}/_fake/request_url", {"url": url})[1]["verified"]:
                    assert time.monotonic() < deadline, "url_verification never answered"
                    time.sleep(0.1)  # real time: a real gateway process verifies the URL
            status, answer = post(f"{base}/_fake/messages", {"channel": DM, "text": "hello"})
            assert status == 200 and answer["ts"]
            post(f"{base}/_fake/messages", {"channel": CHANNEL, "text": "chatter"})
            status, mention = post(f"{base}/_fake/messages",
                                   {"channel": CHANNEL, "text": "are you there",
                                    "mention": True})
            [reply] = sent(base, CHANNEL, 1)
            assert reply["text"] == "are you there" and reply["thread_ts"] == mention["ts"]
            post(f"{base}/_fake/messages", {"channel": CHANNEL, "text": "in the thread",
                                            "thread_ts": mention["ts"]})
            post(f"{base}/_fake/messages", {"channel": DM, "text": "",
                                            "files": [{"name": "notes.txt", "text": "abc"}]})
            post(f"{base}/_fake/messages", {"channel": DM, "text": f"MEDIA: {outgoing}"})
            dm = sent(base, DM, 3)
            assert dm[0]["text"] == "hello"
            assert "notes" in dm[1]["text"], dm  # the echo describes the file it received
            assert dm[2]["files"] == ["report.txt"]
            channel = sent(base, CHANNEL, 2)
            assert [m["text"] for m in channel] == ["are you there", "in the thread"]
            assert {m["thread_ts"] for m in channel} == {mention["ts"]}
        # In a channel the bot answers only when mentioned (require_mention, the default).
        assert all("chatter" not in m["text"] for m in sent(base, CHANNEL, 3, timeout=0.5))
        saved = list((home / "workspace" / "media" / "inbound" / "slack").rglob("*notes.txt"))
        assert saved and saved[0].read_bytes() == b"abc"
