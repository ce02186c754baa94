"""Discord's REST API (v10) on the kit's HttpClient: its call shape, its errors, its limits.

Every call goes through :meth:`DiscordAPI.call`, which:

- takes a slot of the route's rate-limit bucket first (the kit's ``RouteBuckets``): the
  buckets Discord names in ``X-RateLimit-Bucket`` per route and major parameter (the
  channel), learnt from each answer's ``-Remaining`` and ``-Reset-After``, and the bot's
  global limit of 50 requests a second; a 429 blocks its bucket, or every call when
  Discord says it was the global limit, for its ``retry_after``;
- reads Discord's errors (``{"message", "code", "errors"?}``) into a ``PlatformError``
  whose ``code`` is Discord's JSON error code;
- keeps to Discord's invalid-request limit (10,000 answers 401, 403 or 429 in ten
  minutes ban the IP): a 401 means the token was reset or is wrong, so from then on no
  call goes out (each fails at once, saying so) until :meth:`DiscordAPI.call` with
  ``recheck=True`` finds it works again (the receive loop's slow retries); and after a
  few 401/403/429 in a row, calls wait a little before going out.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import anyio

from chatkernel.channels import ChannelClock, HttpClient, PlatformError, RouteBuckets

log = logging.getLogger("chatkernel.discord")

DEFAULT_API_BASE = "https://discord.com/api/v10"
#: Discord asks bots to say who they are: ``DiscordBot ($url, $versionNumber)``.
USER_AGENT = "DiscordBot (https://github.com/chatkernel/chatkernel, 0.1.0)"
#: The bot's global limit: 50 requests a second.
GLOBAL_LIMIT = (50, 1.0)
#: A bot token: the bot's id in base64, a timestamp, an HMAC, dot-separated. Redacted
#: from every log line wherever it shows up.
TOKEN_PATTERNS = (r"[A-Za-z0-9_-]{23,28}\.[A-Za-z0-9_-]{6,7}\.[A-Za-z0-9_-]{27,40}",)
#: After this many answers 401, 403 or 429 in a row, calls wait :data:`INVALID_PAUSE`
#: seconds before going out (Discord bans an IP that makes 10,000 in ten minutes).
INVALID_IN_A_ROW = 5
INVALID_PAUSE = 10.0

#: Discord's JSON error codes this channel acts on.
UNKNOWN_CHANNEL = 10003
UNKNOWN_MESSAGE = 10008
UNKNOWN_USER = 10013
MISSING_ACCESS = 50001
CANNOT_DM = 50007
MISSING_PERMISSIONS = 50013
EMPTY_MESSAGE = 50006
INVALID_FORM_BODY = 50035
TOO_LARGE = 40005


class DiscordAPI:
    """One bot's REST calls: ``await api.call("POST", "/channels/{channel_id}/messages",
    channel_id=..., json=...)`` is the answer's JSON (None for 204)."""

    def __init__(self, token: str, api_base: str = DEFAULT_API_BASE, *,
                 clock: ChannelClock | None = None, timeout: float = 30.0) -> None:
        self.http = HttpClient(api_base, secrets=[token], timeout=timeout, platform="Discord",
                               headers={"Authorization": f"Bot {token}",
                                        "User-Agent": USER_AGENT})
        self.clock = clock
        self.buckets = RouteBuckets(clock, global_limit=GLOBAL_LIMIT)
        #: Why the token is refused (a 401 said so), or None. While set, no call goes out.
        self.refused: str | None = None
        self._refused_event = anyio.Event()
        #: Answers 401, 403 or 429 in a row.
        self.invalid_in_a_row = 0
        #: Calls refused here, without a request, because the token was refused.
        self.held_back = 0

    async def wait_refused(self) -> str:
        """Return once a call found the token refused; the reason."""
        await self._refused_event.wait()
        return self.refused or "Discord refused the bot token (401)"

    def redact(self, text: str) -> str:
        return self.http.redact(text)

    async def call(self, method: str, route: str, *, json: Any = None,
                   params: Mapping[str, Any] | None = None,
                   files: Mapping[str, Any] | None = None, data: Any = None,
                   timeout: float | None = None, what: str | None = None,
                   recheck: bool = False, **path: str) -> Any:
        """One REST call: ``route`` is the path with ``{name}`` parameters filled from
        ``path`` (``channel_id``, ``message_id``...); the channel (or guild) in it is the
        bucket's major parameter. Raises :class:`PlatformError` for an error answer."""
        what = what or f"{method} {route}"
        if self.refused is not None and not recheck:
            self.held_back += 1
            raise PlatformError(f"{what}: not sent: {self.refused}", status=401, code=0,
                                kind="rejected")
        if self.invalid_in_a_row >= INVALID_IN_A_ROW and self.clock is not None:
            await self.clock.sleep(INVALID_PAUSE)
        major = path.get("channel_id") or path.get("guild_id") or ""
        url = route.format(**{k: quote(str(v), safe="") for k, v in path.items()})
        slot = await self.buckets.acquire(f"{method} {route}", major)
        try:
            answer = await self.http.request(method, url, json=json, params=params,
                                             files=files, data=data, timeout=timeout,
                                             what=what)
        except PlatformError as exc:
            slot.release(reached=exc.kind != "not_sent")
            raise
        except BaseException:
            slot.release()
            raise
        try:
            body = answer.json() if answer.body else None
        except PlatformError:  # not JSON (a proxy's HTML page): classified by its status
            slot.learn(answer.headers, answer.status)
            raise
        error = body if isinstance(body, dict) else {}
        retry_after = _seconds(error.get("retry_after")) if answer.status == 429 else None
        slot.learn(answer.headers, answer.status, retry_after=retry_after,
                   is_global=bool(error.get("global")))
        if answer.ok:
            self.invalid_in_a_row = 0
            if recheck and self.refused is not None:
                log.info("Discord takes the bot token again")
                self.refused = None
                self._refused_event = anyio.Event()
            return body
        if answer.status in (401, 403, 429) and \
                answer.headers.get("X-RateLimit-Scope") != "shared":
            self.invalid_in_a_row += 1
        message = str(error.get("message") or f"HTTP {answer.status}")
        code = error.get("code")
        failure = PlatformError.from_answer(
            answer, f"{what}: {message}" + (f" ({code})" if code else ""),
            code=code if isinstance(code, int) else None, retry_after=retry_after,
            details={k: v for k, v in error.items() if k not in ("message", "code")})
        if answer.status == 401:
            self._refuse("Discord refused the bot token (401 Unauthorized)")
        raise failure

    def _refuse(self, reason: str) -> None:
        if self.refused is None:
            self.refused = reason
            self._refused_event.set()

    def refuse(self, reason: str) -> None:
        """The token was refused elsewhere (the gateway closed with 4004): no call goes
        out until a recheck works."""
        self._refuse(reason)

    async def close(self) -> None:
        await self.http.close()


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return max(0.0, float(value))
