"""A Socket Mode session on slack_sdk's aiohttp ``SocketModeClient``, under the kit's
socket supervision (chatkernel_slack.receiving.SlackSocket, a kit ``Socket``).

What slack_sdk does: ``apps.connections.open`` with the app-level token, the
websocket, pings every ``ping_interval``, and a new connection when Slack sends
a ``disconnect`` frame, closes the socket or stops answering pings. What it
does not do, and this module does:

- **Order, and one decode per frame.** The client hands each frame to its request
  listeners in a task of its own, so they run in no fixed order, after decoding it
  with the standard library's JSON and starting that task: more CPU than the rest
  of an envelope's way to the journal. Frames are taken instead where the client's
  receive loop queues them (``enqueue_message``, called one after the other as
  frames arrive), decoded once and put in one queue of the session's; the session
  reads it in batches, in arrival order, so each channel's messages reach the
  kernel in the order Slack sent them. Only the frames slack_sdk acts on itself
  (``disconnect``: it opens a new connection) still go on to its own queue.
- **Acknowledgements, after the journal.** Each batch is normalized and
  journaled (``link.deliver``) and only then is every envelope in it
  acknowledged: an acknowledged event that was not recorded would be lost,
  an unacknowledged one is sent again by Slack (``retry_attempt`` > 0) and the
  journal's dedupe takes it once. Redelivered envelopes are processed like any
  other: they are the only delivery of events sent while the socket was down.
- **One journal write per message.** A mention in a channel comes as two envelopes
  (``message`` and ``app_mention``, see chatkernel_slack.events). The second one
  is acknowledged at once, before its batch's journal write, and not journaled:
  its twin is in the same batch ahead of it or was journaled already. (Acking it
  early is safe: its twin is acknowledged only once it is durable.)
- **Liveness from traffic.** Every frame from Slack — hello, events,
  disconnect warnings, and the pongs to slack_sdk's pings — reports the socket
  alive (``link.alive()``): the client's websocket class is wrapped to see
  them. A socket that stays open but says nothing is closed and reopened by the
  kit, and the account's health is red meanwhile.
- **A closed socket is the kit's to reopen.** slack_sdk reconnects on its own when
  the socket closes, and while ``apps.connections.open`` is refused it only logs and
  tries again every few seconds, the session still looking alive. Instead the
  session ends the moment its socket closes, and the kit opens a new one: one whose
  ``apps.connections.open`` cannot be made turns the account's health red at once
  ("Socket Mode is disconnected: apps.connections.open refused (…)"). A socket
  still open that slack_sdk replaces (Slack asked it to, or it went stale) is
  slack_sdk's, as before.
- **A shared app token.** ``hello`` says how many connections the app token has;
  more than one means another process shares it, and Slack gives each event to
  one connection at random: a warning, in the log and in the probe's detail.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import aiohttp
import anyio

from chatkernel.channels import (
    PlatformError,
    SocketLink,
    decode_json,
    encode_json,
    transport_error,
)
from chatkernel_slack.api import slack_error
from chatkernel_slack.events import message_key

if TYPE_CHECKING:
    from chatkernel_slack.receiving import SlackSocket

log = logging.getLogger("chatkernel.slack")
#: slack_sdk's own log lines (connections, reconnections).
sdk_log = logging.getLogger("chatkernel.slack.sdk")

#: Seconds the session's cleanup may take (closing the websocket and slack_sdk's tasks).
CLOSE_TIMEOUT = 5.0
#: Envelope types Slack sends; only ``events_api`` carries messages.
EVENTS_API = "events_api"


def _watched(on_frame: Any) -> type[aiohttp.ClientWebSocketResponse]:
    """A websocket class that reports every frame it receives (pongs included)."""

    class WatchedWebSocket(aiohttp.ClientWebSocketResponse):
        async def receive(self, timeout: float | None = None) -> aiohttp.WSMessage:
            message = await super().receive(timeout)
            on_frame(self, message)
            return message

    return WatchedWebSocket


def _client_class() -> type:
    """slack_sdk's aiohttp ``SocketModeClient``, whose received frames go to a session's
    :meth:`SocketSession.take_text` (see the module docstring). Made on first use:
    slack_sdk is imported only by an account in socket mode."""
    global _Client
    if _Client is None:
        from slack_sdk.socket_mode.aiohttp import SocketModeClient

        class Client(SocketModeClient):  # type: ignore[misc]
            def __init__(self, session: SocketSession, **options: Any) -> None:
                super().__init__(**options)
                self.chatkernel_session = session

            async def enqueue_message(self, message: str) -> None:
                if self.chatkernel_session.take_text(message):
                    await super().enqueue_message(message)

            #: slack_sdk is replacing a socket that is still open (Slack asked it
            #: to, or the socket went stale): the old one's close is no loss.
            chatkernel_replacing = False

            async def connect_to_new_endpoint(self, force: bool = False) -> None:
                socket = self.current_session
                if socket is None or socket.closed:
                    # Closed under us: the session ends and the kit opens the next one
                    # (see the module docstring).
                    self.chatkernel_session.lost()
                    return
                self.chatkernel_replacing = True
                try:
                    await super().connect_to_new_endpoint(force)
                finally:
                    self.chatkernel_replacing = False

        _Client = Client
    return _Client


_Client: type | None = None


#: What a websocket receives once it is closed, or as it closes.
_GONE = frozenset({aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING,
                   aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR})
#: ``PlatformError.code`` of a socket that cannot be opened again (its health says so at
#: once: see SlackChannel.receive_trouble).
SOCKET_DISCONNECTED = "socket_disconnected"


def disconnected(exc: BaseException, redact: Any = None) -> PlatformError:
    """``apps.connections.open`` could not be made: Socket Mode is down until it can."""
    error = transport_error(exc, "apps.connections.open", redact=redact, platform="Slack")
    how = "refused" if error.kind == "not_sent" else "unanswered"
    detail = error.description.removeprefix("apps.connections.open: ")
    return PlatformError(f"Socket Mode is disconnected: apps.connections.open {how} "
                         f"({detail})", kind=error.kind, code=SOCKET_DISCONNECTED)


class SocketSession:
    """One Socket Mode connection's life: open, receive, acknowledge, until it ends."""

    def __init__(self, transport: SlackSocket, link: SocketLink) -> None:
        self.transport = transport
        self.channel = transport.channel
        self.link = link
        #: Envelopes in arrival order; None once the socket is lost (the session ends).
        self.inbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        #: Envelopes taken, how many of them were redeliveries, and how many the second
        #: event of a message already journaled (acknowledged, not journaled again).
        self.envelopes = 0
        self.redelivered = 0
        self.twins = 0
        #: slack_sdk's client, once the session made it.
        self.client: Any = None

    # -- frames, in the client's receive loop (must never raise or wait) ---------------------

    def _frame(self, socket: aiohttp.ClientWebSocketResponse,
               message: aiohttp.WSMessage) -> None:
        if message.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY,
                            aiohttp.WSMsgType.PONG, aiohttp.WSMsgType.PING):
            self.link.alive()
        elif message.type in _GONE and self._current(socket):
            self.lost()  # at once, not at slack_sdk's next ping

    def _current(self, socket: aiohttp.ClientWebSocketResponse) -> bool:
        """Whether ``socket`` is the session's, not one slack_sdk is replacing."""
        client = self.client
        return (client is not None and socket is client.current_session
                and not client.chatkernel_replacing)

    def take_text(self, data: str) -> bool:
        """A text frame from Slack; returns whether slack_sdk must see it too."""
        try:
            frame = decode_json(data)
        except (ValueError, TypeError, UnicodeDecodeError):
            log.warning("%s: a Socket Mode frame that is not JSON was ignored",
                        self.channel.account.key)
            return False
        if not isinstance(frame, dict):
            return False
        kind = frame.get("type")
        if frame.get("envelope_id"):
            self.inbox.put_nowait(frame)
            return False
        if kind == "hello":
            self.transport.hello(frame)
            return False
        if kind == "disconnect":
            log.info("%s: Slack asks to reconnect (%s)", self.channel.account.key,
                     frame.get("reason"))
        return True

    def lost(self) -> None:
        """slack_sdk would reconnect now: the session ends once the envelopes taken
        before are through."""
        self.inbox.put_nowait(None)

    # -- the session -----------------------------------------------------------------

    async def run(self) -> None:
        from slack_sdk.errors import SlackApiError

        config = self.channel.config
        api = self.channel.api
        client = _client_class()(self, app_token=config.app_token, logger=sdk_log,
                                 web_client=api.web_client(token=config.app_token),
                                 ping_interval=config.ping_interval)
        self.client = client
        try:
            # Its own session cannot show us pongs: one whose websockets report every frame.
            await client.aiohttp_client_session.close()
            client.aiohttp_client_session = aiohttp.ClientSession(
                ws_response_class=_watched(self._frame))
            try:
                # Called here rather than inside connect(), which retries forever and
                # only logs: a refused app token is the kit's to classify and report.
                client.wss_uri = await client.issue_new_wss_url()
            except SlackApiError as exc:
                raise slack_error(exc, "apps.connections.open", api.redact) from None
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                raise disconnected(exc, api.redact) from None
            await client.connect()
            while True:
                batch = [await self.inbox.get()]
                while not self.inbox.empty():
                    batch.append(self.inbox.get_nowait())
                taken = [envelope for envelope in batch if envelope is not None]
                if taken:
                    await self._take(client, taken)
                if len(taken) < len(batch):
                    return  # the socket is lost: the kit opens a new one
        finally:
            with anyio.move_on_after(CLOSE_TIMEOUT, shield=True):
                await client.close()

    async def _take(self, client: Any, envelopes: list[dict[str, Any]]) -> None:
        """Journal a batch's events, then acknowledge every envelope in it (a mention's
        second envelope first, unjournaled: see the module docstring)."""
        events, keys, later = [], [], []
        recent, in_batch = self.transport.recent, set()
        for envelope in envelopes:
            self.envelopes += 1
            if envelope.get("retry_attempt"):
                self.redelivered += 1
            if envelope.get("type") != EVENTS_API:
                # slash commands and interactivity: not messages, acknowledged
                log.debug("%s: %s envelope acknowledged and not handled",
                          self.channel.account.key, envelope.get("type"))
                later.append(envelope)
                continue
            payload = envelope.get("payload")
            key = message_key(payload)
            if key is not None and (key in in_batch or key in recent):
                self.twins += 1
                await self._ack(client, envelope)
                continue
            if key is not None:
                in_batch.add(key)
                keys.append(key)
            events.append(payload)
            later.append(envelope)
        if events:
            await self.link.deliver(events)
            for key in keys:
                recent.add(key)
        for envelope in later:
            await self._ack(client, envelope)

    async def _ack(self, client: Any, envelope: dict[str, Any]) -> None:
        try:
            await client.send_message(encode_json({"envelope_id": envelope["envelope_id"]}))
        except (ConnectionError, aiohttp.ClientError) as exc:
            # The socket went away: Slack sends the unacknowledged envelopes again, the
            # journal has them already. The session ends; the kit opens a new one.
            raise PlatformError(f"acknowledging an envelope: the socket closed ({exc})",
                                kind="no_answer") from None
