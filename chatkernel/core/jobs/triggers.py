"""What an inbound trigger's request goes through before its run is journaled: its
credential, its body's size, the rate of its trigger, the prompt its JSON fills.

A trigger with a ``secret`` takes requests signed as Slack signs its own (the kit's
:class:`~chatkernel.sdk.receiving.webhooks.HmacSignature`): ``X-Chatkernel-Timestamp:
<unix seconds>`` and ``X-Chatkernel-Signature: v1=<hex HMAC-SHA256 of
"v1:<timestamp>:<raw body>">``, refused beyond five minutes from the gateway's clock; the
signature is the request's slot, so the same request sent again is a replay and refused.
A trigger with a ``token`` takes ``Authorization: Bearer <token>`` (compared in constant
time), for a caller that can only send that; nothing tells its replays apart.
"""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from chatkernel.core.config import TriggerConfig
from chatkernel.core.config.jobs import template_fields
from chatkernel.sdk.receiving.webhooks import (
    HmacSignature,
    SecretHeader,
    Verifier,
    WebhookRejected,
)

__all__ = ["SIGNATURE_HEADER", "TIMESTAMP_HEADER", "TOLERANCE_SECONDS", "RateLimits",
           "TriggerRefused", "fill_prompt", "replay_key", "sign", "verifier"]

TIMESTAMP_HEADER = "X-Chatkernel-Timestamp"
SIGNATURE_HEADER = "X-Chatkernel-Signature"
#: How far a request's timestamp may be from the gateway's clock.
TOLERANCE_SECONDS = 300.0


class TriggerRefused(Exception):
    """A trigger request refused: ``status`` is the HTTP answer, the message says why."""

    def __init__(self, status: int, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


def _signed(timestamp: str, body: bytes) -> bytes:
    return b"v1:" + timestamp.encode() + b":" + body


def verifier(settings: TriggerConfig, clock: Callable[[], float] = time.time) -> Verifier:
    """How a trigger's requests prove they are its caller's."""
    if settings.secret:
        return HmacSignature(settings.secret, header=SIGNATURE_HEADER, prefix="v1=",
                             timestamp_header=TIMESTAMP_HEADER, signed=_signed,
                             tolerance=TOLERANCE_SECONDS, clock=clock)
    assert settings.token
    return SecretHeader("Authorization", f"Bearer {settings.token}")


def verify(settings: TriggerConfig, headers: Mapping[str, str], body: bytes,
           clock: Callable[[], float] = time.time) -> None:
    """TriggerRefused (401 or 403) unless the request carries the trigger's credential."""
    try:
        verifier(settings, clock).verify(headers, body)
    except WebhookRejected as exc:
        reason = exc.reason
        if not settings.secret:  # never echo what the header held
            reason = "missing or wrong bearer token (Authorization: Bearer <token>)"
        raise TriggerRefused(exc.status, reason) from None


def sign(secret: str, body: bytes, timestamp: int | str) -> dict[str, str]:
    """The headers a caller sends with ``body`` (``chatkernel triggers test``, tests)."""
    signature = HmacSignature(secret, header=SIGNATURE_HEADER, prefix="v1=",
                              signed=_signed).signature(body, str(timestamp))
    return {TIMESTAMP_HEADER: str(timestamp), SIGNATURE_HEADER: signature,
            "Content-Type": "application/json"}


def replay_key(settings: TriggerConfig, headers: Mapping[str, str]) -> str | None:
    """The run's slot: a signed request's signature (sent again, it is the same slot:
    a replay), None for a bearer token's (each request a run of its own)."""
    if not settings.secret:
        return None
    return "sig:" + headers.get(SIGNATURE_HEADER, "").removeprefix("v1=")


def fill_prompt(template: str, body: bytes) -> str:
    """The prompt with each ``{field}`` replaced by the JSON body's top-level field (a
    string as it is, anything else as JSON). TriggerRefused (400) for a body that is not
    a JSON object, or that lacks fields, naming them."""
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        raise TriggerRefused(400, "the body is not JSON") from None
    if not isinstance(data, dict):
        raise TriggerRefused(400, "the body is not a JSON object")
    fields = template_fields(template)
    missing = [name for name in fields if name not in data]
    if missing:
        raise TriggerRefused(400, "the body lacks the field(s) the prompt needs: "
                                  + ", ".join(missing))
    values: dict[str, Any] = {name: data[name] if isinstance(data[name], str)
                              else json.dumps(data[name], ensure_ascii=False)
                              for name in fields}
    return template.format_map(values)


class RateLimits:
    """Requests per minute per trigger, a sliding minute (429 beyond, with when to try
    again)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._seen: dict[str, collections.deque[float]] = {}

    def take(self, name: str, per_minute: int) -> None:
        now = self._clock()
        seen = self._seen.setdefault(name, collections.deque())
        while seen and seen[0] <= now - 60.0:
            seen.popleft()
        if len(seen) >= per_minute:
            wait = max(1.0, seen[0] + 60.0 - now)
            raise TriggerRefused(429, f"more than {per_minute} requests a minute to this "
                                      "trigger: try again later", retry_after=wait)
        seen.append(now)
