"""The ``echo`` agent: the embedded default, and a test double."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import anyio

from chatkernel.core.turns.agents import Agent, AgentEvent, TurnRequest, describe_media

#: A word and the spaces after it: the pieces the echo agent types.
_WORDS = re.compile(r"\S+\s*|\s+")


class EchoAgent(Agent):
    """Answers every turn with its text: the embedded default, and a test double.

    A turn with no text but media answers with what was received. With
    ``agent.echo_typing_ms`` set, it streams the answer a word at a time (non-final
    text events), as a model does, then sends it whole.
    """

    name = "echo"

    async def turn(self, request: TurnRequest) -> AsyncIterator[AgentEvent]:
        text = request.text
        if not text.strip() and request.media:
            text = describe_media(request.media)
        pause = getattr(self.config, "echo_typing_ms", 0) / 1000
        if pause:
            for word in _WORDS.findall(text):
                yield AgentEvent("text", word, final=False)
                await anyio.sleep(pause)
        yield AgentEvent.reply(text)
