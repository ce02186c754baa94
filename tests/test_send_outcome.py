"""`chatkernel send` and `sessions send` wait for the outcome and exit with it, against
the Telegram plugin's fake Bot API (strict about chats: an unknown one is "chat not
found"), through a running gateway and without one."""

from __future__ import annotations

import json
import os
import subprocess

import anyio
import pytest

from chatkernel.testing.process import CHATKERNEL, running_gateway_process

pytestmark = pytest.mark.anyio

KNOWN_CHAT = 42


def run(home, *args, timeout=60):
    env = {**os.environ, "CHATKERNEL_HOME": str(home)}
    env.pop("CHATKERNEL_CONFIG", None)
    return subprocess.run([CHATKERNEL, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


async def cli(home, *args):
    """Run the CLI in a thread: the fake Bot API answers it from this event loop."""
    return await anyio.to_thread.run_sync(lambda: run(home, *args))


@pytest.fixture
async def bot_api():
    from chatkernel_telegram.fake import FakeBotAPI

    async with FakeBotAPI(strict_chats=True) as api:
        api.add_chat(KNOWN_CHAT)
        yield api


@pytest.fixture
def home(tmp_path, bot_api):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(f"""
[queue]
debounce_ms = 0

[channels.telegram.retry]
attempts = 2
base_delay_ms = 10

[channels.telegram.accounts.main]
bot_token = "{bot_api.token}"
api_base = "{bot_api.base_url}"
allow_from = ["*"]
poll_timeout = 1
""")
    return home


#: Telegram's refusal, and what it means (the Telegram channel says it).
CHAT_NOT_FOUND = ("Bad Request: chat not found: the user has not started the bot (a bot "
                  "writes to a person only once they sent it /start or a message), or the "
                  "chat id is wrong")


@pytest.mark.slow
async def test_through_the_gateway_the_outcome_is_reported_and_is_the_exit_status(
        home, bot_api):
    async with running_gateway_process(home):
        result = await cli(home, "send", "--channel", "telegram", "--to", str(KNOWN_CHAT),
                           "hello 42")
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"sent to telegram:main → {KNOWN_CHAT} (1 part(s))")
        assert bot_api.texts(KNOWN_CHAT) == ["hello 42"]

        # A chat that does not exist: the platform's reason, exit 1, nothing silent.
        result = await cli(home, "send", "--channel", "telegram", "--to", "999", "anyone?")
        assert result.returncode == 1
        assert "not sent to telegram:main → 999" in result.stderr
        assert f"part 1/1: failed: {CHAT_NOT_FOUND}" in result.stderr
        answer = json.loads((await cli(home, "send", "--channel", "telegram", "--to", "999",
                                       "--json", "again?")).stdout)
        assert answer["outcome"] == "failed" and answer["via"] == "gateway"
        assert answer["parts"] == [{"status": "failed", "error": CHAT_NOT_FOUND}]

        # The sessions a send made are listed, and their history says what went wrong.
        sessions = json.loads((await cli(home, "sessions", "list", "--json")).stdout)
        assert {s["key"] for s in sessions} == {"telegram:main:42", "telegram:main:999"}
        history = (await cli(home, "sessions", "history", "telegram:main:999")).stdout
        assert 'delivery failed: chunk 1/1 "anyone?": Bad Request: chat not found' in history
        status = (await cli(home, "status")).stdout
        assert "Recent delivery failures:" in status
        assert ('telegram:main:999  part 1/1 "again?": failed (platform): Bad Request: chat '
                'not found') in status
        assert "Health: ok" in status  # a chat refused it: the account itself is fine

        # --no-wait only queues.
        result = await cli(home, "sessions", "send", "telegram:main:999", "--no-wait", "x")
        assert result.returncode == 0, result.stderr
        assert "queued by the running gateway for telegram:main → 999" in result.stdout
        await bot_api.wait_until(lambda: len(bot_api.calls_to("sendMessage")) == 4)

        # A request that went out and got no answer: delivery unknown, exit 3, not resent.
        bot_api.drop_next("sendMessage", after_processing=True)
        result = await cli(home, "sessions", "send", "telegram:main:42", "maybe")
        assert result.returncode == 3, result.stderr
        assert "delivery unknown to telegram:main → 42" in result.stderr
        assert bot_api.texts(KNOWN_CHAT) == ["hello 42", "maybe"]  # it did arrive, once

        # Not done when the wait runs out (the platform asked to wait): exit 4.
        bot_api.fail_next_with_retry_after("sendMessage", 3)
        result = await cli(home, "send", "--channel", "telegram", "--to", str(KNOWN_CHAT),
                           "--wait", "0.5", "later")
        assert result.returncode == 4, result.stderr
        assert "not sent yet to telegram:main → 42 after 0.5 s" in result.stderr
        assert "the gateway keeps it queued" in result.stderr
        await bot_api.wait_for_sent(3)
        assert bot_api.texts(KNOWN_CHAT)[-1] == "later"


@pytest.mark.slow
async def test_without_a_gateway_the_send_is_made_here_and_reported_the_same(home, bot_api):
    result = await cli(home, "send", "--channel", "telegram", "--to", "999", "anyone?")
    assert result.returncode == 1
    assert f"part 1/1: failed: {CHAT_NOT_FOUND}" in result.stderr
    # status, from the state database, lists it too.
    status = (await cli(home, "status")).stdout
    assert "Gateway: not running" in status and "Recent delivery failures:" in status
    assert ('telegram:main:999  part 1/1 "anyone?": failed: Bad Request: chat not found'
            in status)
    result = await cli(home, "send", "--channel", "telegram", "--to", str(KNOWN_CHAT),
                       "--no-wait", "--json", "hi")
    answer = json.loads(result.stdout)
    assert result.returncode == 0 and answer["via"] == "direct"
    assert answer["outcome"] == "sent"  # no gateway: this command is the sender, it waits
    assert bot_api.texts(KNOWN_CHAT) == ["hi"]
