"""One running kernel around an adapter's channel, its receive loop and the gateway's HTTP
server: :func:`open_contract_run` makes it, a :class:`ContractRun` is what a contract test
drives; :func:`wait_until`, the bounded wait every test uses."""

from __future__ import annotations

import contextlib
import inspect
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import anyio

from chatkernel.core.turns.agents import AgentEvent
from chatkernel.sdk.models import InboundMessage, ProbeResult
from chatkernel.testing.agents import ScriptedAgent, agent_plugin, scripted_agent
from chatkernel.testing.contract.adapter import ACCOUNT, PlatformAdapter
from chatkernel.testing.memory import KernelHarness


# -- waiting ----------------------------------------------------------------------------


async def wait_until(predicate: Callable[[], bool | Awaitable[bool]], *,
                     timeout: float = 10.0, what: str = "the condition",
                     state: Callable[[], Any] | None = None,
                     check: Callable[[], None] | None = None, interval: float = 0.02) -> None:
    """Poll ``predicate`` until it is true; fail after ``timeout`` seconds.

    ``predicate`` may be a coroutine function (a store read, an HTTP request...).
    ``what`` and ``state()`` make the failure say what was awaited and what was
    seen instead; ``check()`` runs on every poll and may raise to stop early
    (a crashed receive loop).
    """
    deadline = anyio.current_time() + timeout
    while True:
        if check is not None:
            check()
        met = predicate()
        if inspect.isawaitable(met):
            met = await met
        if met:
            return
        if anyio.current_time() >= deadline:
            seen = f"; seen: {state()!r}" if state is not None else ""
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}{seen}")
        await anyio.sleep(interval)


# -- one running kernel around the adapter's channel -----------------------------------------


class ContractReceiver:
    """What the receive loop gets as ``deliver``: the kernel's receiver
    (``kernel.receiver``, which a gateway hands to the transport's ``run``), one message at a
    time or a batch (``many``, or ``many_shared`` for a webhook's), recording each
    outcome in ``run.deliveries`` and crashing where
    :meth:`ContractRun.crash_before_delivering` says."""

    def __init__(self, run: ContractRun) -> None:
        self._run = run

    async def __call__(self, message: InboundMessage) -> str:
        await self._run._crash_if_due([message])
        outcome = await self._run.kernel.receiver(message)
        self._run.deliveries.append((message, outcome))
        return outcome

    async def many(self, messages: list[InboundMessage]) -> list[str]:
        await self._run._crash_if_due(messages)
        outcomes = await self._run.kernel.receiver.many(messages)
        self._run.deliveries.extend(zip(messages, outcomes))
        return outcomes

    async def many_shared(self, messages: list[InboundMessage]) -> list[str]:
        await self._run._crash_if_due(messages)
        outcomes = await self._run.kernel.receiver.many_shared(messages)
        self._run.deliveries.extend(zip(messages, outcomes))
        return outcomes


def _reply_script(overrides: dict[str, str]) -> Callable[[Any], list[AgentEvent]]:
    def script(request: Any) -> list[AgentEvent]:
        for key, reply in overrides.items():
            if key in request.text:
                return [AgentEvent.reply(reply)]
        return [AgentEvent.reply(f"re: {request.text}")]

    return script


