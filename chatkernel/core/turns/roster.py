"""The gateway's running agents by name (``[agent]`` is ``default``, ``[agents.*]`` the
others), and what a reload does to them.

A turn holds its agent (:meth:`Roster.hold`, :meth:`Roster.release`; or
:meth:`Roster.using` around it) and keeps it to its end: a reload that changes an
agent builds a new instance for the next turns, and the one it replaced is closed
once its last turn is over.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from chatkernel.core.turns.agents import Agent, redact_turns
from chatkernel.core.turns.bindings import Bindings, Chat, Match
from chatkernel.sdk.errors import ConfigError

if TYPE_CHECKING:
    from chatkernel.core.config import AgentConfig, KernelConfig
    from chatkernel.core.store.base import Store


class Roster:
    """The running agents and the bindings that choose among them.

    ``types``: the installed agent kinds by name; ``store``: what agents read history
    from; ``redact``: what every agent's output passes (the kernel's secrets).
    """

    def __init__(self, *, types: dict[str, type[Agent]], store: "Store",
                 redact: Callable[[str], str]) -> None:
        self._types = types
        self._store = store
        self._redact = redact
        self._agents: dict[str, Agent] = {}
        self._configs: dict[str, dict[str, Any]] = {}  # each agent's table, as built
        self._workspaces: dict[str, Path] = {}
        self._uses: dict[int, int] = {}  # turns running on an instance, by its id
        self._retired: dict[int, Agent] = {}  # replaced, closed when their turns end
        self.bindings = Bindings([], ())

    def start(self, config: "KernelConfig") -> None:
        """Build every agent of ``config`` (at the kernel's start)."""
        self.bindings = Bindings.from_config(config)
        for name, agent_config in config.named_agents().items():
            self._agents[name], self._configs[name], self._workspaces[name] = \
                self._build(config, name, agent_config)

    def _build(self, config: "KernelConfig", name: str, agent_config: "AgentConfig"
               ) -> tuple[Agent, dict[str, Any], Path]:
        """A new instance of agent ``name``, the table it was built from, its workspace."""
        workspace = config.agent_workspace(name)
        try:
            agent = self._types[agent_config.kind](
                agent_config.model_copy(update={"workspace": workspace}), self._store)
        except ConfigError:
            raise
        except Exception as exc:  # a plugin's kind: said as the config's problem
            raise ConfigError(f"the {agent_config.kind} agent {name!r} cannot be made: "
                              f"{type(exc).__name__}: {exc}",
                              key=config.agent_key(name, "kind")) from None
        redact_turns(agent, self._redact)
        return agent, agent_config.model_dump(), workspace

    @property
    def names(self) -> list[str]:
        """The agents' names, ``default`` (if there is one) first."""
        return sorted(self._agents, key=lambda name: (name != "default", name))

    def get(self, name: str) -> Agent | None:
        """The agent named ``name`` now (None: the config has none)."""
        return self._agents.get(name)

    def workspace(self, name: str) -> Path | None:
        """Agent ``name``'s workspace (its MEDIA paths and HEARTBEAT.md)."""
        return self._workspaces.get(name)

    def match(self, chat: Chat) -> Match:
        """Who answers ``chat``, and by which binding."""
        return self.bindings.match(chat)

    def access_level(self, name: str) -> str | None:
        """Agent ``name``'s own ``access_level`` (None: its table sets none, or there is
        no such agent)."""
        table = self._configs.get(name)
        return table.get("access_level") if table is not None else None

    def hold(self, agent: Agent) -> None:
        """Hold ``agent`` (one of :meth:`get`'s) for one turn, until :meth:`release`: a
        reload replacing it meanwhile leaves the turn on it, and closes it once its
        last turn ends. (Two plain calls: the turn path pays no context manager.)"""
        ident = id(agent)
        self._uses[ident] = self._uses.get(ident, 0) + 1

    async def release(self, agent: Agent) -> None:
        """The turn that held ``agent`` ended (closes it if a reload retired it and this
        was its last turn)."""
        ident = id(agent)
        self._uses[ident] -= 1
        if not self._uses[ident]:
            del self._uses[ident]
            if ident in self._retired:
                with anyio.CancelScope(shield=True):
                    await self._retired.pop(ident).aclose()

    @contextlib.asynccontextmanager
    async def using(self, agent: Agent) -> AsyncIterator[Agent]:
        """:meth:`hold` ``agent`` for the block, then :meth:`release` it."""
        self.hold(agent)
        try:
            yield agent
        finally:
            await self.release(agent)

    def in_use(self, agent: Agent) -> bool:
        return id(agent) in self._uses

    def replace(self, config: "KernelConfig") -> tuple[list[str], list[Agent]]:
        """Run on ``config``'s agents and bindings from now on (a reload), at once (no
        await): agents added, changed (a new instance) and removed. Returns their names,
        and the instances replaced that no turn runs on, for :meth:`retire`; one a turn
        runs on is closed when its last turn ends. An agent that cannot be built raises,
        changing nothing."""
        wanted = config.named_agents()
        changed = sorted(name for name in self._agents.keys() | wanted.keys()
                         if name not in wanted or name not in self._agents
                         or self._configs[name] != wanted[name].model_dump()
                         or self._workspaces[name] != config.agent_workspace(name))
        # Every new instance first: one that cannot be built changes nothing.
        built = {name: self._build(config, name, wanted[name])
                 for name in changed if name in wanted}
        self.bindings = Bindings.from_config(config)
        idle = []
        for name in changed:
            old = self._agents.pop(name, None)
            self._configs.pop(name, None)
            self._workspaces.pop(name, None)
            if name in built:
                self._agents[name], self._configs[name], self._workspaces[name] = built[name]
            if old is not None:
                if self.in_use(old):
                    self._retired[id(old)] = old
                else:
                    idle.append(old)
        return changed, idle

    @staticmethod
    async def retire(agents: list[Agent]) -> None:
        """Close the instances :meth:`replace` left over."""
        async with contextlib.AsyncExitStack() as stack:  # each one, whatever others raise
            for agent in agents:
                stack.push_async_callback(agent.aclose)

    async def aclose(self) -> None:
        """Close every agent (the kernel's end): each one, whatever others raise."""
        async with contextlib.AsyncExitStack() as stack:
            for agent in [*self._agents.values(), *self._retired.values()]:
                stack.push_async_callback(agent.aclose)
        self._agents.clear()
        self._retired.clear()
