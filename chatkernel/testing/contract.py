"""The channel contract: one test suite every channel plugin runs against its own fake.

A channel plugin proves it behaves like every other channel by running this
suite, unchanged, against its protocol-faithful fake platform server. The
plugin's tests implement a :class:`PlatformAdapter` (how to start the fake,
make a user write to the bot, and read what the bot sent) and subclass
:class:`ChannelContract`::

    from chatkernel.testing.contract import ChannelContract, PlatformAdapter

    class MyAdapter(PlatformAdapter):
        channel_plugin = chatkernel_mychat      # the plugin object (often the module)
        channel_name = "mychat"
        supports_threads = False                # declare what the platform lacks
        ...

    class TestMyChatContract(ChannelContract):
        adapter_class = MyAdapter

Each contract test runs a real in-process kernel
(:class:`chatkernel.testing.memory.KernelHarness`) with the plugin's channel
configured from :meth:`PlatformAdapter.account_config`, a scripted agent, the
queue in ``followup`` mode without debounce, and the channel's receive loop
(``transport.run(deliver)``, ``deliver`` being the kernel's receiver, as a gateway
hands it) running against the fake, the gateway's HTTP server serving the
channel's webhook routes. Optional platform features are capabilities: a test
about a feature is skipped only when the adapter declares the capability absent
(``supports_<feature> = False``). See ``docs/testing.md``.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import socket
import struct
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest

from chatkernel.core.turns.agents import AgentEvent
from chatkernel.sdk.models import InboundMessage, ProbeResult
from chatkernel.testing.agents import ScriptedAgent, agent_plugin, scripted_agent
from chatkernel.testing.contract_faults import FaultChecks
from chatkernel.testing.memory import KernelHarness

__all__ = ["ChannelContract", "ContractReceiver", "ContractRun", "PlatformAdapter", "needs",
           "open_contract_run", "wait_until"]

#: The account every contract test configures: ``[channels.<name>.accounts.main]``.
ACCOUNT = "main"


# -- the adapter a plugin's tests implement ----------------------------------------------


def fast_pacing() -> dict[str, Any]:
    """Channel-wide settings (``[channels.<name>]``) that pace and retry far faster than
    any platform needs, so the suite's sends never wait out real-world limits: what a
    :meth:`PlatformAdapter.channel_config` usually returns (a fresh dict each call)."""
    return {"rate_limits": {"chat": "100/s", "account": "1000/s"},
            "retry": {"attempts": 3, "base_delay_ms": 10, "jitter": 0}}


class PlatformAdapter:
    """Drives one plugin's fake platform for the contract suite.

    Subclasses set :attr:`channel_plugin` and :attr:`channel_name` and
    implement :meth:`start`, :meth:`stop`, :meth:`account_config`,
    :meth:`inject` and :meth:`sent_texts`; each optional capability below is
    on by default, so a platform that lacks one says so (``supports_threads =
    False``) and the test about it is skipped; a platform that has it
    implements the method the capability names.

    Ids are strings, as the channel puts them in ``InboundMessage``: override
    :meth:`direct_chat`, :meth:`group_chat`, :meth:`user_id` and
    :meth:`thread_id` when the platform has its own id shapes (Telegram's
    private chat id is the user's id; its group ids are negative).

    Use it as an async context manager: ``async with MyAdapter() as adapter``.
    """

    #: The plugin object registering the channel (the plugin module, or a class
    #: with a ``register_channels`` hookimpl).
    channel_plugin: ClassVar[Any] = None
    #: The channel's name: the key under ``[channels.<name>]``.
    channel_name: ClassVar[str] = ""

    #: Groups with mentions: :meth:`inject` honours ``group`` and ``mention``.
    supports_groups: ClassVar[bool] = True
    #: Threads or topics: :meth:`inject` honours ``thread_id`` and
    #: :meth:`sent_texts` filters by it.
    supports_threads: ClassVar[bool] = True
    #: Media out: :meth:`sent_media` reports the files the bot sent.
    supports_media_out: ClassVar[bool] = True
    #: A typing indicator: :meth:`typing_count` counts what reached the platform.
    supports_typing: ClassVar[bool] = True
    #: The platform redelivers events: :meth:`redeliver_last` does it on demand.
    supports_redelivery: ClassVar[bool] = True
    #: Credentials can be revoked on the fake: :meth:`revoke_credentials` (off by default).
    supports_revoke: ClassVar[bool] = False
    #: The platform refuses one chat's messages for that chat's own reason:
    #: :meth:`refuse_chat` (off by default).
    supports_chat_refusal: ClassVar[bool] = False
    #: The platform can deliver the bot's own messages: :meth:`inject_own_message`.
    supports_own_messages: ClassVar[bool] = True
    #: The platform sends events that are not messages for the agent (edits, membership
    #: changes, service messages...): :meth:`inject_non_message_event` makes each kind
    #: named in :attr:`non_message_events`.
    supports_non_message_events: ClassVar[bool] = True
    #: The kinds of non-message events :meth:`inject_non_message_event` knows, in the
    #: platform's words (``edited_message``, ``my_chat_member``...).
    non_message_events: ClassVar[tuple[str, ...]] = ()

    #: A live reply can be watched (:meth:`live_timeline`), for a channel that declares
    #: ``chatkernel.channels.LiveReplies`` (one that does not is checked to refuse
    #: ``streaming = "on"``, and needs no :meth:`live_timeline`).
    supports_live_replies: ClassVar[bool] = True

    #: The channel's text limit, to build a reply that must be split; None: the
    #: channel class's ``limits.text_limit``.
    text_limit: ClassVar[int | None] = None
    #: Seconds any single wait of a contract test may take.
    timeout: ClassVar[float] = 10.0

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Start the fake platform (bind its HTTP server on 127.0.0.1)."""
        raise NotImplementedError("PlatformAdapter.start: start the fake platform")

    async def stop(self) -> None:
        """Stop the fake platform."""

    async def __aenter__(self) -> "PlatformAdapter":
        await self.start()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.stop()

    async def attach_gateway(self, url: str) -> None:
        """The gateway's HTTP server (every channel's ``http_routes``) is at ``url``.

        Called before each kernel start, before :meth:`account_config`, so a
        webhook account can name its public URL (``f"{url}/mychat/main/events"``);
        the address is bound already and serves once the kernel has started (a
        delivery made sooner waits for it). Each start has a new address: a
        webhook platform points its deliveries there, or the channel registers
        the URL from its config as it starts. Deliveries the fake could not make
        while no gateway listened must be retried or held, as the real platform
        does. The default does nothing.
        """

    # -- configuration -------------------------------------------------------------------

    def account_config(self) -> dict[str, Any]:
        """The ``[channels.<name>.accounts.main]`` table pointing at the fake
        (base URL, token...). ``allow_from`` is set by the contract."""
        raise NotImplementedError("PlatformAdapter.account_config: point the account at the fake")

    def channel_config(self) -> dict[str, Any]:
        """Extra channel-wide settings (``[channels.<name>]``: ``retry``,
        ``rate_limits``...), e.g. faster pacing than the real platform needs."""
        return {}

    # -- ids -----------------------------------------------------------------------------

    def user_id(self, n: int) -> str:
        """The sender id the channel reports for test user ``n`` (1, 2, ...)."""
        return f"user-{n}"

    def direct_chat(self, n: int) -> str:
        """The chat id of user ``n``'s direct chat with the bot."""
        return f"dm-{n}"

    def group_chat(self, n: int) -> str:
        """The chat id of group ``n`` (the bot is a member)."""
        return f"group-{n}"

    def thread_id(self, n: int) -> str:
        """The thread (topic) id of thread ``n``, as the channel reports it."""
        return f"thread-{n}"

    # -- the user's side -----------------------------------------------------------------

    async def inject(self, chat_id: str, text: str, *, sender_id: str = "user-1",
                     sender_name: str = "", group: bool = False, mention: bool = False,
                     thread_id: str | None = None) -> None:
        """A user writes ``text`` to the bot in ``chat_id``, as the platform delivers it.

        ``group``: ``chat_id`` is a group chat; ``mention``: the message
        mentions the bot (the adapter adds the platform's mention: ``@name``,
        ``<@U…>``...); ``thread_id``: in that thread or topic. Returns once the
        platform holds the update (a poll will get it, a webhook will carry it).
        """
        raise NotImplementedError("PlatformAdapter.inject: make the fake deliver a message")

    def sent_texts(self, chat_id: str, *, thread_id: str | None = None) -> list[str]:
        """What the bot sent to ``chat_id``, in order, as the user reads it.

        Markup rendered to text (HTML tags stripped, entities unescaped); media
        captions are not texts. With ``thread_id``, only the messages sent in
        that thread; without, every message in the chat.
        """
        raise NotImplementedError("PlatformAdapter.sent_texts: read what the bot sent")

    def sent_media(self, chat_id: str) -> list[tuple[str, str | None]]:
        """``(kind, filename)`` of every file the bot sent to ``chat_id``, in order.

        ``kind`` in the channel's vocabulary (its ``limits.media_kinds`` values:
        ``photo``, ``document``...); ``filename`` as the platform keeps it, or
        None where the platform does not keep names (Telegram photos).
        """
        raise NotImplementedError("implement PlatformAdapter.sent_media, or set "
                                  "supports_media_out = False")

    def typing_count(self, chat_id: str) -> int:
        """How many typing indications reached the platform for ``chat_id``."""
        raise NotImplementedError("implement PlatformAdapter.typing_count, or set "
                                  "supports_typing = False")

    async def redeliver_last(self) -> None:
        """Make the platform deliver the last injected event again, with the same
        platform ids (a Slack retry, a WhatsApp repeat, an unconfirmed update)."""
        raise NotImplementedError("implement PlatformAdapter.redeliver_last, or set "
                                  "supports_redelivery = False")

    async def revoke_credentials(self) -> None:
        """Make the fake refuse the account's credentials from now on."""
        raise NotImplementedError("implement PlatformAdapter.revoke_credentials, or leave "
                                  "supports_revoke = False")

    async def refuse_chat(self, chat_id: str) -> None:
        """From now on the platform refuses the bot's messages to ``chat_id`` for a
        reason of that chat alone (it is gone, the bot is not in it, the user's quota
        is spent), the way the platform says so: in the answer to the send, or in a
        later ``failed`` delivery status."""
        raise NotImplementedError("implement PlatformAdapter.refuse_chat, or leave "
                                  "supports_chat_refusal = False")

    async def inject_own_message(self, chat_id: str, text: str) -> None:
        """The platform delivers a message the bot itself sent to ``chat_id`` (an echo
        of its own send, as Slack's events and WeChat's polls carry), as it would."""
        raise NotImplementedError("implement PlatformAdapter.inject_own_message, or set "
                                  "supports_own_messages = False")

    def live_timeline(self, chat_id: str) -> list[tuple[str, str]]:
        """What the user saw of the bot's replies in ``chat_id``, in order:
        ``("preview", text)`` for each state a live reply's preview showed (a draft, the
        preview message as sent or edited, a stream's text so far) and ``("final",
        text)`` for each message of a finished answer as it was delivered (sent, or
        the preview edited to it). Texts as :meth:`sent_texts` renders them."""
        raise NotImplementedError("implement PlatformAdapter.live_timeline, or set "
                                  "supports_live_replies = False")

    async def inject_non_message_event(self, kind: str, chat_id: str, *, sender_id: str,
                                       text: str) -> None:
        """The platform delivers an event of ``kind`` (one of
        :attr:`non_message_events`) in ``chat_id``, caused by ``sender_id``, that is
        not a message for the agent. Where the event carries text (an edit's new text)
        it is ``text``, so a test can see whether it reached the agent."""
        raise NotImplementedError("implement PlatformAdapter.inject_non_message_event, or "
                                  "set supports_non_message_events = False")


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
    (``kernel.receiver``, which a gateway hands to ``Channel.run``), one message at a
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
    ``deliver`` the loop got.
    """

    def __init__(self, adapter: PlatformAdapter, harness: KernelHarness,
                 agent: type[ScriptedAgent], replies: dict[str, str]) -> None:
        self.adapter = adapter
        self.harness = harness
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
    restart). ``channel_settings``: more keys of ``[channels.<name>]``.
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
                                          "allow_from": list(allow_from)}}}
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


# -- files for the media test -----------------------------------------------------------------


def png_bytes(width: int = 2, height: int = 2) -> bytes:
    """A small, valid PNG (fakes that check image dimensions accept it)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2,
                                                              0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def long_text(limit: int, factor: float = 2.5) -> str:
    """About ``factor * limit`` characters of numbered words in lines and paragraphs."""
    lines: list[str] = []
    size, n = 0, 0
    while size < factor * limit:
        line = " ".join(f"w{n + i:05d}" for i in range(10))
        n += 10
        lines.append(line)
        size += len(line) + 1
        if len(lines) % 6 == 0:
            lines.append("")
    return "\n".join(lines).strip()


# -- the suite -----------------------------------------------------------------------------


def needs(capability: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a contract test as needing ``supports_<capability>`` (skipped without it)."""
    def mark(test: Callable[..., Any]) -> Callable[..., Any]:
        test.contract_capability = capability  # type: ignore[attr-defined]
        return test

    return mark



class ChannelContract(FaultChecks):
    """The tests every channel passes against its fake platform.

    Subclass it as ``Test<Channel>Contract`` and set :attr:`adapter_class`
    (or override the ``platform_adapter`` fixture, an async fixture yielding a
    started adapter). Tests skipped by capability: redelivery
    (``supports_redelivery``), groups (``supports_groups``), threads
    (``supports_threads``), media out (``supports_media_out``), typing
    (``supports_typing``), revoked credentials (``supports_revoke``), the bot's
    own messages (``supports_own_messages``), non-message events
    (``supports_non_message_events``), one chat's refusal (``supports_chat_refusal``),
    live replies (``supports_live_replies``; a channel that does not declare
    ``LiveReplies`` passes it by refusing ``streaming = "on"``).
    """

    pytestmark = pytest.mark.anyio

    #: The adapter class the default ``platform_adapter`` fixture starts.
    adapter_class: ClassVar[type[PlatformAdapter] | None] = None

    @pytest.fixture
    def anyio_backend(self) -> str:
        """asyncio only (aiohttp needs it), whatever other backends are installed."""
        return "asyncio"

    @pytest.fixture
    async def platform_adapter(self) -> AsyncIterator[PlatformAdapter]:
        """A started adapter (override this fixture, or set ``adapter_class``)."""
        if self.adapter_class is None:
            pytest.fail(f"{type(self).__name__}: set adapter_class or override the "
                        "platform_adapter fixture")
        async with self.adapter_class() as adapter:
            yield adapter

    def contract_run(self, adapter: PlatformAdapter, home: Path,
                     **options: Any) -> contextlib.AbstractAsyncContextManager[ContractRun]:
        """A kernel around the adapter's channel (see :func:`open_contract_run`)."""
        return open_contract_run(adapter, home, **options)

    @pytest.fixture
    async def contract_kernel(self, platform_adapter: PlatformAdapter, tmp_path: Path,
                              request: pytest.FixtureRequest) -> AsyncIterator[ContractRun]:
        """A running kernel, anyone allowed, with the receive loop running."""
        capability = getattr(request.function, "contract_capability", None)
        if capability is not None:  # skip before starting anything
            self.require(platform_adapter, capability)
        async with self.contract_run(platform_adapter, tmp_path / "kernel") as run:
            yield run

    @staticmethod
    def require(adapter: PlatformAdapter, capability: str) -> None:
        if not getattr(adapter, f"supports_{capability}"):
            pytest.skip(f"{type(adapter).__name__} declares supports_{capability} = False")

    # 1
    async def test_direct_message_is_answered_in_the_same_chat(self, contract_kernel):
        run = contract_kernel
        adapter = run.adapter
        chat, other = adapter.direct_chat(1), adapter.direct_chat(2)
        await adapter.inject(other, "hello dm02z", sender_id=adapter.user_id(2))
        await adapter.inject(chat, "hello dm01z", sender_id=adapter.user_id(1),
                             sender_name="Ada")
        await run.wait_for_tokens(chat, ["dm01z"])
        await run.wait_for_tokens(other, ["dm02z"])
        await run.settle()
        assert run.tokens_sent(chat, ["dm01z", "dm02z"]) == ["dm01z"], run.texts(chat)
        assert run.tokens_sent(other, ["dm01z", "dm02z"]) == ["dm02z"], run.texts(other)
        request = run.turn_for("dm01z")
        # The channel normalized the event: its name, the sender's id, the chat.
        assert f"channel: {adapter.channel_name}" in request.envelope, request.envelope
        assert f"user: {adapter.user_id(1)}" in request.envelope, request.envelope
        assert chat in request.session_key, request.session_key

    # 2
    @needs("redelivery")
    async def test_redelivered_update_is_answered_once(self, contract_kernel):
        run = contract_kernel
        adapter = run.adapter
        chat, user = adapter.direct_chat(1), adapter.user_id(1)
        await adapter.inject(chat, "once rd01z", sender_id=user)
        await run.wait_for_tokens(chat, ["rd01z"])
        await adapter.redeliver_last()
        # A later message in the same chat: once it is answered, the redelivered
        # event before it has been through the channel too.
        await adapter.inject(chat, "after rd02z", sender_id=user)
        await run.wait_for_tokens(chat, ["rd02z"])
        await run.settle()
        assert run.tokens_sent(chat, ["rd01z", "rd02z"]) == ["rd01z", "rd02z"], run.texts(chat)
        assert sum("rd01z" in text for text in run.agent_texts()) == 1, run.agent_texts()

    # 3
    async def test_long_reply_arrives_in_order_in_several_messages(self, contract_kernel):
        run = contract_kernel
        adapter = run.adapter
        chat = adapter.direct_chat(1)
        limit = run.text_limit
        reply = long_text(limit)
        words = reply.split()
        run.replies["lr01z"] = reply
        await adapter.inject(chat, "tell me everything lr01z", sender_id=adapter.user_id(1))
        await run.wait(lambda: sum(len(t.split()) for t in run.texts(chat)) >= len(words),
                       what=f"{len(words)} words of a long reply in chat {chat}",
                       state=lambda: [len(t) for t in run.texts(chat)])
        await run.settle()
        texts = run.texts(chat)
        assert len(texts) >= math.ceil(len(reply) / limit), [len(t) for t in texts]
        assert all(len(text) <= limit for text in texts), [len(t) for t in texts]
        sent_words = " ".join(texts).split()
        assert sent_words == words, (
            f"the reply arrived changed: first difference at word "
            f"{next((i for i, (a, b) in enumerate(zip(sent_words, words)) if a != b), None)}"
            f", {len(sent_words)} words sent of {len(words)}")

    # 4
    async def test_two_chats_answered_concurrently_keep_their_own_order(self, contract_kernel):
        run = contract_kernel
        adapter = run.adapter
        chats = {"a": adapter.direct_chat(1), "b": adapter.direct_chat(2)}
        users = {"a": adapter.user_id(1), "b": adapter.user_id(2)}
        tokens = {key: [f"o{key}{n:02d}z" for n in range(1, 4)] for key in chats}
        run.agent.gate = anyio.Event()  # hold the first turns: both chats run at once
        for n in range(3):
            for key in chats:
                await adapter.inject(chats[key], f"message {tokens[key][n]}",
                                     sender_id=users[key])
        await run.wait(lambda: run.agent.running >= 2,
                       what="a turn running in each chat at the same time",
                       state=lambda: run.agent_texts())
        run.agent.gate.set()
        everything = tokens["a"] + tokens["b"]
        for key in chats:
            await run.wait_for_tokens(chats[key], tokens[key])
        await run.settle()
        for key in chats:
            assert run.tokens_sent(chats[key], everything) == tokens[key], run.texts(chats[key])

    # 5
    async def test_unknown_sender_is_refused_with_their_id(self, platform_adapter, tmp_path):
        adapter = platform_adapter
        stranger, friend = adapter.user_id(1), adapter.user_id(2)
        async with self.contract_run(adapter, tmp_path / "kernel", allow_from=[friend]) as run:
            await adapter.inject(adapter.direct_chat(1), "let me in us01z", sender_id=stranger)
            await run.wait(lambda: any(stranger in t for t in run.texts(adapter.direct_chat(1))),
                           what=f"a refusal naming {stranger!r}",
                           state=lambda: run.texts(adapter.direct_chat(1)))
            # The allowlist matches the ids the channel reports: a listed sender gets in.
            await adapter.inject(adapter.direct_chat(2), "hello us02z", sender_id=friend)
            await run.wait_for_tokens(adapter.direct_chat(2), ["us02z"])
            await run.settle()
            refused = run.texts(adapter.direct_chat(1))
            assert len(refused) == 1 and "us01z" not in refused[0], refused
            assert not any("us01z" in text for text in run.agent_texts()), run.agent_texts()

    # 6
    @needs("groups")
    async def test_group_message_is_answered_only_when_it_mentions_the_bot(
            self, contract_kernel):
        run = contract_kernel
        adapter = run.adapter
        group, user = adapter.group_chat(1), adapter.user_id(1)
        await adapter.inject(group, "just chatting gr01z", sender_id=user, group=True)
        await adapter.inject(group, "bot, answer gr02z", sender_id=user, group=True,
                             mention=True)
        await run.wait_for_tokens(group, ["gr02z"])
        await run.settle()
        assert run.tokens_sent(group, ["gr01z", "gr02z"]) == ["gr02z"], run.texts(group)
        assert not any("gr01z" in text for text in run.agent_texts()), run.agent_texts()
        request = run.turn_for("gr02z")
        assert f"group: {group}" in request.envelope, request.envelope

    # 7
    @needs("threads")
    async def test_thread_message_is_answered_in_its_thread(self, contract_kernel):
        run = contract_kernel
        adapter = run.adapter
        group = adapter.supports_groups
        chat = adapter.group_chat(1) if group else adapter.direct_chat(1)
        first, second = adapter.thread_id(1), adapter.thread_id(2)
        for thread, token in ((first, "th01z"), (second, "th02z")):
            await adapter.inject(chat, f"in a thread {token}", sender_id=adapter.user_id(1),
                                 group=group, mention=group, thread_id=thread)
        await run.wait_for_tokens(chat, ["th01z"], thread_id=first)
        await run.wait_for_tokens(chat, ["th02z"], thread_id=second)
        await run.settle()
        both = ["th01z", "th02z"]
        assert run.tokens_sent(chat, both, thread_id=first) == ["th01z"], \
            run.texts(chat, thread_id=first)
        assert run.tokens_sent(chat, both, thread_id=second) == ["th02z"], \
            run.texts(chat, thread_id=second)

    # 8
    @needs("media_out")
    async def test_media_marker_sends_a_file_of_the_right_kind(self, contract_kernel):
        run = contract_kernel
        adapter = run.adapter
        chat = adapter.direct_chat(1)
        folder = run.kernel.workspace / "contract-media"
        folder.mkdir(parents=True, exist_ok=True)
        picture, notes = folder / "picture.png", folder / "notes.txt"
        picture.write_bytes(png_bytes())
        notes.write_text("contract notes\n")
        run.replies["md01z"] = (f"the files md01z\nMEDIA: {picture}\nand the notes md02z\n"
                                f"MEDIA: {notes}")
        await adapter.inject(chat, "send me the files md01z", sender_id=adapter.user_id(1))
        await run.wait(lambda: len(adapter.sent_media(chat)) >= 2,
                       what=f"two files sent to chat {chat}",
                       state=lambda: (adapter.sent_media(chat), run.texts(chat)))
        await run.wait_for_tokens(chat, ["md01z", "md02z"])
        await run.settle()
        limits = run.channel.limits
        expected = [(limits.media_kind(picture), "picture.png"),
                    (limits.media_kind(notes), "notes.txt")]
        sent = adapter.sent_media(chat)
        assert [kind for kind, _ in sent] == [kind for kind, _ in expected], sent
        for (_, name), (_, wanted) in zip(sent, expected):
            assert name is None or name == wanted, sent
        texts = run.texts(chat)
        assert not any("MEDIA:" in text or "upload failed" in text for text in texts), texts

    # 9
    async def test_probe_reports_ok_with_a_latency(self, contract_kernel):
        run = contract_kernel
        result = await run.probe()
        assert result.ok, result
        assert isinstance(result.latency_ms, (int, float)) and result.latency_ms >= 0, result
        assert run.account.runtime.last_probe is result  # what `chatkernel health` shows

    @needs("revoke")
    async def test_probe_reports_refused_credentials_without_raising(self, contract_kernel):
        run = contract_kernel
        await run.adapter.revoke_credentials()
        result = await run.probe()
        assert not result.ok and result.detail, result
        # The channel's probe answered: it neither raised nor ran out of time.
        assert not result.detail.startswith("the probe failed"), result
        assert not result.extra.get("timed_out"), result

    # 10
    @needs("typing")
    async def test_typing_indicator_reaches_the_platform_while_a_turn_runs(
            self, contract_kernel):
        run = contract_kernel
        adapter = run.adapter
        chat = adapter.direct_chat(1)
        run.agent.gate = anyio.Event()
        await adapter.inject(chat, "think about it ty01z", sender_id=adapter.user_id(1))
        await run.wait(lambda: run.agent.running == 1, what="the turn to start")
        await run.wait(lambda: adapter.typing_count(chat) >= 1,
                       what=f"a typing indicator in chat {chat} while the turn runs",
                       state=lambda: adapter.typing_count(chat))
        assert run.texts(chat) == [], f"sent before the turn ended: {run.texts(chat)}"
        run.agent.gate.set()
        await run.wait_for_tokens(chat, ["ty01z"])

    # 11
    async def test_restart_loses_nothing_and_answers_nothing_twice(self, platform_adapter,
                                                                   tmp_path):
        adapter = platform_adapter
        chat, user = adapter.direct_chat(1), adapter.user_id(1)
        home = tmp_path / "kernel"
        tokens = ["rs01z", "rs02z", "rs03z", "rs04z"]
        async with self.contract_run(adapter, home) as run:
            await adapter.inject(chat, "before rs01z", sender_id=user)
            await run.wait_for_tokens(chat, tokens[:1])
            await run.stop_loop()  # the loop stops; the kernel stays up
            await adapter.inject(chat, "while stopped rs02z", sender_id=user)
            await run.start_loop()
            await run.wait_for_tokens(chat, tokens[:2])
            await run.settle()
            again = [m.text for m, outcome in run.deliveries if outcome == "duplicate"]
        # The whole gateway was down: a fresh kernel on the same store.
        await adapter.inject(chat, "while down rs03z", sender_id=user)
        async with self.contract_run(adapter, home) as run:
            await run.wait_for_tokens(chat, tokens[:3])
            await adapter.inject(chat, "after rs04z", sender_id=user)
            await run.wait_for_tokens(chat, tokens)
            await run.settle()
            again += [m.text for m, outcome in run.deliveries if outcome == "duplicate"]
        assert run.tokens_sent(chat, tokens) == tokens, run.texts(chat)
        # The cursor was saved: the fresh loop did not fetch answered messages again.
        assert again == [], f"the restarted loop delivered old messages again: {again}"

    # 12
    async def test_crash_during_delivery_loses_nothing(self, platform_adapter, tmp_path):
        adapter = platform_adapter
        chat, user = adapter.direct_chat(1), adapter.user_id(1)
        home = tmp_path / "kernel"
        tokens = ["cr01z", "cr02z", "cr03z"]
        async with self.contract_run(adapter, home) as run:
            await adapter.inject(chat, "before cr01z", sender_id=user)
            await run.wait_for_tokens(chat, tokens[:1])
            run.crash_before_delivering("cr02z")
            await adapter.inject(chat, "during cr02z", sender_id=user)
            await run.wait(lambda: run.crashed, what="the delivery of cr02z")
        # A platform cursor advanced before the kernel had the message loses it now.
        await adapter.inject(chat, "after cr03z", sender_id=user)
        async with self.contract_run(adapter, home) as run:
            await run.wait_for_tokens(chat, tokens)
            await run.settle()
        assert run.tokens_sent(chat, tokens) == tokens, run.texts(chat)

    # 13
    async def test_status_is_answered_without_the_agent(self, contract_kernel):
        run = contract_kernel
        adapter = run.adapter
        chat = adapter.direct_chat(1)
        await adapter.inject(chat, "/status", sender_id=adapter.user_id(1))
        await run.wait(lambda: len(run.texts(chat)) >= 1, what=f"a /status answer in {chat}",
                       state=lambda: run.texts(chat))
        await run.settle()
        answers = run.texts(chat)
        assert len(answers) == 1, answers
        answer = answers[0]
        assert adapter.channel_name in answer and not answer.startswith("re:"), answer
        assert run.agent.requests == [], run.agent_texts()

    # 14
    @needs("own_messages")
    async def test_the_bots_own_messages_are_ignored(self, contract_kernel):
        run = contract_kernel
        adapter = run.adapter
        chat, user = adapter.direct_chat(1), adapter.user_id(1)
        await adapter.inject_own_message(chat, "my own words om01z")
        # Once the message after it is answered, the bot's own went through too.
        await adapter.inject(chat, "after om02z", sender_id=user)
        await run.wait_for_tokens(chat, ["om02z"])
        await run.settle()
        assert run.tokens_sent(chat, ["om01z", "om02z"]) == ["om02z"], run.texts(chat)
        assert not any("om01z" in text for text in run.agent_texts()), run.agent_texts()

    # 15
    @needs("non_message_events")
    async def test_events_that_are_not_messages_are_ignored(self, contract_kernel):
        run = contract_kernel
        adapter = run.adapter
        kinds = adapter.non_message_events
        assert kinds, (f"{type(adapter).__name__}: name the events in non_message_events, "
                       "or set supports_non_message_events = False")
        chat, user = adapter.direct_chat(1), adapter.user_id(1)
        for n, kind in enumerate(kinds, 1):
            await adapter.inject_non_message_event(kind, chat, sender_id=user,
                                                   text=f"not a message ne{n:02d}z")
        await adapter.inject(chat, "after nm00z", sender_id=user)
        await run.wait_for_tokens(chat, ["nm00z"])
        await run.settle()
        assert len(run.agent.requests) == 1 and "nm00z" in run.agent_texts()[0], \
            f"turns for {kinds}: {run.agent_texts()}"
        assert len(run.texts(chat)) == 1, run.texts(chat)

    # 16
    @needs("chat_refusal")
    async def test_a_chat_refusing_the_bot_fails_that_send_and_the_account_stays_healthy(
            self, contract_kernel):
        import aiohttp

        run = contract_kernel
        adapter = run.adapter
        refused = adapter.direct_chat(1)
        await adapter.refuse_chat(refused)
        await adapter.inject(refused, "hello cr01z", sender_id=adapter.user_id(1))
        runtime = run.account.runtime
        await run.wait(lambda: any(refused in failure.session_key
                                   for failure in runtime.recent_failures),
                       what=f"the refused send to {refused} recorded as failed",
                       state=lambda: list(runtime.recent_failures))
        # No other send has gone out since to turn it green: the refusal alone decides.
        failure = next(f for f in runtime.recent_failures if refused in f.session_key)
        assert failure.status == "failed" and failure.why == "platform", failure
        snapshot = await run.health.snapshot()
        assert runtime.send_failing_since is None, runtime.last_send_error
        assert snapshot.ok, snapshot.problems
        async with aiohttp.ClientSession() as http, \
                http.get(f"{run.url}/healthz") as answer:
            body = await answer.json()
            assert answer.status == 200, body

    # live replies
    async def test_a_streaming_agents_answer_arrives_whole_once(self, contract_kernel):
        """Whatever the channel shows while the agent writes (live replies, or nothing),
        a streamed answer arrives whole, once, in order."""
        run = contract_kernel
        adapter = run.adapter
        chat = adapter.direct_chat(1)
        reply = long_text(run.text_limit, 1.5)
        words = reply.split()

        def script(request: Any) -> list[AgentEvent]:
            pieces = [reply[n:n + 50] for n in range(0, len(reply), 50)]
            return [*(AgentEvent("text", piece, final=False) for piece in pieces),
                    AgentEvent.reply(reply)]

        run.agent.script = script
        await adapter.inject(chat, "stream it sa01z", sender_id=adapter.user_id(1))
        await run.wait(lambda: len(" ".join(run.texts(chat)).split()) >= len(words),
                       what="the whole answer", state=lambda: run.texts(chat))
        await run.settle()
        assert " ".join(run.texts(chat)).split() == words, [len(t) for t in run.texts(chat)]

    async def test_a_live_reply_shows_its_progress_then_the_whole_answer_once(
            self, platform_adapter, tmp_path):
        from chatkernel.sdk.live import LiveReplies

        from chatkernel.sdk.errors import ConfigError

        adapter = platform_adapter
        self.require(adapter, "live_replies")
        settings = {"streaming": "on", "streaming_interval_ms": 100}
        try:
            opened = self.contract_run(adapter, tmp_path / "kernel", channel_settings=settings)
            run = await opened.__aenter__()
        except ConfigError as exc:
            # A channel without live replies refuses the setting, saying so.
            assert exc.key == f"channels.{adapter.channel_name}.streaming", exc
            assert "cannot show a reply while it is written" in str(exc), exc
            return
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_exit(opened)
            chat = adapter.direct_chat(1)
            reply = long_text(run.text_limit, 1.5)
            words = reply.split()
            cut = [len(reply) * n // 6 for n in range(7)]
            pieces = [reply[a:b] for a, b in zip(cut, cut[1:])]

            def shown() -> list[str]:  # while it is written, a state may still be the last
                return [text for _, text in adapter.live_timeline(chat)]

            async def script(request: Any) -> AsyncIterator[AgentEvent]:
                for piece in pieces:
                    yield AgentEvent("text", piece, final=False)
                    # The next piece once this one is visible: the updates are seen.
                    last = piece.split()[-1] if piece.split() else ""
                    await run.wait(lambda: any(last in text for text in shown()),
                                   what=f"a preview showing {last!r}", state=shown)
                yield AgentEvent.reply(reply)

            run.agent.script = script
            await adapter.inject(chat, "stream it lv01z", sender_id=adapter.user_id(1))

            def finals() -> list[str]:
                return [text for kind, text in adapter.live_timeline(chat) if kind == "final"]

            await run.wait(lambda: len(" ".join(finals()).split()) >= len(words),
                           what="the whole answer delivered", state=finals)
            await run.settle()
            timeline = adapter.live_timeline(chat)
            kinds = [kind for kind, _ in timeline]
            first_final = kinds.index("final")
            last_final = len(kinds) - 1 - kinds[::-1].index("final")
            assert kinds[:first_final].count("preview") >= 3, timeline
            assert "preview" not in kinds[last_final:], "an update came after the answer"
            sent = " ".join(finals()).split()
            assert sent == words, (
                f"the answer arrived changed or twice: {len(sent)} words of {len(words)}, "
                f"first difference at word "
                f"{next((i for i, (a, b) in enumerate(zip(sent, words)) if a != b), None)}")
            assert all(len(text) <= run.text_limit for text in finals()), \
                [len(text) for text in finals()]
