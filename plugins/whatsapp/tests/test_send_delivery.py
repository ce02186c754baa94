"""`chatkernel send` on WhatsApp: a message the platform accepted is not yet delivered.

Meta answers a send with the message's id and reports its fate later, on the webhook.
`send` says so, and `--wait-delivery` waits for that report (a real gateway process, the
fake Graph API in the test's event loop).
"""

from __future__ import annotations

import json
import os
import subprocess

import anyio
import pytest

from chatkernel.testing import CHATKERNEL, running_gateway_process
from chatkernel_whatsapp.fake import FakeGraph

pytestmark = pytest.mark.anyio

USER = "15551234567"
NOT_ON_WHATSAPP = "15551111111"


def config(graph: FakeGraph) -> str:
    return f"""
[channels.whatsapp.accounts.main]
access_token = "{graph.token}"
phone_number_id = "{graph.phone_number_id}"
app_secret = "{graph.app_secret}"
verify_token = "{graph.verify_token}"
api_base = "{graph.base_url}"
allow_from = ["*"]
"""


async def chatkernel(home, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CHATKERNEL_HOME": str(home)}
    env.pop("CHATKERNEL_CONFIG", None)
    return await anyio.to_thread.run_sync(lambda: subprocess.run(
        [CHATKERNEL, *args], env=env, capture_output=True, text=True, timeout=60))


def send(home, to: str, *args: str):
    return chatkernel(home, "send", "--channel", "whatsapp", "--to", to, *args)


@pytest.mark.slow
async def test_send_says_accepted_and_waits_for_the_delivery_report(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    async with FakeGraph() as graph:
        (home / "config.toml").write_text(config(graph))
        async with running_gateway_process(home) as gateway:
            assert await graph.subscribe(f"{gateway.url}/whatsapp/main/webhook")
            for user in (USER, NOT_ON_WHATSAPP):  # both wrote: the 24-hour window is open
                graph.inject_message(user, "hi")
            graph.fail_delivery(NOT_ON_WHATSAPP)

            # Without waiting: accepted, and where to look for what became of it.
            result = await send(home, USER, "are you there?")
            assert result.returncode == 0, result.stderr
            assert result.stdout.startswith(f"accepted by the platform for whatsapp:main → "
                                            f"{USER} (1 part(s)); delivery is reported later: "
                                            f"see `chatkernel sessions history "
                                            f"whatsapp:main:{USER}`")
            answer = json.loads((await send(home, USER, "again", "--json")).stdout)
            assert (answer["outcome"], answer["delivery_later"]) == ("accepted", True)

            # Waiting: delivered (the fake reports sent, delivered, read).
            result = await send(home, USER, "and now?", "--wait-delivery", "20")
            assert result.returncode == 0, result.stderr
            assert result.stdout.startswith(f"delivered to whatsapp:main → {USER} (1 part(s)")

            # A number that is not on WhatsApp: accepted, then reported failed.
            result = await send(home, NOT_ON_WHATSAPP, "hello?", "--wait-delivery", "20")
            assert result.returncode == 1, result.stdout
            assert result.stderr.startswith(f"not delivered to whatsapp:main → "
                                            f"{NOT_ON_WHATSAPP} (reply ")
            assert "the platform accepted it, then reported:" in result.stderr
            assert "part 1/1: failed: Message undeliverable" in result.stderr
            assert "(code 131026)" in result.stderr
            answer = json.loads((await send(home, NOT_ON_WHATSAPP, "hello??", "--json",
                                            "--wait-delivery", "20")).stdout)
            assert answer["outcome"] == "failed"
            assert answer["parts"][0]["delivery"] == "failed"

            # No report in time: a code and a message of their own.
            graph.statuses = False
            result = await send(home, USER, "silence", "--wait-delivery", "0.5")
            assert result.returncode == 5, result.stdout + result.stderr
            assert ("but no delivery was reported within 0.5 s: see `chatkernel sessions "
                    f"history whatsapp:main:{USER}`") in result.stderr

            # The session's log has what was sent and the platform's failure report.
            history = json.loads((await chatkernel(
                home, "sessions", "history", f"whatsapp:main:{NOT_ON_WHATSAPP}",
                "--json")).stdout)
            sent = [e["text"] for e in history if e["role"] == "assistant"
                    and (e["meta"] or {}).get("kind") == "send"]
            assert sent == ["hello?", "hello??"]
            assert any(e["role"] == "notification" and "131026" in e["text"]
                       for e in history)


@pytest.mark.slow
async def test_waiting_for_delivery_needs_the_gateway(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    async with FakeGraph() as graph:
        (home / "config.toml").write_text(config(graph))
        graph.inject_message(USER, "hi")
        result = await send(home, USER, "x", "--wait-delivery", "5")
        assert result.returncode == 1
        assert ("whatsapp:main reports delivery on the gateway's webhook, and no gateway is "
                "running: nothing was sent") in result.stderr
        assert graph.sent() == []