class ContractRun:
    """A kernel with the adapter's channel and its receive loop: what a contract test drives.

    ``agent`` is the scripted agent class (``agent.requests`` lists its turns;
    set ``agent.gate = anyio.Event()`` to hold turns open); ``replies`` maps a
    token to the reply the agent gives to any message containing it (default
    ``re: <text>``); ``deliveries`` lists ``(message, outcome)`` for every
    message the receive loop delivered to the kernel (``accepted``,
    ``duplicate``, or ``invalid`` in a batch); ``receiver`` is the
    ``deliver`` the loop got. ``harness`` is the :class:`KernelHarness` running the
    kernel: its verbs (``run.harness.send_text(...)``, ``run.harness.session_log(...)``,
    ``run.harness.workspace``...) are how a test drives and reads the kernel.
    """

    def __init__(self, adapter: PlatformAdapter, harness: KernelHarness,
                 agent: type[ScriptedAgent], replies: dict[str, str]) -> None:
        self.adapter = adapter
        self.harness = harness
        #: The kernel's internals, for the kernel's own tests; a plugin's use ``harness``.
        self.kernel = harness.kernel
        #: The kernel's probes and health snapshots (see KernelHarness.health).
        self.health = harness.health
        self.account = self.kernel.accounts[f"{adapter.channel_name}:{ACCOUNT}"]
        self.channel = self.account.channel
        self.agent = agent
        self.replies = replies
        self.deliveries: list[tuple[InboundMessage, str]] = []
        self.receiver = ContractReceiver(self)
        self.loop_error: BaseException | None = None
        #: Set once a delivery was cut short by :meth:`crash_before_delivering`.
        self.crashed = False
        self._crash_token: str | None = None
        self._dead = anyio.Event()  # set when the run stops: crashed deliveries fail then
        self._loop_scope: anyio.CancelScope | None = None
        self._loop_done: anyio.Event | None = None
        #: The base URL of the gateway's HTTP server (``/healthz``, webhooks).
        self.url = ""

    @property
    def timeout(self) -> float:
        return self.adapter.timeout

    @property
    def text_limit(self) -> int:
        return self.adapter.text_limit or self.channel.limits.text_limit

    # -- the receive loop ----------------------------------------------------------------

    async def _crash_if_due(self, messages: list[InboundMessage]) -> None:
        token = self._crash_token
        if token is not None and any(token in message.text for message in messages):
            # The process dies before the kernel records the messages: the receive
            # loop stops where it is, a webhook request never gets its answer.
            self._crash_token = None
            self.crashed = True
            if self._loop_scope is not None:
                self._loop_scope.cancel()
        if self.crashed:  # a dead gateway takes nothing more
            await self._dead.wait()
            raise ConnectionAbortedError("the gateway died during this delivery")

    async def _run_loop(self, done: anyio.Event, *, task_status: Any) -> None:
        try:
            with anyio.CancelScope() as scope:
                self._loop_scope = scope
                # The account's state as the supervisor keeps it, for health.
                self.account.runtime.loop_started(time.time())
                task_status.started()
                try:
                    await self.account.transport.run(self.receiver)
                except Exception as exc:  # recorded: the waits fail with it at once
                    self.loop_error = exc
                else:
                    if not scope.cancel_called:
                        self.loop_error = RuntimeError(
                            f"{type(self.account.transport).__name__}.run returned; a "
                            "receive loop must run until it is cancelled")
        finally:
            self.account.runtime.set_state("stopped", time.time())
            done.set()

    async def start_loop(self) -> None:
        """Start the account's receive loop (``account.transport.run(receiver)``)."""
        if self._loop_done is not None and not self._loop_done.is_set():
            raise RuntimeError("the receive loop is already running")
        self.loop_error = None
        self._loop_done = anyio.Event()
        await self.kernel.task_group.start(self._run_loop, self._loop_done)

    async def stop_loop(self) -> None:
        """Cancel the receive loop and wait (bounded) until it has stopped."""
        if self._loop_scope is None or self._loop_done is None:
            return
        self._loop_scope.cancel()
        with anyio.fail_after(self.timeout):
            await self._loop_done.wait()
        self._loop_scope = None

    def crash_before_delivering(self, token: str) -> None:
        """Simulate a crash when the next message containing ``token`` is delivered
        (alone or in a batch): the kernel never records it (nor the rest of its
        batch), the receive loop stops, a webhook delivery fails when the run ends,
        and nothing more is taken until then."""
        self._crash_token = token

    def check_loop(self) -> None:
        """Raise if the receive loop crashed."""
        if self.loop_error is not None:
            raise AssertionError(f"the receive loop of {self.adapter.channel_name} stopped: "
                                 f"{self.loop_error!r}") from self.loop_error

    # -- reading what was sent -----------------------------------------------------------

    def texts(self, chat_id: str, *, thread_id: str | None = None) -> list[str]:
        return list(self.adapter.sent_texts(chat_id, thread_id=thread_id))

    def tokens_sent(self, chat_id: str, tokens: Iterable[str], *,
                    thread_id: str | None = None) -> list[str]:
        """The tokens found in the chat's sent texts, in the order the texts were sent."""
        tokens = list(tokens)
        return [token for text in self.texts(chat_id, thread_id=thread_id)
                for token in tokens if token in text]

    async def wait(self, predicate: Callable[[], bool], *, what: str,
                   state: Callable[[], Any] | None = None) -> None:
        """:func:`wait_until` bounded by the adapter's timeout, failing early if the loop died."""
        await wait_until(predicate, timeout=self.timeout, what=what, state=state,
                         check=self.check_loop)

    async def wait_for_tokens(self, chat_id: str, tokens: Iterable[str], *,
                              thread_id: str | None = None) -> None:
        """Wait until every token appears in a text the bot sent to the chat."""
        tokens = list(tokens)
        where = f"{chat_id}" + (f" thread {thread_id}" if thread_id else "")
        await self.wait(lambda: set(tokens) <= set(self.tokens_sent(chat_id, tokens,
                                                                    thread_id=thread_id)),
                        what=f"replies containing {tokens} in chat {where}",
                        state=lambda: self.texts(chat_id, thread_id=thread_id))

    def delivered(self, tokens: Iterable[str]) -> list[str]:
        """The tokens found in the messages the receive loop handed the kernel so far."""
        tokens = list(tokens)
        return [token for message, _ in self.deliveries for token in tokens
                if token in message.text]

    async def wait_delivered(self, tokens: Iterable[str]) -> None:
        """Wait until a message containing each token reached the kernel. A platform
        pushes events in its own time (a socket, a webhook): :meth:`settle` waits only
        for what the kernel holds, so a test about what a message did *not* cause
        waits for the message first."""
        tokens = list(tokens)
        await self.wait(lambda: set(tokens) <= set(self.delivered(tokens)),
                        what=f"messages containing {tokens} delivered to the kernel",
                        state=lambda: [message.text for message, _ in self.deliveries])

    async def settle(self) -> None:
        """Wait until every turn finished and every queued payload was sent."""
        await self.harness.settle(timeout=self.timeout)
        self.check_loop()

    def agent_texts(self) -> list[str]:
        return [request.text for request in self.agent.requests]

    async def probe(self) -> ProbeResult:
        """Probe the account as ``chatkernel health`` does (``health.probe``:
        the ``health_probe`` hook, bounded by the adapter's timeout)."""
        results = await self.health.probe([self.account], timeout=self.timeout)
        return results[self.account.key]

    def turn_for(self, token: str) -> Any:
        """The one agent turn whose text contains ``token``."""
        found = [request for request in self.agent.requests if token in request.text]
        assert len(found) == 1, f"expected one agent turn with {token!r}: {self.agent_texts()}"
        return found[0]


