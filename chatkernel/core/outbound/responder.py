"""Outbound: turning an agent's reply into payloads, and sending one payload.

Only final text is sent; tool activity and thinking never are. Errors and
system notes flush the pending text first and go out with a clear prefix.
A reply's text is split at ``MEDIA: <path>`` lines (each file goes out in its
place in the order, after the media-path policy), then chunked at the
channel's limit. Payloads go to the outbox (:mod:`chatkernel.core.outbound.outbox`),
which sends them in order, one session at a time, with retries and pacing.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from chatkernel.core.outbound.chunking import chunk_text
from chatkernel.core.outbound.markers import split_media
from chatkernel.sdk.models import Account, OutboundPayload, Route, SendError, SendResult
from chatkernel.sdk.calls import HUNG_AFTER_SECONDS, HUNG_AFTER_SECONDS_FILE
from chatkernel.core.plugins import await_maybe
from chatkernel.core.outbound.policy import resolve_media_path
from chatkernel.core.store.base import LogRow

if TYPE_CHECKING:
    from chatkernel.core.turns.agents import AgentEvent
    from chatkernel.core.health.metrics import Metrics
    from chatkernel.core.outbound.live import TurnPreview
    from chatkernel.core.plugins import PluginManager
    from chatkernel.core.store.base import Store

log = logging.getLogger("chatkernel.outbound")

ERROR_PREFIX = "⚠️ "
SYSTEM_PREFIX = "ℹ️ "


@dataclasses.dataclass(frozen=True, slots=True)
class MediaScope:
    """What a reply's files are judged by: the workspace relative paths start from and
    the access level the media-path policy is asked with. An agent's own (its
    ``workspace``, its ``access_level``) where its table sets them; else the account's."""

    workspace: Path
    access_level: str

    @classmethod
    def of(cls, account: Account) -> "MediaScope":
        return cls(account.workspace, account.access_level)


def upload_failed(name: str, reason: str) -> str:
    """What the chat reads when a file could not be sent."""
    return f"{ERROR_PREFIX}upload failed: {name} — {reason}"


async def send_payload(pm: "PluginManager", metrics: "Metrics", account: Account,
                       route: Route, payload: OutboundPayload) -> SendResult:
    """One request through the ``outbound_send`` hook of ``pm``, counted in ``metrics``;
    raises SendError on failure (what the outbox sends each payload with).

    A reply quotes its message (``route.reply_to``) in its first part only.
    """
    if route.reply_to is not None and payload.chunk_index != 1:
        route = dataclasses.replace(route, reply_to=None)
    patience = HUNG_AFTER_SECONDS_FILE if payload.is_media else HUNG_AFTER_SECONDS
    with account.runtime.calls.track("a send", patience):  # health (sdk/calls.py)
        result = await await_maybe(pm.call(
            "outbound_send", account=account, route=route, payload=payload))
    if result is None:
        raise SendError(f"no plugin sent the payload for {account.key}")
    metrics.count(metrics.messages_out, account.channel_name, account.name)
    return result


#: submit(account, session_key, session_id, route, payloads, finish_journal=...): queue a
#: reply's payloads, returning its reply id (:meth:`chatkernel.core.outbound.outbox.Outbox.submit`).
Submit = Callable[..., Awaitable[str]]


