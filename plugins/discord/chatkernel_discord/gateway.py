"""Discord's gateway (API v10, JSON): one websocket per account, kept alive and resumed.

The transport (:class:`DiscordGateway`, a kit ``Transport``) owns the socket's whole
life, one connection at a time (:class:`Connection`), and decides alone what follows
each one — so a reconnect request, a missed heartbeat acknowledgement and a close that
arrive together end the connection once, and are answered once:

- ``GET /gateway/bot`` gives the URL (cached; asked again after
  :data:`CONNECT_ATTEMPTS` failed connections in a row, in case the cached host is what
  fails) and the ``session_start_limit``: an IDENTIFY waits for ``remaining`` to come
  back and for its ``max_concurrency`` slot (per five seconds);
- HELLO starts the kit's ``Heartbeat`` (the first beat after a random part of the
  interval); a beat left unacknowledged when the next is due closes the connection
  (code 4000, which keeps the session) and resumes;
- READY's ``session_id`` and ``resume_gateway_url`` are kept, with the last sequence
  number handled, in the account's state: after op 7 RECONNECT, a resumable close
  (4000–4009 but 4004, 4007 and 4009, or none at all), a zombie connection, op 9 with
  ``d: true``, and after a restart of the gateway, the next connection goes to
  ``resume_gateway_url`` and RESUMEs; Discord replays what was dispatched meanwhile,
  and a message already delivered is not delivered again (by its id);
- op 9 with ``d: false``, close 4007 or 4009, a session kept too long, or
  :data:`RESUME_ATTEMPTS` failed resumes in a row: the session is dropped and the next
  connection IDENTIFYs afresh (after 1–5 s for op 9), saying in the log how long the
  gap was (Discord does not replay across sessions);
- the fatal closes (4004 authentication failed, 4010–4014) are raised for the channel to
  explain (``DiscordChannel.receive_trouble``): the account turns red with what to do,
  and the kit tries again only every few minutes — never a reconnect loop;
- connections that fail or do not settle are spaced by the kit's ``JitteredBackoff``
  (the first reconnect after a session that worked for a while is immediate, as Discord
  asks after op 7); meanwhile the account's health says ``reconnecting (n)``.

Dispatches are handled in order: messages (``MESSAGE_CREATE``) are journaled in batches
through the kit (``SocketLink.deliver``), and only then does the sequence number kept
for a resume move past them, so a crash never skips one.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sys
import time
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import aiohttp
import anyio

from chatkernel.channels import (
    Heartbeat,
    JitteredBackoff,
    MissedHeartbeat,
    PlatformError,
    SocketLink,
    Transport,
    decode_json,
    encode_json,
)

if TYPE_CHECKING:
    from chatkernel.channels import Deliver
    from chatkernel_discord.channel import DiscordChannel

log = logging.getLogger("chatkernel.discord")

# Gateway opcodes.
DISPATCH, HEARTBEAT, IDENTIFY, RESUME, RECONNECT, INVALID_SESSION, HELLO, HEARTBEAT_ACK = \
    0, 1, 2, 6, 7, 9, 10, 11
#: The API version and encoding every connection asks for.
QUERY = {"v": "10", "encoding": "json"}

#: Closes after which Discord must not be asked again before a person acts.
FATAL_CLOSES = {
    4004: "authentication failed",
    4010: "invalid shard",
    4011: "sharding required",
    4012: "invalid API version",
    4013: "invalid intents",
    4014: "disallowed intents",
}
#: Closes after which the session is gone: reconnect and IDENTIFY afresh.
SESSION_ENDING_CLOSES = {4007: "invalid seq", 4009: "session timed out"}
#: The close this client sends when it leaves: anything but 1000/1001 keeps the session,
#: so the next connection (or the next start of the gateway) can resume it.
KEEP_SESSION = 4000

#: Seconds a new connection waits for HELLO before giving up on it.
HELLO_TIMEOUT = 20.0
#: Seconds to open the websocket.
CONNECT_TIMEOUT = 20.0
#: Failed resumes in a row before the session is dropped and the next connection
#: identifies afresh.
RESUME_ATTEMPTS = 3
#: Failed connections in a row to a cached gateway URL before asking for it again.
CONNECT_ATTEMPTS = 3
#: A session kept across a restart older than this is not resumed (Discord has dropped it).
SESSION_KEPT_SECONDS = 300.0
#: A connection that settled and lasted this long resets the reconnect backoff.
SETTLED_SECONDS = 60.0
#: Messages remembered as delivered, against replays.
RECENT = 10_000
#: The account's state key the session is kept under.
STATE_KEY = "gateway"


@dataclass
class Ending:
    """How a connection ended: what the next one does, and why (for the log and health)."""

    reason: str
    #: Resume the session (True), or drop it and identify afresh (False).
    resume: bool = True
    #: Seconds to wait before the next connection (None: the transport decides).
    wait: float | None = None


class GatewayFatal(PlatformError):
    """A close that must not be answered with a reconnect (4004, 4010–4014)."""

    def __init__(self, code: int) -> None:
        super().__init__(f"the gateway closed the connection with {code} "
                         f"({FATAL_CLOSES[code]})", kind="rejected", code=code,
                         details={"close_code": code})
        self.close_code = code


class DiscordGateway(Transport):
    """One account's gateway connection (see the module docstring)."""

    channel: "DiscordChannel"
    #: Backoff after a failed REST call (``GET /gateway/bot``): first delay and cap.
    backoff = (1.0, 60.0)

    def __init__(self, channel: "DiscordChannel") -> None:
        super().__init__(channel)
        #: The session: its id, where to resume it, the last sequence number handled.
        self.session_id: str | None = None
        self.resume_url: str | None = None
        self.seq: int | None = None
        #: When the session last had news (clock.now()), for the gap a new one leaves.
        self.seen_at: float | None = None
        #: ``GET /gateway/bot``: the URL and the session start limit, cached.
        self.gateway_url: str | None = None
        self.start_limit: dict[str, Any] = {}
        self.identified_at: list[float] = []
        #: Connections: failed in a row, resumes failed in a row, the reconnect backoff.
        self.connect_failures = 0
        self.resume_failures = 0
        self.reconnects = JitteredBackoff(1.0, 60.0)
        self._quick_used = False
        self._last_settled = False
        #: When the session that was dropped last had news: the gap a new one leaves.
        self.session_lost_at: float | None = None
        #: What the current or last connection is doing: "connecting", "identifying",
        #: "resuming", "ready", "reconnecting".
        self.state = "connecting"
        #: The current connection's heartbeat (its latency is the health's).
        self.heartbeat: Heartbeat | None = None
        #: Counters: connections opened, sessions identified and resumed, dispatches
        #: replayed that were delivered already.
        self.connections = 0
        self.identifies = 0
        self.resumes = 0
        self.replayed = 0
        self._wait: float = 0.0
        self._wait_reason = ""
        #: Every wait before a reconnect so far, with its reason (the latest 100).
        self.waited: list[tuple[float, str]] = []
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._restored = False
        self._http: aiohttp.ClientSession | None = None
        self._rng = random.Random()

    # -- the kit's event traits ---------------------------------------------------------

    def event_chat(self, event: Any) -> Hashable:
        return event.get("channel_id")

    def event_has_media(self, event: Any) -> bool:
        return bool(event.get("attachments"))

    def describe_event(self, event: Any) -> str:
        return f"MESSAGE_CREATE {event.get('id', '?')} in channel {event.get('channel_id', '?')}"

    def event_id(self, event: Any) -> str | None:
        return str(event["id"]) if "id" in event else None

    # -- health ---------------------------------------------------------------------------

    @property
    def latency(self) -> float | None:
        """The last heartbeat's round trip in seconds (None before one was acknowledged)."""
        return self.heartbeat.latency if self.heartbeat is not None else None

    def describe(self) -> str:
        """The gateway's state for the probe: ready with its heartbeat, or reconnecting."""
        if self.state == "reconnecting":
            return f"gateway reconnecting ({self.reconnects.attempts}): {self._wait_reason}"
        latency = self.latency
        beat = f", heartbeat {latency * 1000:.0f} ms" if latency is not None else ""
        return f"gateway {self.state}{beat}"

    # -- the loop ---------------------------------------------------------------------------

    async def run(self, deliver: "Deliver") -> None:
        await self.identify()  # GET /users/@me: a refused token waits here, slowly
        await self._restore()
        errors = JitteredBackoff(*self.backoff)
        failures = 0
        try:
            while True:
                await self.context.receive_gate()
                await self._pause()
                link = SocketLink(self, deliver)
                try:
                    ending = await self._connect(link)
                except PlatformError as exc:
                    failures += 1
                    self.state = "reconnecting"
                    await self.failed(exc, errors, failures, "the gateway")
                    continue
                if ending is None:  # could not connect: counted, waits with backoff
                    continue
                failures = 0
                errors.reset()
                self._after(ending)
        finally:
            if self._http is not None:
                with anyio.CancelScope(shield=True):
                    await self._http.close()
                self._http = None

    async def _pause(self) -> None:
        wait, self._wait = self._wait, 0.0
        if wait <= 0:
            return
        self.waited = [*self.waited[-99:], (wait, self._wait_reason)]
        self.state = "reconnecting"
        count = self.reconnects.attempts
        reason = f"reconnecting ({count}): {self._wait_reason}" if count else \
            f"reconnecting: {self._wait_reason}"
        if count >= 2:
            self.context.report_problem(reason, restartable=True)
        log.info("%s: %s; next try in %.1fs", self.channel.account.key, reason, wait)
        await self.clock.sleep(wait)

    def _next(self, reason: str, wait: float | None = None) -> None:
        """Wait before the next connection: ``wait``, else the jittered backoff."""
        self._wait_reason = reason
        self._wait = self.reconnects.next() if wait is None else wait
        self.state = "reconnecting"

    def _after(self, ending: Ending) -> None:
        """What the connection that ended means for the next one."""
        key = self.channel.account.key
        if not ending.resume:
            self._drop_session()
        if ending.wait is not None:
            self._next(ending.reason, ending.wait)
        elif self._last_settled and not self._quick_used:
            # The first reconnect after a session that worked: at once, as op 7 asks.
            self._quick_used = True
            self._wait_reason, self._wait, self.state = ending.reason, 0.0, "reconnecting"
        else:
            self._next(ending.reason)
        log.info("%s: the gateway connection ended: %s", key, ending.reason)

    # -- one connection ---------------------------------------------------------------------

    @property
    def can_resume(self) -> bool:
        return bool(self.session_id and self.resume_url and self.seq is not None)

    async def _connect(self, link: SocketLink) -> Ending | None:
        """Open one connection and run it to its end; None when it could not be opened."""
        resuming = self.can_resume
        url = self.resume_url if resuming else await self._gateway_url()
        assert url is not None
        self.state = "connecting"
        try:
            with anyio.fail_after(CONNECT_TIMEOUT):
                socket = await self._session().ws_connect(_with_query(url), autoping=True,
                                                          max_msg_size=64 * 2**20)
        except (aiohttp.ClientError, OSError, TimeoutError, asyncio.TimeoutError) as exc:
            self.connect_failures += 1
            if resuming:
                self._resume_failed(f"the resume URL did not answer ({_why(exc)})")
            if self.connect_failures >= CONNECT_ATTEMPTS:
                self.gateway_url = None  # ask GET /gateway/bot again: the host may be gone
            self._next(f"cannot connect to the gateway ({_why(exc)})")
            return None
        self.connect_failures = 0
        self.connections += 1
        connection = Connection(self, socket, link, resuming)
        try:
            ending = await connection.run()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await socket.close(code=KEEP_SESSION)
            await self._save()
        if connection.fatal is not None:
            self._drop_session()
            await self._save()
            if connection.fatal.status == 401 or connection.fatal.code == 4004:
                # The next try asks GET /gateway/bot first, which tells whether the token
                # works again before any IDENTIFY spends a session start.
                self.gateway_url = None
            raise connection.fatal
        self._last_settled = connection.settled
        if connection.settled and self.clock.monotonic() - connection.started >= \
                SETTLED_SECONDS:
            self.reconnects.reset()
            self._quick_used = False
        if resuming and not connection.resumed and ending.resume:
            self._resume_failed(ending.reason)
        return ending

    def _resume_failed(self, why: str) -> None:
        self.resume_failures += 1
        if self.resume_failures >= RESUME_ATTEMPTS and self.session_id is not None:
            log.warning("%s: resuming the gateway session failed %d times (last: %s): "
                        "identifying afresh", self.channel.account.key, self.resume_failures,
                        why)
            self._drop_session()

    def _drop_session(self) -> None:
        if self.session_id is not None:
            self.session_lost_at = self.seen_at
        self.session_id = self.resume_url = None
        self.seq = None
        self.resume_failures = 0

    def _session(self) -> aiohttp.ClientSession:
        # The gateway's own session: no Authorization header on the websocket upgrade.
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession()
        return self._http

    async def _gateway_url(self) -> str:
        """``GET /gateway/bot``'s URL, cached; also its session start limit."""
        if self.gateway_url is None:
            # recheck: this call is how the loop learns that a refused token works again.
            answer = await self.channel.api.call("GET", "/gateway/bot", recheck=True)
            self.gateway_url = str(answer["url"])
            self.start_limit = dict(answer.get("session_start_limit") or {})
            self.start_limit["at"] = self.clock.monotonic()
        return self.gateway_url

    async def identify_slot(self) -> None:
        """Wait until an IDENTIFY may go out: a session start left today, and a slot of
        ``max_concurrency`` per five seconds."""
        limit = self.start_limit
        if limit.get("remaining", 1) <= 0:
            resets = limit.get("reset_after", 0) / 1000 - (self.clock.monotonic()
                                                            - limit.get("at", 0))
            if resets > 0:
                reason = (f"Discord allows no new session for {resets / 60:.0f} min (its daily "
                          "limit of session starts is spent): waiting")
                log.error("%s: %s", self.channel.account.key, reason)
                self.context.report_problem(reason, restartable=False)
                await self.clock.sleep(resets)
            self.gateway_url = None  # the limit is asked for again with the URL
        concurrency = max(1, int(limit.get("max_concurrency", 1)))
        now = self.clock.monotonic()
        self.identified_at = [t for t in self.identified_at if t > now - 5.0]
        if len(self.identified_at) >= concurrency:
            await self.clock.sleep(self.identified_at[0] + 5.0 - now)
        self.identified_at.append(self.clock.monotonic())
        if "remaining" in limit:
            limit["remaining"] -= 1

    # -- the session, kept across restarts ---------------------------------------------------

    async def _restore(self) -> None:
        if self._restored:
            return
        self._restored = True
        try:
            kept = await self.context.get_state(STATE_KEY)
        except RuntimeError:  # no store: a channel made by hand
            return
        if not isinstance(kept, dict) or not kept.get("session_id"):
            return
        age = self.clock.now() - float(kept.get("seen_at") or 0)
        if age > SESSION_KEPT_SECONDS:
            log.info("%s: the gateway session kept from before is %.0fs old: identifying "
                     "afresh", self.channel.account.key, age)
            self.session_lost_at = float(kept.get("seen_at") or 0) or None
            return
        self.session_id = str(kept["session_id"])
        self.resume_url = kept.get("resume_gateway_url")
        self.seq = kept.get("seq")
        self.seen_at = kept.get("seen_at")

    async def _save(self) -> None:
        state = None if self.session_id is None else {
            "session_id": self.session_id, "resume_gateway_url": self.resume_url,
            "seq": self.seq, "seen_at": self.seen_at}
        try:
            with anyio.CancelScope(shield=True):
                await self.context.set_state(STATE_KEY, state)
        except RuntimeError:
            pass

    # -- dispatches ---------------------------------------------------------------------------

    def delivered(self, message_id: str) -> bool:
        return message_id in self._recent

    def remember(self, message_id: str) -> None:
        self._recent[message_id] = None
        if len(self._recent) > RECENT:
            self._recent.popitem(last=False)

    def ready(self, data: dict[str, Any]) -> None:
        """READY: a new session."""
        key = self.channel.account.key
        self.session_id = str(data["session_id"])
        self.resume_url = data.get("resume_gateway_url") or self.gateway_url
        user = data.get("user") or {}
        if user.get("id"):
            self.channel.learn_self(user)
        self.identifies += 1
        self.resume_failures = 0
        lost = self.session_lost_at
        if lost is not None:
            gap = max(0.0, self.clock.now() - lost)
            log.warning("%s: a new gateway session after the last one was lost: what was sent "
                        "to the bot in the %.0fs since %s was not replayed (Discord replays "
                        "only within a session)", key, gap,
                        time.strftime("%H:%M:%S", time.localtime(lost)))
            self.session_lost_at = None
        else:
            log.info("%s: gateway session ready", key)

    def resumed(self, replayed: int) -> None:
        self.resumes += 1
        self.resume_failures = 0
        log.info("%s: gateway session resumed (%d events replayed)", self.channel.account.key,
                 replayed)


