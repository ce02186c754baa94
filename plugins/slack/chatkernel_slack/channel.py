"""The Slack channel: one app in one workspace, over Socket Mode (default) or the Events API.

Only Slack lives here: its account config, reading its events
(chatkernel_slack.events), its calls (chatkernel_slack.api, on slack_sdk), sending,
what its error codes mean, the probe. How it receives — Socket Mode or the Events
API — is its transport (chatkernel_slack.receiving). The receive loops'
supervision, webhooks and their signatures, dedupe, retries, pacing and the outbox
are the kernel's.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from chatkernel.channels import (
    AccountConfig,
    Capabilities,
    Channel,
    ChannelContext,
    ChannelLimits,
    InboundMessage,
    LiveMode,
    LiveReplies,
    MediaRef,
    OutboundPayload,
    PlatformError,
    Preview,
    ProbeResult,
    RateLimit,
    Route,
    SendResult,
    Trouble,
    escape_html,
    refusal,
    render_payload,
)
from chatkernel_slack import events, scopes
from chatkernel_slack.api import DEFAULT_API_BASE, TOKEN_ERRORS, TOKEN_PATTERNS, SlackAPI
from chatkernel_slack.markup import SlackMrkdwn
from chatkernel_slack.receiving import SlackEvents, SlackSocket

log = logging.getLogger("chatkernel.slack")

MB = 1024 * 1024
#: Slack errors that mean it could not take the markup: the kernel resends as plain text.
MARKUP_ERRORS = frozenset({"invalid_blocks", "invalid_blocks_format"})
#: Slack errors about one conversation or one message, not the app: the channel is
#: gone, archived or closed to the bot, a thread it cannot reply in, a message too long.
RECIPIENT_ERRORS = frozenset({
    "channel_not_found", "not_in_channel", "is_archived", "messages_tab_disabled",
    "cannot_reply_to_message", "restricted_action", "restricted_action_read_only_channel",
    "restricted_action_thread_only_channel", "restricted_action_non_threadable_channel",
    "user_not_found", "msg_too_long", "no_text"})
#: How long the receive loop waits before trying a refused token again.
REFUSED_WAIT_SECONDS = 60.0
#: Remembered per chat or thread (bounded): the last message's ts, threads the bot is in.
MEMORY = 10_000

#: What to do about each refused token, by Slack's error code. The tokens are on the
#: app's config page (api.slack.com/apps, the app): the bot token under "OAuth &
#: Permissions", the app-level token under "Basic Information", "App-Level Tokens".
_TOKEN_ADVICE = {
    "invalid_auth": "the token is not one Slack knows: copy it again from the app's config "
                    "page",
    "not_authed": "no token reached Slack: set it",
    "token_revoked": "the token was revoked (the app was uninstalled or the token "
                     "regenerated): reinstall the app to the workspace from its config page "
                     "(or regenerate the token there)",
    "token_expired": "the token expired (token rotation is on): set a fresh token from the "
                     "app's config page",
    "account_inactive": "the bot user or its workspace was deactivated: reinstall the app "
                        "from its config page",
    "not_allowed_token_type": "this kind of token cannot make this call: the bot token starts "
                              "with xoxb-, the app-level token with xapp-",
    "invalid_token": "the token is malformed: copy it again from the app's config page",
}
_TOKEN_PAGES = {"bot_token": "OAuth & Permissions", "app_token": "Basic Information, "
                "App-Level Tokens (scope connections:write)"}


def token_key(error: PlatformError) -> str:
    """The config key of the token a refused call used."""
    return "app_token" if error.details.get("method") == "apps.connections.open" \
        else "bot_token"


class SlackAccount(AccountConfig):
    """``[channels.slack.accounts.<name>]``: one Slack app installed in one workspace.

    The common keys (``allow_from``, ``require_mention``, ``access_level``...) come
    from :class:`~chatkernel.channels.AccountConfig`; rate and retry overrides are
    channel-wide (``[channels.slack]``).
    """

    identity: ClassVar[tuple[str, ...]] = ("api_base", "bot_token")

    #: The Bot User OAuth Token (``xoxb-``): every Web API call.
    bot_token: str = Field(repr=False)
    #: The app-level token (``xapp-``, scope ``connections:write``): Socket Mode.
    app_token: str | None = Field(None, repr=False)
    #: The app's signing secret: the Events API's request signatures.
    signing_secret: str | None = Field(None, repr=False)
    mode: Literal["socket", "events"] = "socket"
    api_base: str = DEFAULT_API_BASE
    #: Where a mention in a channel (outside a thread) is answered: in a new thread under
    #: it, which is then the conversation ("thread"), or in the channel ("channel").
    channel_replies: Literal["thread", "channel"] = "thread"
    #: Answer other bots' messages too (never this app's own).
    allow_bots: bool = False
    #: The status shown while a turn runs (assistant.threads.setStatus); "" for none.
    working_status: str = "is thinking…"
    #: Seconds between slack_sdk's pings on the socket.
    ping_interval: float = Field(5.0, gt=0, le=60)
    #: A socket that says nothing (not even a pong) for this long is reopened, and the
    #: account's health is red meanwhile.
    silent_after: float = Field(30.0, gt=0)

    def webhook_secrets(self) -> tuple[str, ...]:
        return ("signing_secret",) if self.mode == "events" else ()

    @model_validator(mode="before")
    @classmethod
    def _secrets(cls, data: Any) -> Any:
        # Checked on the raw table, so that the error quotes no token (pydantic's error
        # for a field would show the value given).
        if not isinstance(data, dict):
            return data
        problems = []
        token = data.get("bot_token")
        if isinstance(token, str) and not _shaped(token, "xoxb-"):
            if token.startswith("xoxp-"):
                problems.append("bot_token is a user token (xoxp-…); use the app's Bot User "
                                "OAuth Token (xoxb-…)")
            elif token.startswith("xapp-"):
                problems.append("bot_token is an app-level token (xapp-…), which goes in "
                                "app_token; bot_token is the Bot User OAuth Token (xoxb-…)")
            else:
                problems.append("bot_token must be the app's Bot User OAuth Token (xoxb-…)")
        mode = data.get("mode", "socket")
        app_token = data.get("app_token")
        if mode == "socket" and app_token in (None, ""):
            problems.append("app_token is required in socket mode: an app-level token "
                            "(xapp-…) with the connections:write scope")
        elif isinstance(app_token, str) and not _shaped(app_token, "xapp-"):
            problems.append("app_token must be an app-level token (xapp-…)")
        secret = data.get("signing_secret")
        if mode == "events" and secret in (None, ""):
            problems.append("signing_secret is required in events mode (the app's Signing "
                            "Secret, under Basic Information)")
        elif isinstance(secret, str) and (not secret or secret.strip() != secret
                                          or any(ch.isspace() for ch in secret)):
            problems.append("signing_secret must be the app's Signing Secret, without spaces")
        if problems:
            raise ValueError("; ".join(problems))
        return data


def _shaped(token: str, prefix: str) -> bool:
    # An unresolved ${VAR} (config set checks before the gateway's environment is
    # read) is left to the start, which checks the value it resolves to.
    if token.startswith("${"):
        return True
    return token.startswith(prefix) and len(token) > len(prefix) \
        and not any(ch.isspace() for ch in token)


class _Bounded(OrderedDict):
    """A dict that forgets its oldest keys beyond :data:`MEMORY`."""

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        if len(self) > MEMORY:
            self.popitem(last=False)


#: Seconds between two updates of a live reply: chat.update is Tier 3 (about 50 a minute
#: per workspace), chat.appendStream Tier 4 (about 100).
EDIT_LIVE_INTERVAL = 1.5
STREAM_LIVE_INTERVAL = 1.0
#: A stream Slack ended already (it expires when appends stop for a while).
NOT_STREAMING = "message_not_in_streaming_state"


#: The preview id of a message posted instead of a stream Slack refused (then updated).
EDITED = "edited:"


def _channel_ts(message_id: str) -> tuple[str, str]:
    """``"C123:1700000000.000100"`` (what ``send`` returns) as (channel, ts)."""
    channel, _, ts = message_id.removeprefix(EDITED).rpartition(":")
    return channel, ts


class SlackChannel(Channel, LiveReplies):
    """One Slack app in one workspace."""

    name = "slack"
    config_example = """\