class Outbound:
    """Builds payloads, queues them, and sends one through the ``outbound_send`` hook.

    ``pm``: the plugin manager (``outbound_send``, ``media_path_allowed``); ``metrics``:
    sends counted; ``store()``: the opened store, where sent texts are logged;
    ``submit``: queues a reply's payloads in the outbox (:data:`Submit`);
    ``strip_stray``: what a turn's text goes through outside heartbeats, the heartbeat's
    reply contract (:func:`chatkernel.core.heartbeat.ack.strip_stray_token`: the text
    without a stray ``HEARTBEAT_OK``, None for the token alone).
    """

    def __init__(self, *, pm: "PluginManager", metrics: "Metrics",
                 store: "Callable[[], Store]", submit: Submit,
                 strip_stray: Callable[[str], str | None]) -> None:
        self._pm = pm
        self._metrics = metrics
        self._store = store
        self._submit = submit
        self.strip_stray = strip_stray

    async def send_payload(self, account: Account, route: Route,
                           payload: OutboundPayload) -> SendResult:
        """One request through the hook; raises SendError on failure (see
        :func:`send_payload`)."""
        return await send_payload(self._pm, self._metrics, account, route, payload)

    async def payloads(self, account: Account, text: str, *, fmt: str = "markdown",
                       media: list[str] = (), scope: MediaScope | None = None
                       ) -> list[OutboundPayload]:
        """The payloads of one reply, in order: text chunks and media files.

        With ``fmt="markdown"`` the text's ``MEDIA:`` lines become media payloads
        in their place; ``media`` adds files after the text (``chatkernel send
        --media``). A file the media-path policy refuses becomes an
        ``⚠️ upload failed`` line instead, and is logged. ``scope``: the files'
        workspace and access level (default: the account's).
        """
        limits = account.channel.limits  # type: ignore[union-attr]
        result: list[OutboundPayload] = []
        segments = split_media(text) if fmt == "markdown" else None
        pieces: list[tuple[str, str]] = (
            [(s.kind, s.value) for s in segments] if segments is not None else [("text", text)])
        pieces += [("media", path) for path in media]
        for kind, value in pieces:
            if kind == "text":
                result.extend(OutboundPayload(text=chunk, format=fmt)  # type: ignore[arg-type]
                              for chunk in chunk_text(value, limits.text_limit,
                                                      limits.text_unit))
            else:
                result.append(await self._media_payload(account, value, scope))
        return result

    async def check_media(self, account: Account, raw_path: str,
                          scope: MediaScope | None = None) -> tuple[Path | None, str]:
        """Resolve a media path and ask ``media_path_allowed``: (path, "") when it
        may be sent, else (None, the reason). Refusals are logged."""
        scope = scope or MediaScope.of(account)
        try:
            if "\x00" in raw_path:
                raise ValueError("the path contains a NUL byte")
            path = resolve_media_path(raw_path, scope.workspace)
        except (OSError, ValueError, RuntimeError) as exc:
            reason = f"not a usable path ({exc})"
            log.warning("%s: media %r refused: %s", account.key, raw_path, reason)
            return None, reason
        verdict = await await_maybe(self._pm.hook.media_path_allowed(
            path=path, workspace=scope.workspace.resolve(),
            access_level=scope.access_level, account=account))
        if verdict is not None and not verdict:
            log.warning("%s: media %s refused by the media-path policy: %s", account.key, path,
                        verdict.reason)
            return None, verdict.reason
        return path, ""

    async def _media_payload(self, account: Account, raw_path: str,
                             scope: MediaScope | None) -> OutboundPayload:
        path, reason = await self.check_media(account, raw_path, scope)
        if path is None:
            name = raw_path.replace("\x00", "").rsplit("/", 1)[-1] or raw_path
            return OutboundPayload(text=upload_failed(name, reason), format="plain")
        limits = account.channel.limits  # type: ignore[union-attr]
        try:
            size = path.stat().st_size
        except OSError as exc:
            return OutboundPayload(text=upload_failed(path.name, f"cannot read it ({exc})"),
                                   format="plain")
        refusal = limits.media_refusal(size)
        if refusal is not None:
            log.warning("%s: media %s not sent: %s", account.key, path, refusal)
            return OutboundPayload(text=upload_failed(path.name, refusal), format="plain")
        # The kind by extension, then by its size cap (a photo too big goes as a document).
        return OutboundPayload(media_path=path, media_kind=limits.media_kind(path, size))

    async def deliver_text(self, account: Account, route: Route, text: str, *,
                           session_key: str | None = None, session_id: str = "",
                           fmt: str = "markdown", media: list[str] = (),
                           log: bool = False) -> str | None:
        """Queue a text (and files) for a route; returns the reply id (None: nothing to send).

        ``log``: record it in the session's log as the bot's (role ``assistant``, meta
        ``kind: send``), before anything of it can fail: a proactive send is part of the
        conversation, and what becomes of it is noted after it."""
        payloads = await self.payloads(account, text, fmt=fmt, media=media)
        if not payloads:
            return None
        key = session_key or route_key(route)
        if log and session_key:
            logged = "\n".join([text.strip(), *(f"MEDIA: {path}" for path in media)]).strip()
            await self._store().append_log(key, session_id, "assistant", logged,
                                           {"kind": "send"})
        return await self._submit(account, key, session_id, route, payloads)

    async def requeue(self, account: Account, session_key: str, session_id: str,
                      route: Route, payloads: list[OutboundPayload]) -> str:
        """Queue payloads built before (a failed send retried) as a new reply of the
        session, behind what it holds; returns the reply id."""
        return await self._submit(account, session_key, session_id, route, payloads)

    async def queue_reply(self, account: Account, session_key: str, session_id: str,
                          route: Route, text: str, payloads: list[OutboundPayload], *,
                          log: list[LogRow], finish_journal: list[int]) -> str:
        """Queue one reply of a turn: the rows of ``log`` and the reply's ``text`` go
        to the session's log, then its payloads to the outbox with the journal entries
        it finishes (no wait in between: they share one transaction, so a replayed turn
        logs nothing twice); returns the reply id."""
        await self._store().append_logs(session_key, session_id,
                                        [*log, ("assistant", text, None)])
        return await self._submit(account, session_key, session_id, route, payloads,
                                  finish_journal=finish_journal)