class Connection:
    """One websocket connection: HELLO, heartbeats, IDENTIFY or RESUME, dispatches, until
    it ends. The first ending wins (:meth:`end`); everything else is then cancelled."""

    def __init__(self, gateway: DiscordGateway, socket: aiohttp.ClientWebSocketResponse,
                 link: SocketLink, resuming: bool) -> None:
        self.gateway = gateway
        self.channel = gateway.channel
        self.socket = socket
        self.link = link
        self.resuming = resuming
        self.clock = gateway.clock
        self.started = self.clock.monotonic()
        self.heartbeat: Heartbeat | None = None
        self.hello = anyio.Event()
        #: READY or RESUMED came on this connection.
        self.settled = False
        self.resumed = False
        #: The last sequence number received (the heartbeat's); the gateway's ``seq`` is
        #: the last one handled.
        self.received_seq = gateway.seq
        self._replayed = 0
        self._ending: Ending | None = None
        self._tasks: Any = None
        #: A close that must not be answered with a reconnect, or a refused token.
        self.fatal: PlatformError | None = None
        self._send, self._receive = anyio.create_memory_object_stream(float("inf"))

    def end(self, ending: Ending) -> None:
        """The connection is over for ``ending``'s reason (only the first counts)."""
        if self._ending is None:
            self._ending = ending
            if self._tasks is not None:
                self._tasks.cancel_scope.cancel()

    async def run(self) -> Ending:
        try:
            async with anyio.create_task_group() as tg:
                self._tasks = tg
                tg.start_soon(self._read)
                tg.start_soon(self._handle)
                tg.start_soon(self._await_hello)
                tg.start_soon(self._watch_token)
        except BaseExceptionGroup as group:
            # One task failed (a delivery the store refused, a bug): that error, as it is.
            raise _first(group) from None
        return self._ending or Ending("the connection closed")

    async def _send_json(self, payload: dict[str, Any]) -> None:
        await self.socket.send_str(encode_json(payload))

    async def _await_hello(self) -> None:
        with anyio.move_on_after(HELLO_TIMEOUT):
            await self.hello.wait()
            return
        self.end(Ending(f"no HELLO within {HELLO_TIMEOUT:g}s"))

    async def _watch_token(self) -> None:
        reason = await self.channel.api.wait_refused()
        self.fatal = PlatformError(reason, status=401, code=0, kind="rejected")
        self.end(Ending(reason, resume=False))

    async def _beat(self) -> None:
        assert self.heartbeat is not None
        try:
            await self.heartbeat.run(self._send_beat)
        except MissedHeartbeat as exc:
            log.warning("%s: %s; resuming on a new connection", self.channel.account.key, exc)
            self.end(Ending("no heartbeat acknowledgement: a zombie connection"))
        except (ConnectionError, aiohttp.ClientError) as exc:
            self.end(Ending(f"sending a heartbeat failed ({_why(exc)})"))

    async def _send_beat(self) -> None:
        await self._send_json({"op": HEARTBEAT, "d": self.received_seq})

    async def _start(self) -> None:
        """After HELLO: RESUME the session, or IDENTIFY a new one."""
        gateway = self.gateway
        token = self.channel.config.token
        try:
            if self.resuming:
                gateway.state = "resuming"
                await self._send_json({"op": RESUME, "d": {
                    "token": token, "session_id": gateway.session_id, "seq": gateway.seq}})
                return
            await gateway.identify_slot()
            gateway.state = "identifying"
            await self._send_json({"op": IDENTIFY, "d": {
                "token": token, "intents": self.channel.intents,
                "properties": {"os": sys.platform, "browser": "chatkernel",
                               "device": "chatkernel"}}})
        except (ConnectionError, aiohttp.ClientError) as exc:
            self.end(Ending(f"the connection closed while starting the session ({_why(exc)})"))

    async def _read(self) -> None:
        socket = self.socket
        try:
            async for frame in socket:
                if frame.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                    break
                try:
                    payload = decode_json(frame.data)
                except (ValueError, TypeError, UnicodeDecodeError):
                    log.warning("%s: a gateway frame that is not JSON was ignored",
                                self.channel.account.key)
                    continue
                if isinstance(payload, dict):
                    await self._frame(payload)
        except (ConnectionError, aiohttp.ClientError) as exc:
            self.end(Ending(f"the connection failed ({_why(exc)})"))
            return
        self._closed(socket.close_code)

    def _closed(self, code: int | None) -> None:
        if code in FATAL_CLOSES:
            self.fatal = GatewayFatal(code)
            if code == 4004:
                self.channel.api.refuse("Discord refused the bot token (gateway close 4004)")
            self.end(Ending(str(self.fatal), resume=False))
        elif code in SESSION_ENDING_CLOSES:
            self.end(Ending(f"the gateway closed the connection with {code} "
                            f"({SESSION_ENDING_CLOSES[code]})", resume=False))
        else:
            self.end(Ending(f"the gateway closed the connection ({code or 'no close code'})"))

    async def _frame(self, payload: dict[str, Any]) -> None:
        op = payload.get("op")
        self.link.alive()
        if op == DISPATCH:
            seq = payload.get("s")
            if isinstance(seq, int):
                self.received_seq = seq
            self._send.send_nowait((seq, str(payload.get("t")), payload.get("d")))
        elif op == HEARTBEAT_ACK:
            if self.heartbeat is not None:
                self.heartbeat.ack()
        elif op == HELLO:
            if self.hello.is_set():
                return
            interval = float((payload.get("d") or {}).get("heartbeat_interval", 41250)) / 1000
            self.heartbeat = self.gateway.heartbeat = Heartbeat(interval, self.clock,
                                                                rng=self.gateway._rng)
            self.hello.set()
            self._tasks.start_soon(self._beat)
            self._tasks.start_soon(self._start)
        elif op == HEARTBEAT:
            if self.heartbeat is not None:
                await self.heartbeat.beat_now(self._send_beat)
        elif op == RECONNECT:
            self.end(Ending("Discord asked to reconnect (op 7)"))
        elif op == INVALID_SESSION:
            if payload.get("d") is True:
                self.end(Ending("Discord invalidated the session, resumable (op 9)"))
            else:
                self.end(Ending("Discord invalidated the session (op 9): identifying afresh",
                                resume=False, wait=1.0 + 4.0 * self.gateway._rng.random()))

    async def _handle(self) -> None:
        """Dispatches in order, in batches: state events at once, messages journaled. A
        batch cut short by the connection's end is not counted as handled: the resume
        replays it, and what was journaled already is a duplicate there."""
        receive = self._receive
        while True:
            batch = [await receive.receive()]
            while True:
                try:
                    batch.append(receive.receive_nowait())
                except anyio.WouldBlock:
                    break
            await self._dispatch(batch)

    async def _dispatch(self, batch: list[tuple[int | None, str, Any]]) -> None:
        gateway, channel = self.gateway, self.channel
        messages: list[dict[str, Any]] = []
        last = None
        for seq, kind, data in batch:
            last = seq if isinstance(seq, int) else last
            if kind == "RESUMED":
                self.settled = self.resumed = True
                gateway.state = "ready"
                gateway.resumed(self._replayed)
            elif not isinstance(data, dict):
                continue
            elif kind == "READY":
                gateway.ready(data)
                self.settled = True
                gateway.state = "ready"
            elif kind == "MESSAGE_CREATE":
                message_id = str(data.get("id", ""))
                if gateway.delivered(message_id):
                    gateway.replayed += 1
                    continue
                if self.resuming and not self.resumed:
                    self._replayed += 1
                messages.append(data)
            else:
                channel.learn(kind, data)
        if messages:
            await self.link.deliver(messages)
            for data in messages:
                gateway.remember(str(data.get("id", "")))
        if last is not None:
            gateway.seq = last
            gateway.seen_at = self.clock.now()
            if messages or any(kind in ("READY", "RESUMED") for _, kind, _ in batch):
                await gateway._save()


def _with_query(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path or "/", urlencode(QUERY), ""))


def _first(group: BaseExceptionGroup) -> BaseException:
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
