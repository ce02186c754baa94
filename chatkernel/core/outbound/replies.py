"""Replies: an account's payloads built (MEDIA: lines, the media-path policy, chunks),
queued in the outbox, and one payload sent through the ``outbound_send`` hook.

The per-turn side, an agent's events becoming a reply, is the
:class:`~chatkernel.core.outbound.responder.Responder`; proactive sends (``chatkernel
send``, a pairing's notice, a refused stranger's answer) queue their text here directly.
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
    from chatkernel.core.health.metrics import Metrics
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


class Replies:
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

    async def send_text(self, account: Account, route: Route, text: str, *,
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
