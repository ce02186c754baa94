"""Live replies on WeChat: one message GENERATING then FINISH on one client_id, counted
once against the user's quota of ten; a preview that is no answer is finished, not left
generating."""

from __future__ import annotations

from typing import Any

import pytest

from chatkernel.testing import AgentEvent, ScaledClock, open_contract_run
from chatkernel_wechat.channel import CUT_SHORT
from chatkernel_wechat.contract import WeChatAdapter

pytestmark = pytest.mark.anyio

WORDS = [f"word{n:02d}" for n in range(5)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class DefaultLimitsAdapter(WeChatAdapter):
    timeout = 30.0

    def channel_config(self) -> dict[str, Any]:
        return {"retry": {"attempts": 3, "base_delay_ms": 10, "jitter": 0}}


@pytest.mark.slow
async def test_a_live_reply_is_one_message_generating_then_finished(tmp_path):
    async with DefaultLimitsAdapter() as adapter:
        ilink = adapter.ilink
        user = adapter.direct_chat(1)

        def shown() -> list[str]:
            return [text or "" for who, _, _, text in ilink.history if who == user]

        async def script(request: Any) -> Any:
            for word in WORDS:
                yield AgentEvent("text", word + " ", final=False)
                await run.wait(lambda: any(word in text for text in shown()),
                               what=f"the chat showing {word}", state=shown)
            yield AgentEvent.reply(" ".join(WORDS))

        # The preview's interval between updates, 10 times faster (iLink counts no window).
        async with open_contract_run(adapter, tmp_path / "kernel",
                                     channel_settings={"streaming": "on"},
                                     pacing=ScaledClock(10).pacing) as run:
            run.agent.script = script
            await adapter.inject(user, "tell me", sender_id=user)
            await run.wait(lambda: any(m.state == 2 for m in ilink.sent(user)),
                           what="the finished answer")
            await run.settle()
        [message] = ilink.sent(user)
        assert message.text == " ".join(WORDS) and message.updates >= 2
        states = [(client, state) for who, client, state, _ in ilink.history if who == user]
        assert {client for client, _ in states} == {message.client_id}
        assert [state for _, state in states][-1] == 2
        assert 2 not in [state for _, state in states][:-1]  # nothing after the FINISH
        assert ilink.peers[user].sent_since == 1  # one message of the user's ten
        assert ilink.violations == []


async def test_a_preview_that_is_no_answer_is_finished_with_a_note(tmp_path):
    async with DefaultLimitsAdapter() as adapter:
        ilink = adapter.ilink
        user = adapter.direct_chat(1)

        async def script(request: Any) -> Any:
            yield AgentEvent("text", "half a tho", final=False)
            await run.wait(lambda: ilink.sent(user), what="the preview")
            raise RuntimeError("the model went away")
            yield  # pragma: no cover

        async with open_contract_run(adapter, tmp_path / "kernel",
                                     channel_settings={"streaming": "on"},
                                     pacing=ScaledClock(10).pacing) as run:
            run.agent.script = script
            await adapter.inject(user, "tell me", sender_id=user)
            await run.wait(lambda: len(ilink.sent(user)) == 2, what="the error note")
            await run.settle()
        preview, note = ilink.sent(user)
        assert preview.state == 2 and preview.text == CUT_SHORT
        assert "the agent failed" in (note.text or "")
        assert ilink.generating == {} and ilink.violations == []
