"""Live replies on Slack: Slack's stream in a DM's thread, one message updated in place
elsewhere, the fake's stream methods with their errors and rate tiers, and no 429 under
the channel's default limits with the fake enforcing Slack's."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from chatkernel.channels import Route
from chatkernel.testing import (
    STREAM_ANSWER,
    STREAM_WORDS,
    ScaledClock,
    open_contract_run,
    paced_stream,
)
from chatkernel_slack.fake import FakeSlack
from slack_adapters import SlackSocketAdapter

pytestmark = pytest.mark.anyio

DM, CHANNEL = "D0DIRECT01", "C0GROUP001"
WORDS, ANSWER = STREAM_WORDS, STREAM_ANSWER
#: The previews' intervals and Slack's windows, on both sides, 10 times faster.
SPEED = 10


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class DefaultLimitsAdapter(SlackSocketAdapter):
    """The channel's own rate limits (the contract's adapter lifts them)."""

    timeout = 30.0

    def channel_config(self) -> dict[str, Any]:
        return {"retry": {"attempts": 3, "base_delay_ms": 10, "jitter": 0},
                **self.channel_extra}


async def api(slack: FakeSlack, method: str, **params: Any) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http, http.post(
            f"{slack.base_url}/api/{method}", json=params,
            headers={"Authorization": f"Bearer {slack.bot_token}"}) as answer:
        return await answer.json()



async def test_the_fake_speaks_the_stream_methods_and_their_errors():
    async with FakeSlack() as slack:
        slack.channel(DM)
        thread = slack.inject_message(DM, "hi")
        assert (await api(slack, "chat.startStream", channel=DM,
                          markdown_text="x"))["error"] == "invalid_arguments"  # no thread
        started = await api(slack, "chat.startStream", channel=DM, thread_ts=thread,
                            markdown_text="Hel")
        ts = started["ts"]
        assert (await api(slack, "chat.appendStream", channel=DM, ts=ts,
                          markdown_text="lo"))["ok"]
        assert (await api(slack, "chat.stopStream", channel=DM, ts=ts,
                          markdown_text="!"))["ok"]
        late = await api(slack, "chat.appendStream", channel=DM, ts=ts, markdown_text="?")
        assert late == {"ok": False, "error": "message_not_in_streaming_state"}
        assert [text for kind, _, _, text in slack.history if kind in ("stream", "stop")] \
            == ["Hel", "Hello", "Hello!"]
        assert (await api(slack, "chat.update", channel=DM, ts=ts, text="Hello, all"))["ok"]
        assert slack.texts(DM) == ["Hello, all"]
        missing = await api(slack, "chat.update", channel=DM, ts="1.000001", text="x")
        assert missing["error"] == "message_not_found"
        assert (await api(slack, "chat.delete", channel=DM, ts=ts))["ok"]
        assert slack.texts(DM) == []
        # chat.update is Tier 3: about 50 a minute in a workspace.
        slack.enforce_limits()
        slack.channel(CHANNEL)
        posted = await api(slack, "chat.postMessage", channel=CHANNEL, text="v0")
        answers = [await api(slack, "chat.update", channel=CHANNEL, ts=posted["ts"],
                             text=f"v{n}") for n in range(1, 52)]
        assert all(a["ok"] for a in answers[:50])
        assert answers[50] == {"ok": False, "error": "ratelimited"}


@pytest.mark.slow
async def test_a_dm_thread_sees_slacks_stream_then_the_answer(tmp_path):
    clock = ScaledClock(SPEED)
    async with DefaultLimitsAdapter() as adapter:
        slack = adapter.slack
        slack.rates.clock = clock.monotonic
        slack.enforce_limits()
        thread = "1600000000.000001"

        def shown() -> list[str]:
            return [text for kind, chat, _, text in slack.history if chat == DM]

        async with open_contract_run(adapter, tmp_path / "kernel",
                                     channel_settings={"streaming": "on"},
                                     pacing=clock.pacing) as run:
            run.agent.script = paced_stream(run, shown)
            await adapter.inject(DM, "tell me", sender_id="U0USER0001", thread_id=thread)
            await run.wait(lambda: any(m.updates for m in slack.sent(DM)), what="the answer")
            await run.settle()
        [message] = slack.sent(DM)
        assert message.method == "chat.startStream" and message.thread_ts == thread
        # The raw Markdown, appended piece by piece: Slack renders a partial mark itself.
        parts = [call.params["markdown_text"] for call in slack.calls
                 if call.method in ("chat.startStream", "chat.appendStream")]
        assert len(parts) >= 3 and parts[0] == "**Here"
        assert "".join(parts) == ANSWER
        assert slack.calls_to("chat.stopStream") and not message.streaming
        assert message.plain_text == "Here is " + " ".join(WORDS)
        assert slack.calls_to("chat.postMessage") == []
        assert slack.throttled == 0, "a preview went past Slack's limits"


@pytest.mark.slow
async def test_a_channel_sees_one_message_updated_in_place(tmp_path):
    clock = ScaledClock(SPEED)
    async with DefaultLimitsAdapter() as adapter:
        slack = adapter.slack
        slack.rates.clock = clock.monotonic
        slack.enforce_limits()
        adapter.channel_extra = {"streaming": "on"}

        def shown() -> list[str]:
            return [text for kind, chat, _, text in slack.history if chat == CHANNEL]

        async with open_contract_run(adapter, tmp_path / "kernel",
                                     pacing=clock.pacing) as run:
            run.agent.script = paced_stream(run, shown)
            await adapter.inject(CHANNEL, "tell me", sender_id="U0USER0001", group=True,
                                 mention=True)
            await run.wait(lambda: slack.texts(CHANNEL) == ["Here is " + " ".join(WORDS)],
                           what="the answer in place of the preview",
                           state=lambda: slack.texts(CHANNEL))
            await run.settle()
        [message] = slack.sent(CHANNEL)
        assert message.method == "chat.postMessage" and message.updates >= 2
        assert slack.calls_to("chat.startStream") == []
        assert slack.throttled == 0, "a preview went past Slack's limits"


@pytest.mark.slow
async def test_where_slack_refuses_the_app_a_stream_the_message_is_updated_instead(tmp_path):
    clock = ScaledClock(SPEED)
    async with DefaultLimitsAdapter() as adapter:
        slack = adapter.slack
        slack.rates.clock = clock.monotonic
        slack.fail_next("chat.startStream", "feature_not_enabled")
        thread = "1600000000.000001"

        def shown() -> list[str]:
            return [text for kind, chat, _, text in slack.history if chat == DM]

        async with open_contract_run(adapter, tmp_path / "kernel",
                                     channel_settings={"streaming": "on"},
                                     pacing=clock.pacing) as run:
            run.agent.script = paced_stream(run, shown)
            await adapter.inject(DM, "tell me", sender_id="U0USER0001", thread_id=thread)
            await run.wait(lambda: slack.texts(DM) == ["Here is " + " ".join(WORDS)],
                           what="the answer", state=lambda: slack.texts(DM))
            await run.settle()
            route = Route("slack", "main", DM, thread_id=thread)
            assert run.channel.live_mode(route) == "edit"  # the next answers too
        [message] = slack.sent(DM)
        assert message.method == "chat.postMessage" and message.thread_ts == thread
        assert message.updates >= 2  # chat.update as the stream's fallback
        assert len(slack.calls_to("chat.startStream")) == 1  # refused once, not again
        assert slack.calls_to("chat.appendStream") == []
