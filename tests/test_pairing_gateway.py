"""``chatkernel pairing`` against running gateways (docs/access.md): an approval admits
the stranger at once, with no reload, and tells them in their chat; a revocation puts
them out at once; a wrong code is an error. On SQLite with one gateway, and on Redis
with two, the command run beside the gateway that does not serve the stranger's page."""

from __future__ import annotations

import json
import os
import re
import subprocess

import anyio
import pytest

from chatkernel.core.inbound.access import CODE_ALPHABET
from chatkernel.testing.instances import CHATKERNEL, GatewayInstances
from chatkernel.testing.process import post_json, wait_for_messages

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WEBCHAT = {"webchat": {"accounts": {"default": {"dm_policy": "pairing",
                                                "allow_from": ["owner"]}}}}


def pairing(home, *args: str) -> subprocess.CompletedProcess:
    """``chatkernel pairing ARGS`` beside the gateway running in ``home``."""
    env = {**os.environ, "CHATKERNEL_HOME": str(home)}
    env.pop("CHATKERNEL_CONFIG", None)
    return subprocess.run([CHATKERNEL, "pairing", *args], env=env, capture_output=True,
                          text=True, timeout=60)


async def say(instance, text: str, want: int) -> list[dict]:
    """The stranger writes on ``instance``'s page; the chat once it holds ``want``."""
    url = f"{instance.url}/webchat/messages"
    status, answer = await anyio.to_thread.run_sync(lambda: post_json(
        url, {"chat_id": "browser-s", "user_id": "stranger", "text": text}))
    assert status == 202, answer
    return await anyio.to_thread.run_sync(lambda: wait_for_messages(
        f"{url}?chat_id=browser-s", want, timeout=20))


def bot_texts(messages: list[dict]) -> list[str]:
    return [m["text"] for m in messages if m["role"] == "bot"]


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
async def test_approve_admits_and_revoke_removes_at_once(tmp_path, backend, request):
    config: dict = {"agent": {"kind": "echo"}, "heartbeat": {"every": "0"},
                    "queue": {"mode": "followup", "debounce_ms": 0}, "channels": WEBCHAT}
    count = 1
    if backend == "redis":
        server, prefix = (request.getfixturevalue("redis_server"),
                          request.getfixturevalue("redis_prefix"))
        config["store"] = {"backend": "redis", "url": server, "prefix": prefix,
                           "lease_seconds": 2.0}
        count = 2
    async with GatewayInstances(tmp_path, config) as instances:
        for _ in range(count):
            await instances.start()
        page, beside = instances.instances[0], instances.instances[-1]
        messages = await say(page, "let me in", 2)
        (code_text,) = bot_texts(messages)
        code = re.search(rf"\b[{CODE_ALPHABET}]{{8}}\b", code_text).group(0)

        listed = await anyio.to_thread.run_sync(lambda: pairing(beside.home, "list", "--json"))
        assert listed.returncode == 0, listed.stderr
        (pending,) = json.loads(listed.stdout)
        assert (pending["code"], pending["channel"], pending["account"], pending["sender"]) \
            == (code, "webchat", "default", "stranger")
        assert pending["expires_at"].endswith("Z")

        wrong = await anyio.to_thread.run_sync(
            lambda: pairing(beside.home, "approve", "webchat", "ZZZZ2222"))
        assert wrong.returncode == 1 and "wrong or expired" in wrong.stderr, wrong.stderr

        approved = await anyio.to_thread.run_sync(
            lambda: pairing(beside.home, "approve", "webchat", code))
        assert approved.returncode == 0, approved.stderr
        messages = await say(page, "hello again", 5)  # the notice, then an answer
        texts = bot_texts(messages)
        assert any(t.startswith("You're in") for t in texts), texts
        assert "hello again" in texts, texts

        allowed = await anyio.to_thread.run_sync(
            lambda: pairing(beside.home, "allowed", "--json"))
        assert [a["sender"] for a in json.loads(allowed.stdout)] == ["stranger"]
        revoked = await anyio.to_thread.run_sync(
            lambda: pairing(beside.home, "revoke", "webchat", "stranger"))
        assert revoked.returncode == 0, revoked.stderr
        messages = await say(page, "and now", 7)  # a new code, no answer
        texts = bot_texts(messages)
        assert "and now" not in texts and "pairing approve webchat" in texts[-1], texts