@contextlib.asynccontextmanager
async def open_contract_run(adapter: PlatformAdapter, home: Path, *,
                            allow_from: Iterable[str] = ("*",), loop: bool = True,
                            account_settings: dict[str, Any] | None = None,
                            extra_config: dict[str, Any] | None = None,
                            channel_settings: dict[str, Any] | None = None,
                            channel_clock: Any = None, pacing: Any = None
                            ) -> AsyncIterator[ContractRun]:
    """Start a kernel (state under ``home``) with the adapter's channel and a scripted agent.

    The queue is in ``followup`` mode without debounce, so each message is a
    turn of its own. The gateway's address is bound and given to the adapter
    (:meth:`PlatformAdapter.attach_gateway`) before the account is configured;
    it serves once the kernel has started. ``loop``: start the receive loop
    too. On exit the receive loop stops, then the gateway's HTTP server, then
    the kernel. A second run on the same ``home`` reuses the same store (a
    restart). ``channel_settings``: more keys of ``[channels.<name>]``;
    ``account_settings``: more keys of the account (``{"dm_policy": "allowlist"}``).
    ``channel_clock``: the clock the channel's receive loop and timers run on (a
    :class:`~chatkernel.testing.clock.ManualClock` the test advances; default: real time).
    ``pacing``: the time the kernel's rate limits count in (see
    chatkernel.testing.clock.ScaledClock).
    """
    if adapter.channel_plugin is None or not adapter.channel_name:
        raise TypeError(f"{type(adapter).__name__} must set channel_plugin and channel_name")
    replies: dict[str, str] = {}
    agent = scripted_agent(script=_reply_script(replies), name="contract")
    plugin_name = getattr(adapter.channel_plugin, "__name__", None) or \
        f"chatkernel_{adapter.channel_name}"
    async with contextlib.AsyncExitStack() as stack:
        listener = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
        await adapter.attach_gateway(f"http://127.0.0.1:{listener.getsockname()[1]}")
        section = {**adapter.channel_config(), **(channel_settings or {}),
                   "accounts": {ACCOUNT: {**adapter.account_config(),
                                          "allow_from": list(allow_from),
                                          **(account_settings or {})}}}
        config: dict[str, Any] = {
            "agent": {"kind": "contract"},
            "queue": {"mode": "followup", "debounce_ms": 0},
            "channels": {adapter.channel_name: section},
        }
        for key, value in (extra_config or {}).items():
            config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) \
                else value
        harness = KernelHarness(home, config=config, channel_clock=channel_clock, plugins=[
            (plugin_name, adapter.channel_plugin),
            ("chatkernel.testing.contract.agent", agent_plugin(agent))], pacing=pacing)
        await stack.enter_async_context(harness)
        run = ContractRun(adapter, harness, agent, replies)
        await _serve_gateway(run, stack, listener)
        if loop:
            await run.start_loop()
        stack.push_async_callback(run.stop_loop)
        stack.callback(run._dead.set)  # first on exit
        yield run
    run.check_loop()


async def _serve_gateway(run: ContractRun, stack: contextlib.AsyncExitStack,
                         listener: socket.socket) -> None:
    """Serve the gateway's app (every channel's routes, the control API, health) on the
    socket already bound, as the gateway does."""
    from aiohttp import web

    from chatkernel.core.gateway.control import new_token
    from chatkernel.core.gateway.process import build_app

    runner = web.AppRunner(build_app(run.kernel, new_token()), access_log=None,
                           handle_signals=False)
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    await web.SockSite(runner, listener).start()
    run.url = f"http://127.0.0.1:{listener.getsockname()[1]}"
