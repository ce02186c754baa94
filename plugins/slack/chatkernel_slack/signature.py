"""Slack's request signature: how the channel verifies what Slack posts.

``X-Slack-Signature: v0=<hex HMAC-SHA256(signing_secret, "v0:<ts>:<raw body>")>`` with
``X-Slack-Request-Timestamp: <unix seconds>``; a request more than five minutes from now
is refused as a replay (Slack's "Verifying requests from Slack").
"""

from __future__ import annotations

import time
from collections.abc import Callable

from chatkernel.channels import HmacSignature

__all__ = ["SIGNATURE_HEADER", "TIMESTAMP_HEADER", "SlackSignature", "signed_bytes"]

SIGNATURE_HEADER = "X-Slack-Signature"
TIMESTAMP_HEADER = "X-Slack-Request-Timestamp"


def signed_bytes(timestamp: str, body: bytes) -> bytes:
    """What Slack signs: ``v0:<timestamp>:<raw body>``."""
    return b"v0:" + timestamp.encode() + b":" + body


class SlackSignature(HmacSignature):
    """The verifier of an app's signing secret."""

    def __init__(self, signing_secret: str, *, tolerance: float = 300.0,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(signing_secret, header=SIGNATURE_HEADER, prefix="v0=",
                         timestamp_header=TIMESTAMP_HEADER, signed=signed_bytes,
                         tolerance=tolerance, clock=clock)