[channels.slack.accounts.main]
bot_token = "${SLACK_BOT_TOKEN}"      # the Bot User OAuth Token, xoxb-…
app_token = "${SLACK_APP_TOKEN}"      # an app-level token, xapp-…: Socket Mode
allow_from = ["U0123ABCD"]            # Slack user ids; "chat:C0123ABCD" a channel; "*" anyone
dm_policy = "pairing"                 # others get a code: chatkernel pairing approve slack CODE
"""
    account_model = SlackAccount
    limits = ChannelLimits(
        text_limit=4000, text_unit="chars", caption_limit=4000,
        media_kinds={}, default_media_kind="file", media_max_bytes={"file": 1024 * MB},
        # chat.postMessage: about one message a second per channel (short bursts
        # tolerated), several hundred a minute per workspace.
        rates={"chat": RateLimit(1, 1.0), "account": RateLimit(300, 60.0)},
        retry_base_delay=0.5,
        # The status lasts two minutes unless the app replies: refreshing it rarely is
        # enough.
        indicator_interval=30.0,
        # assistant.threads.setStatus: Slack says "special" limits and gives no figure;
        # its sibling methods (setSuggestedPrompts, setTitle) are Tier 4, 100 a minute
        # per workspace. Each status the kernel sets may be followed by one clear (after
        # a top-level reply, see _posted), so the sets get half of it.
        indicator_rates={"account": RateLimit(50, 60.0)},
        # A reply within half a second needs no status: set, it would be cleared at once
        # (a second call), and it counts in the 50 a minute of the workspace's turns.
        indicator_delay=0.5,
    )
    capabilities = Capabilities(command_prefixes="/!", recipient_error_codes=RECIPIENT_ERRORS)
    markup = SlackMrkdwn
    secret_patterns = TOKEN_PATTERNS

    def __init__(self, account: Any, context: ChannelContext | None = None) -> None:
        super().__init__(account, context)
        config = self.config
        self.api = SlackAPI(config.bot_token, config.api_base,
                            secrets=tuple(s for s in (config.app_token, config.signing_secret)
                                          if s))
        #: auth.test's answer: the team, the bot user (self_id), the bot id.
        self.me: dict[str, Any] | None = None
        self.bot_id: str | None = None
        #: Connections the app token has, as the last ``hello`` said.
        self.connections = 1
        #: A socket opened (a ``hello`` came): the app token has connections:write.
        self.socket_opened = False
        #: What apps.connections.open said of the app token, asked once by the probe
        #: (a Tier 1 method: not at every probe).
        self._app_token: dict[str, Any] | None = None
        self._last_ts: dict[str, str] = _Bounded()       # chat -> last message ts
        self._bot_threads: dict[tuple[str, str], bool] = _Bounded()
        self._status_on: dict[tuple[str, str], bool] = _Bounded()
        self._uploaded: dict[tuple[Any, ...], str] = _Bounded()
        #: Slack refused this app a stream (chat.startStream): live replies update instead.
        self._no_streams = False

    # -- receiving ----------------------------------------------------------------------

    def transport(self) -> SlackSocket | SlackEvents:
        """Socket Mode, or the Events API's webhook, by ``mode``."""
        return SlackEvents(self) if self.config.mode == "events" else SlackSocket(self)

    @staticmethod
    def shared_token_warning(count: int) -> str:
        return (f"{count} connections share this app token: another process (another "
                "gateway, a test run) uses it, and Slack gives each event to one connection "
                "at random, so this one misses some; stop the other or give it its own app")

    async def identify(self) -> None:
        if self.me is None:
            self._learn(await self.api.call("auth.test", lambda client: client.auth_test()))

    def _learn(self, me: dict[str, Any]) -> None:
        self.me = me
        self.self_id = me.get("user_id")
        self.bot_id = me.get("bot_id")

    def receive_trouble(self, error: Exception) -> Trouble:
        if isinstance(error, PlatformError):
            if error.code in TOKEN_ERRORS:
                return Trouble(f"Slack refused {token_key(error)} ({error.code})",
                               wait=REFUSED_WAIT_SECONDS, restartable=False, refused=True,
                               advice=self._token_advice(error))
            if error.code == "missing_scope":
                return Trouble(str(error), wait=REFUSED_WAIT_SECONDS, restartable=False)
            from chatkernel_slack.socket_mode import SOCKET_DISCONNECTED

            if error.code == SOCKET_DISCONNECTED:
                # The socket is gone and cannot be opened again: nothing is received
                # until it can, whatever the other calls do. Red at once, with that.
                return Trouble(str(error))
        return super().receive_trouble(error)

    def _token_advice(self, error: PlatformError) -> str:
        """What to do about a refused token: where to get a new one, which key takes it."""
        key = token_key(error)
        advice = _TOKEN_ADVICE.get(str(error.code), "Slack refused it: check it on the app's "
                                                    "config page")
        return (f"{advice} ({_TOKEN_PAGES[key]}), set it in {self.account.config_key(key)} "
                "and restart the gateway")

    async def normalize(self, wrapper: Any) -> InboundMessage | None:
        """An Events API wrapper as an InboundMessage (None: not a message to answer)."""
        event = events.message_event(wrapper)
        if event is None:
            return None
        user, bot_id = event.get("user"), event.get("bot_id")
        if bot_id or event.get("subtype") == "bot_message":
            if bot_id is not None and bot_id == self.bot_id:
                return None  # this app's own: never answered (no echo loops)
            if not self.config.allow_bots:
                return None
        sender = user or bot_id
        text = event.get("text") or ""
        if not isinstance(sender, str) or not isinstance(text, str):
            raise ValueError("its user or text is not a string")
        channel, ts = event["channel"], event["ts"]
        group = events.is_group(event)
        thread = event.get("thread_ts")
        if not thread and group and self.config.channel_replies == "thread":
            thread = ts  # answered in a new thread under it: that thread is the session
        media = [await self._download(item) for item in event.get("files") or []
                 if isinstance(item, dict)]
        if not text.strip() and not media:
            return None
        if thread is None:
            self._last_ts[channel] = ts
        bot = self.self_id
        return InboundMessage(
            channel=self.name, account=self.account.name, chat_id=channel,
            message_id=events.message_id(event), sender_id=sender,
            sender_name=events.sender_name(event), text=events.plain_text(text, bot),
            thread_id=thread, is_group=group,
            mentions_bot=event["type"] == "app_mention" or events.mentions(text, bot),
            # A thread the bot answered in is a conversation with it: no mention needed.
            reply_to_bot=bool(event.get("thread_ts")) and (
                event.get("parent_user_id") == bot
                or (channel, event["thread_ts"]) in self._bot_threads),
            media=media, timestamp=float(ts))

    async def _download(self, item: dict[str, Any]) -> MediaRef:
        name, size, mime = item.get("name") or item.get("title"), item.get("size"), \
            item.get("mimetype")
        file_id = item.get("id")
        kind = events.media_kind(mime)
        url = item.get("url_private_download") or item.get("url_private")
        if not url or item.get("mode") in ("tombstone", "hidden_by_limit", "external"):
            return MediaRef(kind=kind, filename=name, size=size, platform_id=file_id,
                            note="not saved: Slack gave no private download link")
        try:
            context = self.context
            return await context.save_media(
                self.api.download(url, max_bytes=context.max_inbound_bytes), kind=kind,
                filename=name, mime=mime, platform_id=file_id, declared_size=size)
        except PlatformError as exc:
            return MediaRef(kind=kind, filename=name, size=size, platform_id=file_id,
                            note=f"not saved: {exc}")

    # -- sending --------------------------------------------------------------------------

    def _wire_text(self, payload: OutboundPayload) -> tuple[str, str | None]:
        text, markup = render_payload(payload, self.markup)
        if markup and not text.strip() and payload.text.strip():
            # Markdown that renders to nothing Slack shows (a dangerous link alone):
            # Slack would refuse it (no_text), and the plain rendering is empty too.
            text, markup = payload.text, None
        # Plain text still needs Slack's three escapes, or "<!channel>" would ping everyone.
        return (text if markup else escape_html(text)), markup

    async def send(self, route: Route, payload: OutboundPayload) -> SendResult:
        if payload.is_media:
            return await self._send_file(route, payload)
        text, markup = self._wire_text(payload)
        kwargs: dict[str, Any] = {"channel": route.chat_id, "text": text,
                                  "mrkdwn": markup is not None}
        if route.thread_id:
            kwargs["thread_ts"] = route.thread_id
        try:
            answer = await self.api.post("chat.postMessage", kwargs)
        except PlatformError as exc:
            raise exc.send_error(markup_rejected=markup is not None
                                 and exc.code in MARKUP_ERRORS) from None
        await self._posted(route)
        return SendResult(message_id=f"{answer.get('channel', route.chat_id)}:{answer.get('ts')}")

    async def _posted(self, route: Route) -> None:
        if route.thread_id:
            self._bot_threads[(route.chat_id, route.thread_id)] = True
            return
        # A top-level reply does not clear a status shown on the message's thread.
        ts = self._last_ts.get(route.chat_id)
        if ts is not None and self._status_on.pop((route.chat_id, ts), None):
            await self._set_status(route.chat_id, ts, "", quiet=True)

    async def _send_file(self, route: Route, payload: OutboundPayload) -> SendResult:
        """Upload v2: files.getUploadURLExternal → the bytes → files.completeUploadExternal.

        Nothing shows in the channel before the last step, so the first two are safe
        to repeat whatever their failure; once the bytes are up, a retry of the send
        goes straight to the last step with the same file."""
        path = Path(payload.media_path)  # type: ignore[arg-type]
        stat = path.stat()
        key = (route.chat_id, route.thread_id, str(path), stat.st_size, stat.st_mtime_ns)
        file_id = self._uploaded.get(key)
        if file_id is None:
            try:
                ticket = await self.api.call(
                    "files.getUploadURLExternal",
                    lambda client: client.files_getUploadURLExternal(filename=path.name,
                                                                     length=stat.st_size))
                await self.api.upload(ticket["upload_url"], path)
            except PlatformError as exc:
                raise exc.send_error(retryable=exc.kind != "rejected",
                                     delivery_unknown=False) from None
            file_id = self._uploaded[key] = ticket["file_id"]
        kwargs: dict[str, Any] = {"files": [{"id": file_id, "title": path.name}],
                                  "channel_id": route.chat_id}
        if route.thread_id:
            kwargs["thread_ts"] = route.thread_id
        markup = None
        if payload.caption:
            kwargs["initial_comment"], markup = self._wire_text(
                OutboundPayload(text=payload.caption, format=payload.format))
        try:
            await self.api.call("files.completeUploadExternal",
                                lambda client: client.files_completeUploadExternal(**kwargs))
        except PlatformError as exc:
            if not exc.repeatable:
                self._uploaded.pop(key, None)
            raise exc.send_error(markup_rejected=markup is not None
                                 and exc.code in MARKUP_ERRORS) from None
        self._uploaded.pop(key, None)
        await self._posted(route)
        return SendResult(message_id=file_id)

    # -- live replies: Slack's stream in a DM's thread, chat.update elsewhere ---------------

    def live_mode(self, route: Route) -> LiveMode | None:
        # A stream is a reply in a thread, and outside a DM it must name its recipient,
        # which a route does not carry: elsewhere the first text is updated in place.
        # So does an app Slack refused a stream to (chat.update is the fallback).
        streams = route.thread_id and route.chat_id.startswith("D") and not self._no_streams
        return "stream" if streams else "edit"

    def live_interval(self, route: Route, mode: LiveMode) -> float:
        return STREAM_LIVE_INTERVAL if mode == "stream" else EDIT_LIVE_INTERVAL

    async def start_preview(self, route: Route, mode: LiveMode,
                            payload: OutboundPayload) -> str:
        if mode == "stream" and not self._no_streams:
            try:
                answer = await self.api.call(
                    "chat.startStream", lambda client: client.chat_startStream(
                        channel=route.chat_id, thread_ts=route.thread_id,
                        markdown_text=payload.text))
            except PlatformError as exc:
                if exc.kind != "rejected":
                    raise  # a 429, Slack down: the next update tries again
                # Streaming is not available to this app: chat.update from now on.
                log.warning("%s: chat.startStream refused (%s): live replies update a "
                            "message instead", self.account.key, exc.code)
                self._no_streams = True
            else:
                await self._posted(route)
                return f"{answer.get('channel', route.chat_id)}:{answer.get('ts')}"
        result = await self.send(route, payload)
        if mode == "stream":  # the fallback: its updates edit the message
            return f"{EDITED}{result.message_id}"
        return str(result.message_id)

    async def update_preview(self, route: Route, preview: Preview,
                             payload: OutboundPayload) -> None:
        channel, ts = _channel_ts(preview.id)
        if preview.mode == "stream" and not preview.id.startswith(EDITED):
            # Slack's stream appends: the new part only
            more = payload.text[len(preview.text):]
            if more:
                await self.api.call("chat.appendStream", lambda client: client.chat_appendStream(
                    channel=channel, ts=ts, markdown_text=more))
            return
        await self._update(channel, ts, payload)

    async def stop_preview(self, route: Route, preview: Preview) -> None:
        if preview.mode != "stream" or preview.id.startswith(EDITED):
            return
        channel, ts = _channel_ts(preview.id)
        try:
            await self.api.call("chat.stopStream", lambda client: client.chat_stopStream(
                channel=channel, ts=ts))
        except PlatformError as exc:
            if exc.code != NOT_STREAMING:  # ended already: nothing to stop
                raise

    async def replace_preview(self, route: Route, payload: OutboundPayload) -> SendResult:
        assert payload.replaces is not None
        channel, ts = _channel_ts(payload.replaces)
        markup = None
        try:
            markup = await self._update(channel, ts, payload)
        except PlatformError as exc:
            if exc.code == "message_not_found":  # someone deleted the preview
                return await self.send(route, payload)
            raise exc.send_error(markup_rejected=markup is not None
                                 and exc.code in MARKUP_ERRORS) from None
        return SendResult(message_id=payload.replaces.removeprefix(EDITED))

    async def delete_preview(self, route: Route, preview: Preview) -> None:
        channel, ts = _channel_ts(preview.id)
        await self.api.call("chat.delete", lambda client: client.chat_delete(
            channel=channel, ts=ts))

    async def _update(self, channel: str, ts: str, payload: OutboundPayload) -> str | None:
        text, markup = self._wire_text(payload)
        await self.api.call("chat.update", lambda client: client.chat_update(
            channel=channel, ts=ts, text=text))
        return markup

    async def indicate(self, route: Route) -> None:
        """The working status (assistant.threads.setStatus) on the thread the reply goes
        to, or on the user's last message in a chat answered outside threads. Slack
        clears it when the app replies in that thread; a top-level reply clears it
        explicitly (see :meth:`_posted`)."""
        status = self.config.working_status
        ts = route.thread_id or self._last_ts.get(route.chat_id)
        if not status or ts is None:
            return
        await self._set_status(route.chat_id, ts, status)
        if not route.thread_id:
            self._status_on[(route.chat_id, ts)] = True

    async def _set_status(self, chat: str, ts: str, status: str, *, quiet: bool = False) -> None:
        try:
            await self.api.call("assistant.threads.setStatus",
                                lambda client: client.assistant_threads_setStatus(
                                    channel_id=chat, thread_ts=ts, status=status))
        except PlatformError as exc:
            if not quiet:
                raise
            log.debug("%s: clearing the working status failed: %s", self.account.key, exc)

    # -- health ---------------------------------------------------------------------------

    async def probe(self) -> ProbeResult:
        """``auth.test``: the bot token, its workspace and bot user; the scopes it lacks
        for what the account does (its answer's ``x-oauth-scopes``) and, in socket mode,
        the app-level token's, as ``extra["findings"]`` (``chatkernel doctor``); Slack's
        clock as ``extra["server_date"]``."""
        try:
            me, headers = await self.api.answer("auth.test", lambda client: client.auth_test())
        except PlatformError as exc:
            refused = refusal(self, exc)
            if refused is not None:  # restarting cannot help: a person must act
                return ProbeResult(ok=False, detail=refused, restartable=False)
            return ProbeResult(ok=False, detail=str(exc))
        self._learn(me)
        detail = f"{me.get('team')} as @{me.get('user')}"
        if self.config.mode == "socket" and self.connections > 1:
            detail += f"; warning: {self.shared_token_warning(self.connections)}"
        findings = scopes.bot_findings(scopes.granted(headers), self.config)
        if self.config.mode == "socket":
            app_token = await self._app_token_finding()
            if app_token is not None:
                findings.append(app_token)
        lacking = [item["check"].removeprefix("scope.") for item in findings
                   if item["status"] != "ok"]
        if lacking:
            detail += f"; warning: missing scopes {', '.join(lacking)} (chatkernel doctor)"
        date = next((value for key, value in headers.items() if key.lower() == "date"), None)
        return ProbeResult(ok=True, detail=detail, extra={
            "team": me.get("team"), "team_id": me.get("team_id"), "user": me.get("user"),
            "user_id": me.get("user_id"), "bot_id": me.get("bot_id"),
            "mode": self.config.mode, "connections": self.connections,
            "findings": findings, **({"server_date": date} if date else {})})

    async def _app_token_finding(self) -> dict[str, Any] | None:
        """Whether the app-level token has connections:write: proven by an open socket,
        else asked of ``apps.connections.open`` once (None: Slack could not be asked)."""
        if self.socket_opened:
            return scopes.app_token_finding(None)
        if self._app_token is None:
            token = self.config.app_token or ""
            try:
                await self.api.call("apps.connections.open", lambda _: self.api.web_client(
                    token=token).apps_connections_open(app_token=token))
            except PlatformError as exc:
                if exc.kind != "rejected":  # a 429, Slack down: the next probe asks again
                    return None
                self._app_token = scopes.app_token_finding(str(exc.code))
            else:
                self._app_token = scopes.app_token_finding(None)
        return self._app_token

    async def aclose(self) -> None:
        await self.api.close()
