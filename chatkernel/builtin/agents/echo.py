"""The ``echo`` agent: the embedded default, and a test double."""

from __future__ import annotations

from collections.abc import AsyncIterator

from chatkernel.core.turns.agents import Agent, AgentEvent, TurnRequest, describe_media


class EchoAgent(Agent):
    """Answers every turn with its text: the embedded default, and a test double.

    A turn with no text but media answers with what was received.
    """

    name = "echo"

    async def turn(self, request: TurnRequest) -> AsyncIterator[AgentEvent]:
        text = request.text
        if not text.strip() and request.media:
            text = describe_media(request.media)
        yield AgentEvent.reply(text)
