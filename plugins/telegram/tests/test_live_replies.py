"""Live replies on Telegram: drafts in a private chat, one message edited in place in a
group, the fake refusing drafts where the Bot API does, and no 429 under the channel's
default limits with the fake enforcing Telegram's."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from chatkernel.testing import (
    STREAM_ANSWER,
    STREAM_WORDS,
    AgentEvent,
    ScaledClock,
    open_contract_run,
    paced_stream,
)
from chatkernel_telegram.fake import FakeBotAPI
from telegram_adapters import TOKEN, TelegramAdapter

pytestmark = pytest.mark.anyio

PRIVATE, GROUP = 1001, -1001000000001
WORDS, ANSWER = STREAM_WORDS, STREAM_ANSWER
#: The previews' intervals and Telegram's windows, on both sides, 10 times faster.
SPEED = 10


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class DefaultLimitsAdapter(TelegramAdapter):
    """The channel's own rate limits (the contract's adapter lifts them): about one
    call a second in a chat, so a wait here may take longer than the contract's."""

    timeout = 30.0

    def channel_config(self) -> dict[str, Any]:
        return {"retry": {"attempts": 3, "base_delay_ms": 10, "jitter": 0}}


async def call(api: FakeBotAPI, method: str, **params: Any) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http, \
            http.post(f"{api.base_url}/bot{TOKEN}/{method}", json=params) as answer:
        return await answer.json()



async def test_the_fake_refuses_drafts_where_the_bot_api_does():
    async with FakeBotAPI(token=TOKEN) as api:
        group = await call(api, "sendMessageDraft", chat_id=GROUP, draft_id=7, text="hi")
        assert group == {"ok": False, "error_code": 400,
                         "description": "Bad Request: TEXTDRAFT_PEER_INVALID"}
        zero = await call(api, "sendMessageDraft", chat_id=PRIVATE, draft_id=0, text="hi")
        assert zero["error_code"] == 400 and "DRAFT_ID_INVALID" in zero["description"]
        thinking = await call(api, "sendMessageDraft", chat_id=PRIVATE, draft_id=7, text="")
        assert thinking == {"ok": True, "result": True}  # the "Thinking…" placeholder
        assert [(d.draft_id, d.plain_text) for d in api.drafts] == [(7, "")]
        sent = await call(api, "sendMessage", chat_id=GROUP, text="first")
        message_id = sent["result"]["message_id"]
        same = await call(api, "editMessageText", chat_id=GROUP, message_id=message_id,
                          text="first")
        assert "message is not modified" in same["description"]
        edited = await call(api, "editMessageText", chat_id=GROUP, message_id=message_id,
                            text="first, then more")
        assert edited["ok"] and edited["result"]["text"] == "first, then more"
        missing = await call(api, "editMessageText", chat_id=GROUP, message_id=999, text="x")
        assert missing["description"] == "Bad Request: message to edit not found"
        assert (await call(api, "deleteMessage", chat_id=GROUP, message_id=message_id))["ok"]
        assert api.texts(GROUP) == []
        gone = await call(api, "deleteMessage", chat_id=GROUP, message_id=message_id)
        assert gone["description"] == "Bad Request: message to delete not found"


@pytest.mark.slow
async def test_a_private_chat_sees_growing_drafts_then_one_message(tmp_path):
    clock = ScaledClock(SPEED)
    async with DefaultLimitsAdapter() as adapter:
        api = adapter.api
        api.rates.clock = clock.monotonic
        api.enforce_limits()  # Telegram's: 1 a second per chat, 20 a minute per group

        def drafts() -> list[str]:
            return [d.plain_text for d in api.drafts if d.chat_id == PRIVATE]

        async with open_contract_run(adapter, tmp_path / "kernel",
                                     channel_settings={"streaming": "on"},
                                     pacing=clock.pacing) as run:
            run.agent.script = paced_stream(run, drafts)
            await adapter.inject(str(PRIVATE), "tell me", sender_id=str(PRIVATE))
            await run.wait(lambda: api.texts(PRIVATE), what="the answer")
            await run.settle()
        shown = drafts()
        assert len(shown) >= 3 and shown[-1].startswith("Here is word")
        assert all(b.startswith(a) for a, b in zip(shown, shown[1:])), shown  # growing
        assert len({d.draft_id for d in api.drafts}) == 1  # one draft, animated
        assert "<b>Here</b>" in api.drafts[0].text  # bold closed in the very first state
        assert [m.method for m in api.sent(chat_id=PRIVATE)] == ["sendMessage"]
        assert api.texts(PRIVATE) == ["Here is " + " ".join(WORDS)]
        assert api.throttled == 0, "a preview went past Telegram's limits"


@pytest.mark.slow
async def test_a_group_sees_one_message_edited_in_place(tmp_path):
    clock = ScaledClock(SPEED)
    async with DefaultLimitsAdapter() as adapter:
        api = adapter.api
        api.rates.clock = clock.monotonic
        api.enforce_limits()

        def visible() -> list[str]:
            return api.texts(GROUP)

        async with open_contract_run(adapter, tmp_path / "kernel", channel_settings={
                "streaming": "on", "streaming_interval_ms": 1000},
                pacing=clock.pacing) as run:
            run.agent.script = paced_stream(run, lambda: [
                text for _, text in api.edits] + visible())
            await adapter.inject(str(GROUP), "@chatkernel_bot tell me", sender_id="1001",
                                 group=True)
            await run.wait(lambda: visible() == ["Here is " + " ".join(WORDS)],
                           what="the answer in place of the preview", state=visible)
            await run.settle()
        assert api.calls_to("sendMessageDraft") == []
        [message] = api.sent(chat_id=GROUP)  # one message: the preview, then the answer
        assert message.edits >= 2 and not message.deleted
        assert message.plain_text == "Here is " + " ".join(WORDS)
        assert api.throttled == 0, "a preview went past Telegram's limits"


async def test_streaming_off_sends_the_answer_whole(tmp_path):
    async with DefaultLimitsAdapter() as adapter:
        api = adapter.api
        async with open_contract_run(adapter, tmp_path / "kernel",
                                     channel_settings={"streaming": "off"}) as run:
            async def script(request: Any) -> Any:
                yield AgentEvent("text", "Here ", final=False)
                yield AgentEvent.reply(ANSWER)

            run.agent.script = script
            await adapter.inject(str(PRIVATE), "tell me", sender_id=str(PRIVATE))
            await run.wait(lambda: api.texts(PRIVATE), what="the answer")
            await run.settle()
        assert api.drafts == [] and api.edits == []
        assert api.texts(PRIVATE) == ["Here is " + " ".join(WORDS)]
