"""WeChat's live replies are off unless configured (whether iLink takes a FINISH after
GENERATING on one client_id is contested); when on and iLink refuses the FINISH, the whole
answer goes out as a new message, once, and the refusal is logged and noted in the
session's log: no half answer is left silently."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from chatkernel.testing import AgentEvent, ScaledClock
from chatkernel.testing.contract import open_contract_run
from chatkernel_wechat.contract import WeChatAdapter

pytestmark = pytest.mark.anyio

ANSWER = "the whole answer fr01z"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Adapter(WeChatAdapter):
    timeout = 30.0

    def channel_config(self) -> dict[str, Any]:
        return {"retry": {"attempts": 3, "base_delay_ms": 10, "jitter": 0}}


async def test_live_replies_are_off_by_default(tmp_path):
    async with Adapter() as adapter:
        ilink, user = adapter.ilink, adapter.direct_chat(1)

        async def script(request: Any) -> Any:
            yield AgentEvent("text", "the whole ", final=False)
            yield AgentEvent.reply(ANSWER)

        async with open_contract_run(adapter, tmp_path / "kernel") as run:
            assert run.channel.streaming_default is False  # no [channels.wechat] streaming
            run.agent.script = script
            await adapter.inject(user, "tell me", sender_id=user)
            await run.wait_for_tokens(user, ["fr01z"])
            await run.settle()
        [message] = ilink.sent(user)
        assert message.text == ANSWER and message.updates == 0
        assert [state for who, _, state, _ in ilink.history if who == user] == [2]


async def test_a_refused_finish_sends_the_whole_answer_as_a_new_message_once(
        tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    async with Adapter() as adapter:
        ilink, user = adapter.ilink, adapter.direct_chat(1)
        ilink.refuse_finish_after_generating = True

        async def script(request: Any) -> Any:
            yield AgentEvent("text", "the whole ", final=False)
            await run.wait(lambda: ilink.sent(user), what="the preview")
            yield AgentEvent.reply(ANSWER)

        async with open_contract_run(adapter, tmp_path / "kernel",
                                     channel_settings={"streaming": "on"},
                                     pacing=ScaledClock(10).pacing) as run:
            run.agent.script = script
            await adapter.inject(user, "tell me", sender_id=user)
            await run.wait(lambda: any(m.state == 2 for m in ilink.sent(user)),
                           what="the answer as a new message")
            await run.settle()
            notes = await run.harness.session_log(f"wechat:main:{user}",
                                                  roles=("notification",))
        preview, answer = ilink.sent(user)
        assert preview.state == 1 and preview.text == "the whole"  # left as it was
        assert answer.state == 2 and answer.text == ANSWER and answer.updates == 0
        assert answer.client_id != preview.client_id
        assert ilink.refused == [(user, "FINISH after GENERATING on one client_id")]
        assert [n.text for n in notes if "live reply not finished" in n.text] and \
            all("ret=-2" in n.text for n in notes)
        assert "live reply not finished: WeChat refused to finish the preview" in caplog.text
        assert ilink.violations == []
