"""Read receipts: a channel that shows the user their messages were read.

A channel declares the capability by inheriting :class:`ReadReceipts` beside
:class:`~chatkernel.sdk.channel.Channel`, where its typing indicator also marks the
chat's messages read (WhatsApp: one request for the read receipt and typing). The
kernel detects it with ``isinstance`` (chatkernel.core.turns.indicators): a turn that
replied before its indicator was due (``ChannelLimits.indicator_delay``) shows no
typing, which its reply would have ended at once, and its messages are marked read
with :meth:`ReadReceipts.mark_read` when the indicator would have been made; the
session's next quick turns within that time share the one call.
"""

from __future__ import annotations

from chatkernel.sdk.models import Route

__all__ = ["ReadReceipts"]


class ReadReceipts:
    """The capability of marking a chat's messages read apart from the typing indicator
    (mixed into a :class:`~chatkernel.sdk.channel.Channel`, whose ``indicate`` marks them
    read as well)."""

    async def mark_read(self, route: Route) -> None:
        """Mark the chat's messages read, up to its latest, without a typing indicator.
        A failure is logged at debug level and never affects a turn."""
        raise NotImplementedError
