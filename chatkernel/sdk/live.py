"""Live replies: a channel that can show a reply while the agent is still writing it.

A channel declares the capability by inheriting :class:`LiveReplies` beside
:class:`~chatkernel.sdk.channel.Channel`; the kernel detects it with ``isinstance``
and drives it from the agent's non-final text events (chatkernel.core.outbound.live):
it coalesces the deltas into updates at most every :meth:`LiveReplies.live_interval`
seconds, takes a slot of the account's rate limiter for each call (an update that
finds no free slot waits for the next one: previews never queue ahead of answers),
closes open Markdown marks in every state it shows, and starts a new preview when
the text outgrows the channel's ``text_limit``.

A preview is best-effort: a failed call is logged and never fails the turn. The
finished answer still goes through the outbox like any reply, exactly once. Its
first payloads carry ``OutboundPayload.replaces``, the id of the preview message
they take the place of (modes ``edit`` and ``stream``), and the outbox delivers them
with :meth:`LiveReplies.replace_preview` instead of ``send``; in mode ``draft`` the
preview is no message at all and the answer is sent as usual.

The modes:

- ``draft``: an ephemeral preview the platform shows until the answer is sent
  (Telegram's ``sendMessageDraft`` in a private chat);
- ``edit``: a real message, sent with the first text and edited as more arrives
  (Telegram in a group, Slack's ``chat.update``, iLink's ``message_state``);
- ``stream``: the platform's native stream, which appends text and renders partial
  Markdown itself (Slack's ``chat.startStream``): the kernel hands it the raw text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from chatkernel.sdk.models import OutboundPayload, Route, SendResult

__all__ = ["LIVE_MODES", "LiveMode", "LiveReplies", "Preview"]

LiveMode = Literal["draft", "edit", "stream"]
LIVE_MODES: tuple[str, ...] = ("draft", "edit", "stream")


@dataclass(slots=True)
class Preview:
    """One preview the kernel keeps up to date.

    ``id``: the platform's id of the preview message (modes ``edit`` and ``stream``)
    or of the draft (``draft``); ``text``: the Markdown it shows now (marks closed,
    except in mode ``stream``, where it is the raw text streamed so far).
    """

    mode: LiveMode
    id: str
    text: str = ""


class LiveReplies:
    """The capability of showing a reply in progress; mix it into a Channel subclass.

    A channel implements :meth:`live_mode`, :meth:`start_preview`,
    :meth:`update_preview` and, for modes ``edit`` and ``stream``,
    :meth:`replace_preview` and :meth:`delete_preview`; :meth:`stop_preview` ends a
    native stream. Every method raises ``PlatformError`` (or any exception) on failure:
    the kernel logs it and carries on without the preview.
    """

    #: Seconds between two updates of a preview, by default (the config's
    #: ``streaming_interval_ms`` overrides it).
    live_interval_seconds: ClassVar[float] = 0.75
    #: Whether ``streaming`` is on for this channel when the config does not say.
    streaming_default: ClassVar[bool] = True

    def live_mode(self, route: Route) -> LiveMode | None:
        """How this route can show a reply in progress; None: it cannot (the reply is
        sent whole, as without the capability)."""
        raise NotImplementedError

    def live_interval(self, route: Route, mode: LiveMode) -> float:
        """Seconds between two updates of a preview on ``route`` (a platform whose
        edits are counted more strictly in groups answers more here)."""
        return self.live_interval_seconds

    async def start_preview(self, route: Route, mode: LiveMode,
                            payload: OutboundPayload) -> str:
        """Show a new preview with ``payload``'s text; returns its id (the message's
        platform id, or the draft's)."""
        raise NotImplementedError

    async def update_preview(self, route: Route, preview: Preview,
                             payload: OutboundPayload) -> None:
        """Show ``payload``'s text in ``preview`` (which still holds what it showed
        before: mode ``stream`` appends the difference)."""
        raise NotImplementedError

    async def stop_preview(self, route: Route, preview: Preview) -> None:
        """The preview will change no more (its block is finished, or the turn was
        interrupted): end a native stream. Nothing to do by default."""

    async def replace_preview(self, route: Route, payload: OutboundPayload) -> SendResult:
        """Deliver a final payload in the preview message ``payload.replaces`` (edit it
        to the payload's text), as :meth:`Channel.send` does a new message; the
        outbox calls it, under its retries. Raise ``SendError`` on failure."""
        raise NotImplementedError

    async def delete_preview(self, route: Route, preview: Preview) -> None:
        """Remove a preview that is no answer: its turn failed, or it was left by a
        gateway that stopped mid-answer and the turn runs again."""
