"""The heartbeat reply contract: ``HEARTBEAT_OK`` (docs/heartbeats.md, "The reply
contract").

In a heartbeat reply, ``HEARTBEAT_OK`` at the start or at the end is an
acknowledgement: the token is stripped, and if what remains is at most
``ack_max_chars`` characters the reply is dropped (nothing needed attention;
a short "all quiet" remark rides along and goes too). The token in the middle
of a reply means nothing. Outside heartbeats a stray leading or trailing
token is stripped as well, and a reply that is only the token is dropped.

The token counts when it is a word of its own (``HEARTBEAT_OKAY`` is not
it), also wrapped in Markdown emphasis or code (``**HEARTBEAT_OK**``,
```HEARTBEAT_OK```) and, at the end, followed by ``.`` or ``!``. After a
leading token, separators (``:``, ``-``, ``—``, ``,``...) go with it.

Pure functions, no I/O: property-tested in tests/test_heartbeat_ack.py.
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

HEARTBEAT_TOKEN = "HEARTBEAT_OK"

_FORMS = "|".join([r"\*\*HEARTBEAT_OK\*\*", r"__HEARTBEAT_OK__", r"\*HEARTBEAT_OK\*",
                   r"_HEARTBEAT_OK_", r"`HEARTBEAT_OK`", r"HEARTBEAT_OK"])
_LEADING = re.compile(rf"^\s*(?:{_FORMS})(?![A-Za-z0-9_])[\s:;,.!\-–—]*")
_TRAILING = re.compile(rf"(?:^|(?<![A-Za-z0-9_]))(?:{_FORMS})[.!]*\s*$")


def strip_token(text: str) -> tuple[str, bool]:
    """Strip a leading and a trailing token: ``(what remains, stripped), whether one was``.

    A token in the middle is left where it is.
    """
    if HEARTBEAT_TOKEN not in text:  # the common case costs one scan
        return text.strip(), False
    found = False
    match = _LEADING.match(text)
    if match:
        text, found = text[match.end():], True
    match = _TRAILING.search(text)
    if match:
        text, found = text[:match.start()], True
    return text.strip(), found


class HeartbeatReply(NamedTuple):
    """How a heartbeat reply is judged.

    ``kind``: ``ack`` (the token was there and little remains: drop it),
    ``alert`` (something needs attention: ``text`` is what to send, the
    token stripped), ``empty`` (the agent said nothing).
    """

    kind: Literal["ack", "alert", "empty"]
    text: str


def judge_heartbeat_reply(text: str, ack_max_chars: int = 300) -> HeartbeatReply:
    """Apply the reply contract to a heartbeat turn's whole reply."""
    remaining, acknowledged = strip_token(text)
    if acknowledged and len(remaining) <= ack_max_chars:
        return HeartbeatReply("ack", remaining)
    if not remaining:
        return HeartbeatReply("empty", "")
    return HeartbeatReply("alert", remaining)


def strip_stray_token(text: str) -> str | None:
    """Outside heartbeats: the reply without a leading/trailing token; None when the
    reply was only the token (drop it). Text without the token comes back as is."""
    if HEARTBEAT_TOKEN not in text:
        return text
    remaining, found = strip_token(text)
    if not found:
        return text
    return remaining or None
