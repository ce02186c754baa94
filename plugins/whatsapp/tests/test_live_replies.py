"""WhatsApp has no live replies: a streaming agent's answer is one block send, and
``streaming = "on"`` is a config error that says why."""

from __future__ import annotations

from typing import Any

import pytest

from chatkernel.testing import AgentEvent, open_contract_run
from chatkernel_whatsapp.testing import WhatsAppAdapter

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_streaming_agents_answer_is_one_block_send(tmp_path):
    async with WhatsAppAdapter() as adapter:
        user = adapter.direct_chat(1)

        async def script(request: Any) -> Any:
            for word in ("one ", "two ", "three"):
                yield AgentEvent("text", word, final=False)
            yield AgentEvent.reply("one two three")

        async with open_contract_run(adapter, tmp_path / "kernel") as run:
            run.agent.script = script
            await adapter.inject(user, "count", sender_id=user)
            await run.wait(lambda: adapter.sent_texts(user), what="the answer")
            await run.settle()
        assert adapter.sent_texts(user) == ["one two three"]
        assert len(adapter.graph.sent(user)) == 1


@pytest.mark.parametrize("where", ["channel", "account"])
async def test_streaming_on_is_refused_naming_the_key(tmp_path, where):
    from chatkernel.channels import ConfigError

    async with WhatsAppAdapter() as adapter:
        settings = {"streaming": "on"} if where == "channel" else {}
        if where == "account":
            adapter_config = adapter.account_config

            def with_streaming() -> dict[str, Any]:
                return {**adapter_config(), "streaming": "on"}

            adapter.account_config = with_streaming  # type: ignore[method-assign]
        with pytest.raises(ConfigError, match="cannot show a reply while it is written") \
                as caught:
            async with open_contract_run(adapter, tmp_path / "kernel",
                                         channel_settings=settings):
                pass
        assert caught.value.key.endswith("streaming")
