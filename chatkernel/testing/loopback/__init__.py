"""The kit's loopback channel and platform, for end-to-end and crash tests.

They are the sample channel (:mod:`chatkernel.testing.sample`: the plugin template's
polling channel and its fake platform, the same files) plus only what the kernel's
tests need. :class:`LoopbackPlatform` is a real HTTP server on 127.0.0.1 speaking the
sample protocol (documented in :mod:`chatkernel.testing.sample.fake`): updates are
kept until a later poll confirms them with ``offset``, so a client that crashes before
confirming gets them again; sends are recorded in order, with injectable failures (429
with ``retry_after``, 5xx, dropped connections, an answer held back) and deduped by
their idempotency key, as Matrix dedupes by ``txnId``. :class:`LoopbackChannel` is the
sample channel named ``loopback``, with tighter limits and backoff; an account with
``idempotent_sends = true`` declares its sends idempotent. It shows live replies
(chatkernel.sdk.live) by editing a preview message, when the account or the channel sets
``streaming = "on"`` (off by default, so the kit's other tests see whole replies).

``python -m chatkernel.testing.loopback --platform URL [--idempotent-sends]
[--streaming] [--echo-typing-ms N]`` runs the real gateway with the loopback channel
(``CHATKERNEL_HOME`` as usual): the crash tests kill that process.
"""

from chatkernel.testing.loopback.channel import (
    SENDS,
    LoopbackAccount,
    LoopbackChannel,
    LoopbackMessage,
    LoopbackPlatform,
    LoopbackPlugin,
    LoopbackPolling,
)

__all__ = ["SENDS", "LoopbackAccount", "LoopbackChannel", "LoopbackMessage",
           "LoopbackPlatform", "LoopbackPlugin", "LoopbackPolling"]
