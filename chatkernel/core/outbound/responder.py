"""The Responder: one turn's agent events become a reply.

Only final text is sent; tool activity and thinking never are. Errors and system notes
flush the pending text first and go out with a clear prefix. The reply's payloads are
built and queued by :class:`~chatkernel.core.outbound.replies.Replies` (MEDIA: lines,
the media-path policy, chunks), and the outbox (:mod:`chatkernel.core.outbound.outbox`)
sends them in order, one session at a time, with retries and pacing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chatkernel.core.outbound.replies import ERROR_PREFIX, SYSTEM_PREFIX, MediaScope, Replies
from chatkernel.core.store.base import LogRow
from chatkernel.sdk.models import Account, OutboundPayload, Route

if TYPE_CHECKING:
    from chatkernel.core.outbound.live import TurnPreview
    from chatkernel.core.turns.agents import AgentEvent


class Responder:
    """Consumes one turn's agent events and queues what should be sent.

    Outside heartbeats, a stray ``HEARTBEAT_OK`` at the start or end of a text is
    stripped and a text that is only the token is dropped (docs/heartbeats.md). A heartbeat
    turn's reply has been judged already (:mod:`chatkernel.core.heartbeat.runner`):
    ``heartbeat=True`` sends it as it is.

    ``replies`` builds the reply's payloads and queues them (:meth:`Replies.payloads`,
    :meth:`Replies.queue_reply`); ``scope``: what the reply's files are judged by
    (default: the account's workspace and access level). ``live``: the turn's live
    preview, if its route shows one (chatkernel.core.outbound.live): it is fed the agent's
    non-final text, and a final block's payloads replace its preview messages.
    """

    def __init__(self, replies: Replies, account: Account, session_key: str,
                 session_id: str, route: Route, journal_seqs: list[int], *,
                 heartbeat: bool = False, user_log: list[LogRow] | None = None,
                 scope: MediaScope | None = None,
                 live: "TurnPreview | None" = None) -> None:
        self._replies = replies
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
                text = event.text if self._heartbeat else self._replies.strip_stray(event.text)
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
        outbound = self._replies
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
