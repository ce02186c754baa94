"""How a Slack account receives: Socket Mode (default) or the Events API.

Both carry the same Events API wrapper (chatkernel_slack.events), so both
transports read events the same way (:class:`SlackWrappers`). Socket Mode is a
:class:`~chatkernel.channels.Socket` whose session is slack_sdk's client
(chatkernel_slack.socket_mode); the Events API is a
:class:`~chatkernel.channels.Webhook` on ``/slack/<account>/webhook``, signed with
the app's signing secret. The kit supervises both: reconnects, backoff, health.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.parse
from typing import TYPE_CHECKING, Any

from aiohttp import web

from chatkernel.channels import Socket, SocketLink, Webhook, WebhookRejected
from chatkernel_slack import events
from chatkernel_slack.signature import SlackSignature

if TYPE_CHECKING:
    from chatkernel_slack.channel import SlackChannel

log = logging.getLogger("chatkernel.slack")

#: How Slack posts interactivity (buttons, modals, shortcuts: ``payload=<JSON>``) and
#: slash commands (``command=/x&text=...``).
FORM = "application/x-www-form-urlencoded"
#: The 415's answer: what the Events API URL takes.
ACCEPTS = (f"this URL takes Slack's Events API as application/json; interactivity and "
           f"slash commands ({FORM}) are answered 200 and not acted on")


def form_kind(body: bytes) -> str:
    """What a signed form post from Slack is, in a few words: the interactivity payload's
    type (``block_actions``, ``view_submission``, ...) or the slash command."""
    fields = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
    if "command" in fields:
        return f"slash command {fields['command'][0]}"
    try:
        payload = json.loads(fields["payload"][0])
    except (KeyError, ValueError):
        return "a form post without a payload or a command"
    kind = payload.get("type") if isinstance(payload, dict) else None
    return f"interactivity {kind}" if isinstance(kind, str) else "interactivity of no type"


class SlackWrappers:
    """What the kit needs to know about an Events API wrapper, for both transports."""

    def event_chat(self, wrapper: Any) -> Any:
        return (events.event_of(wrapper) or {}).get("channel")

    def event_has_media(self, wrapper: Any) -> bool:
        return bool((events.event_of(wrapper) or {}).get("files"))

    def describe_event(self, wrapper: Any) -> str:
        event = events.event_of(wrapper) or {}
        return f"event {wrapper.get('event_id') if isinstance(wrapper, dict) else '?'} " \
               f"({event.get('type')})"


class SlackSocket(SlackWrappers, Socket):
    """Socket Mode: a websocket opened with the app-level token."""

    channel: SlackChannel

    def __init__(self, channel: SlackChannel) -> None:
        super().__init__(channel)
        #: Reopened when Slack says nothing, not even a pong, for this long.
        self.silent_after = channel.config.silent_after
        #: Messages journaled lately, across sessions: a mention's second envelope is
        #: acknowledged without a journal write (chatkernel_slack.socket_mode).
        self.recent = events.RecentMessages()

    async def session(self, link: SocketLink) -> None:
        from chatkernel_slack.socket_mode import SocketSession

        await SocketSession(self, link).run()

    def hello(self, frame: dict[str, Any]) -> None:
        """Slack's ``hello``: note how many connections share the app token (the
        probe reports more than one)."""
        channel = self.channel
        count = frame.get("num_connections")
        count = count if isinstance(count, int) and count > 0 else 1
        if count > 1 and count != channel.connections:
            warning = channel.shared_token_warning(count)
            log.warning("%s: %s", channel.account.key, warning)
            channel.account.runtime.error(warning, time.time())
        channel.connections = count
        channel.socket_opened = True


class SlackEvents(SlackWrappers, Webhook):
    """The Events API: Slack posts each event to the gateway, signed."""

    channel: SlackChannel

    def __init__(self, channel: SlackChannel) -> None:
        super().__init__(channel)
        #: Messages journaled lately: a mention's second event (Slack posts it after the
        #: first was answered) is answered 200 without a journal write.
        self.recent = events.RecentMessages()
        #: Second events of a message answered that way.
        self.twins = 0

    async def receive(self, deliver: Any, wrappers: list[Any]) -> int:
        """Journal the events of a request, less a mention's second event whose twin is
        in the journal already; remembered only once durable, so a twin that comes
        while the first is still being journaled is journaled too (and deduplicated)."""
        recent = self.recent
        keys = [events.message_key(wrapper) for wrapper in wrappers]
        fresh = [wrapper for wrapper, key in zip(wrappers, keys)
                 if key is None or key not in recent]
        self.twins += len(wrappers) - len(fresh)
        count = await super().receive(deliver, fresh)
        for key in keys:
            if key is not None:
                recent.add(key)
        return count

    def verifier(self) -> SlackSignature:
        return SlackSignature(self.channel.config.signing_secret)

    def http_routes(self) -> list[tuple[str, str, Any]]:
        """The kit's routes, with the POST taking Slack's form posts too: an app whose
        Interactivity or Slash Commands URL is this one posts them here, and Slack turns
        off a URL that keeps failing. They are verified like every request, answered
        200 with an empty body (Slack shows a body as the command's answer), and
        logged as not supported; another content type gets 415 saying what is taken."""
        verifier = self.verifier()
        routes = []
        for method, path, handler in super().http_routes():
            if method == "POST":
                handler = self._with_forms(handler, verifier)
            routes.append((method, path, handler))
        return routes

    def _with_forms(self, post: Any, verifier: SlackSignature) -> Any:
        async def handle(request: web.Request) -> web.StreamResponse:
            if request.content_type == "application/json":
                return await post(request)
            if request.content_type != FORM:
                return web.json_response({"ok": False, "error": ACCEPTS}, status=415)
            if (request.content_length or 0) > self.max_bytes:
                return web.json_response(
                    {"ok": False, "error": f"the body is over {self.max_bytes} bytes"},
                    status=413)
            body = await request.read()
            try:
                verifier.verify(request.headers, body)
            except WebhookRejected as exc:
                log.warning("%s: webhook request refused: %s", self.channel.account.key,
                            exc.reason)
                return web.json_response({"ok": False, "error": exc.reason},
                                         status=exc.status)
            log.warning("%s: not supported: %s (this app's Interactivity or Slash Commands "
                        "URL is the Events API URL; answered 200, nothing is done)",
                        self.channel.account.key, form_kind(body))
            return web.Response(status=200)

        return handle

    def answer(self, payload: Any) -> web.StreamResponse | None:
        if isinstance(payload, dict) and payload.get("type") == "url_verification":
            return web.json_response({"challenge": payload.get("challenge", "")})
        return None

    def events(self, payload: Any) -> list[Any]:
        if not isinstance(payload, dict):
            raise WebhookRejected(400, "expected an Events API wrapper (a JSON object)")
        if payload.get("type") == "app_rate_limited":
            log.warning("%s: Slack dropped events: the app is over its Events API rate "
                        "limit (minute %s)", self.channel.account.key,
                        payload.get("minute_rate_limited"))
        return [payload] if payload.get("type") == "event_callback" else []