def route_key(route: Route) -> str:
    """The outbox ordering key of a send without a session."""
    base = f"{route.channel}:{route.account}:{route.chat_id}"
    return f"{base}:{route.thread_id}" if route.thread_id else base


class Responder:
    """Consumes one turn's agent events and queues what should be sent.

    Outside heartbeats, a stray ``HEARTBEAT_OK`` at the start or end of a text is
    stripped and a text that is only the token is dropped (docs/heartbeats.md). A heartbeat
    turn's reply has been judged already (:mod:`chatkernel.core.heartbeat.runner`):
    ``heartbeat=True`` sends it as it is.

    ``outbound`` builds the reply's payloads and queues them (:meth:`Outbound.payloads`,
    :meth:`Outbound.queue_reply`); ``scope``: what the reply's files are judged by
    (default: the account's workspace and access level). ``live``: the turn's live
    preview, if its route shows one (chatkernel.core.outbound.live): it is fed the agent's
    non-final text, and a final block's payloads replace its preview messages.
    """

    def __init__(self, outbound: Outbound, account: Account, session_key: str,
                 session_id: str, route: Route, journal_seqs: list[int], *,
                 heartbeat: bool = False, user_log: list[LogRow] | None = None,
                 scope: MediaScope | None = None,
                 live: "TurnPreview | None" = None) -> None:
        self._outbound = outbound
        self._scope = scope
        self._heartbeat = heartbeat
        self._account = account
        self._key = session_key
        self._session_id = session_id
        self._route = route
        self._journal_seqs = journal_seqs  # marked done with the first queued reply
        self._user_log = user_log or []  # logged with the first queued reply
        self._live = live
        #: Final blocks not queued yet, with the ids of the previews they replace.
        self._pending: list[tuple[str, list[str]]] = []
        self.replies = 0

    async def handle(self, event: AgentEvent) -> None:
        if event.kind == "text":
            live = self._live
            if not event.final:
                if live is not None:
                    live.feed(event.text)
                return
            previews = await live.end_block() if live is not None else []
            text = ""
            if event.text.strip():
                text = event.text if self._heartbeat else self._outbound.strip_stray(event.text)
            if text:
                self._pending.append((text, previews))
            elif previews:
                await live.discard(previews)  # type: ignore[union-attr]
        elif event.kind == "error":
            await self.flush()
            await self._queue(ERROR_PREFIX + event.text, fmt="plain")
        elif event.kind == "system":
            await self.flush()
            await self._queue(SYSTEM_PREFIX + event.text, fmt="plain")
        # "tool" and "thinking" are never sent.

    def unfinished_journal(self) -> list[int]:
        """Journal entries no queued reply has finished (the turn said nothing)."""
        return self._journal_seqs

    def join(self, log_row: LogRow, journal_seq: int | None) -> None:
        """A message steered into this turn: logged and finished with the turn's
        next reply, or when it ends."""
        self._user_log.append(log_row)
        if journal_seq is not None:
            self._journal_seqs.append(journal_seq)

    def unlogged(self) -> list[LogRow]:
        """The turn's user entries no queued reply has logged (the turn said nothing)."""
        return self._user_log

    async def flush(self) -> None:
        pending, self._pending = self._pending, []
        for text, previews in pending:
            await self._queue(text, previews=previews)

    async def _queue(self, text: str, fmt: str = "markdown", *,
                     previews: list[str] = ()) -> None:
        outbound = self._outbound
        payloads = await outbound.payloads(self._account, text, fmt=fmt, scope=self._scope)
        replaced = replace_previews(payloads, previews)
        if not payloads:
            if previews and self._live is not None:
                await self._live.discard(list(previews))
            return
        # The turn's user entries are logged with its first reply (see queue_reply).
        rows, self._user_log = self._user_log, []
        finish, self._journal_seqs = self._journal_seqs, []
        await outbound.queue_reply(self._account, self._key, self._session_id, self._route,
                                   text, payloads, log=rows, finish_journal=finish)
        self.replies += 1
        if previews and self._live is not None:
            await self._live.handed_over(replaced)
            await self._live.discard([p for p in previews if p not in replaced])


def replace_previews(payloads: list[OutboundPayload], previews: list[str]) -> list[str]:
    """Have a reply's leading text payloads replace the preview messages of its live
    reply, in order (a file ends the run: what follows it is sent after it); returns
    the previews replaced."""
    replaced: list[str] = []
    for payload, preview in zip(payloads, previews):
        if payload.is_media:
            break
        payload.replaces = preview
        replaced.append(preview)
    return replaced
