"""A scriptable agent for tests: records every turn and can hold a turn open."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio

from chatkernel.core.turns.agents import Agent, AgentEvent, TurnRequest
from chatkernel.hookspecs import hookimpl


class ScriptedAgent(Agent):
    """Replies ``re: <text>``; tests control it through class attributes.

    Use :func:`scripted_agent` to get a fresh subclass per test.
    """

    name = "scripted"
    requests: list[TurnRequest]
    steered: list[str]
    #: while set to an unset Event, every turn waits for it before answering.
    gate: anyio.Event | None
    #: events to yield instead of the default reply (a callable of the request returning
    #: them, or an async iterator of them).
    script: Any
    running: int
    max_running: int

    async def turn(self, request: TurnRequest) -> AsyncIterator[AgentEvent]:
        cls = type(self)
        cls.requests.append(request)
        cls.running += 1
        cls.max_running = max(cls.max_running, cls.running)
        try:
            if cls.gate is not None:
                await cls.gate.wait()
            if cls.script is not None:
                events = cls.script(request)
                if hasattr(events, "__aiter__"):  # an async script paces itself
                    async for event in events:
                        yield event
                else:
                    for event in events:
                        yield event
            else:
                yield AgentEvent.reply(f"re: {request.text}")
        finally:
            cls.running -= 1

    async def steer(self, session_key: str, text: str) -> bool:
        if not type(self).supports_steer:
            return False
        type(self).steered.append(text)
        return True


def scripted_agent(*, steer: bool = False, gate: bool = False, script: Any = None,
                   name: str = "scripted") -> type[ScriptedAgent]:
    """A fresh ScriptedAgent subclass with its own recorded state."""
    return type("ScriptedAgentForTest", (ScriptedAgent,), {
        "name": name, "supports_steer": steer, "requests": [], "steered": [],
        "gate": anyio.Event() if gate else None, "script": script, "running": 0,
        "max_running": 0,
    })


def agent_plugin(*agent_classes: type[Agent]) -> object:
    """A plugin object registering the given agent classes."""

    class AgentPlugin:
        @staticmethod
        @hookimpl
        def register_agents(register):
            for cls in agent_classes:
                register(cls)

    return AgentPlugin


class LabelAgent(Agent):
    """Answers ``<label> (<n> before): <text>``, its label its ``system_prompt`` and ``n``
    the user messages in its session's history: with several agents of this kind, a
    reply says which agent answered and what history it had."""

    name = "label"

    async def turn(self, request: TurnRequest) -> AsyncIterator[AgentEvent]:
        history = await self.store.read_log(request.session_key, session_id=request.session_id,
                                            roles=("user",), before_seq=request.log_seq)
        yield AgentEvent.reply(f"{self.config.system_prompt} ({len(history)} before): "
                               f"{request.text}")


#: The words :func:`paced_stream` writes, and the whole answer it ends with.
STREAM_WORDS = [f"word{n:02d}" for n in range(5)]
STREAM_ANSWER = "**Here** is " + " ".join(STREAM_WORDS)


def paced_stream(run: Any, shown: Any) -> Any:
    """A :class:`ScriptedAgent` script writing :data:`STREAM_ANSWER` a piece at a time,
    each piece only once the chat shows the last (``shown()``: the texts the chat shows
    now, ``run.wait`` the contract run's bounded wait), then the whole answer: a live
    reply's every state is seen, whatever the machine's pace."""

    async def script(request: Any) -> Any:
        pieces = ["**Here", "** is "] + [f"{word} " for word in STREAM_WORDS[:-1]] \
            + [STREAM_WORDS[-1]]
        for piece in pieces:
            yield AgentEvent("text", piece, final=False)
            last = piece.strip(" *")
            await run.wait(lambda: any(last in text for text in shown()),
                           what=f"the chat showing {last!r}", state=shown)
        yield AgentEvent.reply(STREAM_ANSWER)

    return script
