"""Slack's Web API for one app, on slack_sdk's ``AsyncWebClient``.

Every call but the replies (below) goes through :meth:`SlackAPI.call`, which turns
slack_sdk's failures into the kit's :class:`~chatkernel.channels.PlatformError`,
classified for the kernel's retry policy:

- an answer with ``"ok": false`` is ``rejected`` (its ``error`` is the code), a
  429 or ``ratelimited`` is ``rate_limited`` with ``Retry-After``, 502/503/504 and
  ``service_unavailable`` are ``unavailable``, and ``internal_error`` /
  ``fatal_error`` (Slack: "some aspect of the operation may have succeeded") are
  ``no_answer``;
- a request that got no answer is ``not_sent`` or ``no_answer`` (kit's
  :func:`~chatkernel.channels.transport_error`).

slack_sdk's own retry handlers are switched off (``retry_handlers=[]``): its
default retries a request once after a lost connection, and a
``chat.postMessage`` whose answer was lost then posts twice. Whether to repeat
a request is the kernel's decision, made from the classification above.

Replies (``chat.postMessage``, a gateway's most frequent call by far) are a JSON POST on
the kit's :class:`~chatkernel.channels.HttpClient` (:meth:`SlackAPI.post`), read and
classified the same way: slack_sdk's client costs more CPU per call than the request
itself (its URL join, its standard-library JSON both ways, its per-call logging and
header building), about a third of an echoed message's CPU in ``bench/slack_echo.py``.

Files go where slack_sdk has no streaming call: downloads of ``url_private``
with the bot token, and step 2 of the upload flow (the bytes POSTed to the
``upload_url`` Slack gave), both on the kit's :class:`~chatkernel.channels.HttpClient`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from chatkernel.channels import HttpClient, PlatformError, decode_json, transport_error

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

DEFAULT_API_BASE = "https://slack.com/api/"
#: Bot, user, app-level and refresh tokens, also inside a URL or a header: redacted in logs.
TOKEN_PATTERNS = (r"\bxox[abeoprs]-[A-Za-z0-9-]{8,}", r"\bxapp-[A-Za-z0-9-]{8,}")

#: Error codes that mean the token itself is refused: no retry or restart fixes them.
TOKEN_ERRORS = frozenset({"invalid_auth", "not_authed", "token_revoked", "token_expired",
                          "account_inactive", "not_allowed_token_type", "invalid_token"})
_RATE_LIMITED = frozenset({"ratelimited", "rate_limited"})
_UNAVAILABLE = frozenset({"service_unavailable"})
#: "The server could not complete your operation(s) without encountering an error ...
#: It's possible some aspect of the operation succeeded": delivery unknown.
_MAYBE_DONE = frozenset({"internal_error", "fatal_error", "request_timeout"})

log = logging.getLogger("chatkernel.slack")
#: slack_sdk's own log lines (connections, reconnections).
sdk_log = logging.getLogger("chatkernel.slack.sdk")


def slack_error(exc: Any, method: str, redact: Callable[[str], str] = str) -> PlatformError:
    """slack_sdk's ``SlackApiError`` as a classified :class:`PlatformError`.

    ``code`` is Slack's ``error``; ``details`` the answer's other fields plus
    ``method``. A ``missing_scope`` names the scope it needs.
    """
    response = exc.response
    # An AsyncSlackResponse, or aiohttp's response when the body was not JSON.
    status = getattr(response, "status_code", None) or getattr(response, "status", None)
    data = getattr(response, "data", None)
    return answer_error(method, status, data, getattr(response, "headers", None) or {},
                        redact)


def answer_error(method: str, status: int | None, data: Any, headers: Any,
                 redact: Callable[[str], str] = str) -> PlatformError:
    """A refused Web API call as a classified :class:`PlatformError`, from its HTTP
    status, its decoded answer (None or anything but an object: not JSON) and its
    headers (see :func:`slack_error`)."""
    data = data if isinstance(data, dict) else {}
    code = data.get("error") or f"http_{status}"
    retry_after = _retry_after(headers)
    description = f"{method}: {code}"
    if code == "missing_scope" and data.get("needed"):
        description += f" (the app needs the {data['needed']} scope; reinstall it after adding it)"
    elif status not in (None, 200):
        description += f" (HTTP {status})"
    kind = None
    if status == 429 or code in _RATE_LIMITED:
        kind = "rate_limited"
    elif code in _UNAVAILABLE or status in (502, 503, 504):
        kind = "unavailable"
    elif code in _MAYBE_DONE or (status is not None and status >= 500):
        kind = "no_answer"
    details = {key: value for key, value in data.items() if key not in ("ok", "error")}
    details["method"] = method
    return PlatformError(redact(description), kind=kind, status=status, code=code,
                         retry_after=retry_after, details=details)


def _retry_after(headers: Any) -> float | None:
    for key in headers:
        if key.lower() == "retry-after":
            try:
                return max(0.0, float(headers[key]))
            except (TypeError, ValueError):
                return None
    return None


class SlackAPI:
    """One app's Web API client: the bot token's calls, downloads, uploads.

    The aiohttp session and the ``AsyncWebClient`` are made on first use (inside
    the running event loop) and shared by every call.
    """

    def __init__(self, bot_token: str, api_base: str = DEFAULT_API_BASE, *,
                 secrets: tuple[str, ...] = (), timeout: float = 30.0) -> None:
        self.api_base = api_base if api_base.endswith("/") else api_base + "/"
        self.timeout = timeout
        self._token = bot_token
        self._secrets = tuple(s for s in (bot_token, *secrets) if s)
        # Downloads of url_private need the bot token; upload URLs take no auth.
        self.files = HttpClient(secrets=self._secrets, platform="Slack", timeout=timeout,
                                headers={"Authorization": f"Bearer {bot_token}"})
        self.uploads = HttpClient(secrets=self._secrets, platform="Slack", timeout=120.0)
        self.posts = HttpClient(self.api_base, secrets=self._secrets, platform="Slack",
                                timeout=timeout,
                                headers={"Authorization": f"Bearer {bot_token}"})
        self._session: aiohttp.ClientSession | None = None
        self._client: AsyncWebClient | None = None

    def redact(self, text: str) -> str:
        return self.files.redact(text)

    def web_client(self, token: str | None = None) -> AsyncWebClient:
        """An ``AsyncWebClient`` at :attr:`api_base` on the shared session, with no
        retry handlers (the kernel decides about repeats). ``token``: another token
        than the bot's (the app-level token of Socket Mode)."""
        from slack_sdk.web.async_client import AsyncWebClient

        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                connector=aiohttp.TCPConnector(limit=100, keepalive_timeout=60))
            self._client = None
        if token is not None:
            return AsyncWebClient(token=token, base_url=self.api_base, session=self._session,
                                  retry_handlers=[], logger=sdk_log)
        if self._client is None:
            self._client = AsyncWebClient(token=self._token, base_url=self.api_base,
                                          session=self._session, retry_handlers=[], logger=sdk_log)
        return self._client

    @property
    def client(self) -> AsyncWebClient:
        return self.web_client()

    async def call(self, method: str, request: Callable[[AsyncWebClient], Awaitable[Any]],
                   ) -> dict[str, Any]:
        """Run one slack_sdk call (``request(client)``) and return the answer's data;
        raises :class:`PlatformError`, classified, with every token redacted."""
        data, _ = await self.answer(method, request)
        return data

    async def answer(self, method: str, request: Callable[[AsyncWebClient], Awaitable[Any]],
                     ) -> tuple[dict[str, Any], Mapping[str, str]]:
        """:meth:`call`'s answer and its HTTP headers (``x-oauth-scopes``, ``Date``)."""
        from slack_sdk.errors import SlackApiError, SlackClientError

        try:
            response = await request(self.client)
        except SlackApiError as exc:
            raise slack_error(exc, method, self.redact) from None
        except (aiohttp.ClientError, asyncio.TimeoutError, TimeoutError) as exc:
            raise transport_error(exc, method, self.timeout, self.redact, "Slack") from None
        except SlackClientError as exc:  # a request slack_sdk refused to make
            raise PlatformError(self.redact(f"{method}: {exc}"), kind="not_sent") from None
        data = response.data
        return (data if isinstance(data, dict) else {"ok": True}), response.headers or {}

    async def post(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """One Web API call with the bot token as a JSON POST on the kit's client (see
        the module docstring); returns the answer's data, raises :class:`PlatformError`
        classified as :meth:`call` does, every token redacted."""
        answer = await self.posts.request("POST", method, json=params, what=method)
        try:
            data = decode_json(answer.body)
        except (ValueError, UnicodeDecodeError):
            data = None
        if answer.status == 200 and isinstance(data, dict) and data.get("ok"):
            return data
        raise answer_error(method, answer.status, data, answer.headers, self.redact)

    def download(self, url: str, *, max_bytes: int) -> AsyncIterator[bytes]:
        """Stream a private file (``url_private_download``) with the bot token."""
        return self.files.download(url, max_bytes=max_bytes)

    async def upload(self, url: str, path: Path) -> None:
        """Step 2 of the upload flow: the file's bytes POSTed to Slack's ``upload_url``.
        Only 200 is success."""
        with path.open("rb") as handle:
            answer = await self.uploads.request("POST", url, data=handle, what="file upload")
        if answer.status != 200:
            raise PlatformError.from_answer(
                answer, f"file upload: HTTP {answer.status} "
                        f"{answer.body[:200].decode('utf-8', 'replace')}")

    async def close(self) -> None:
        if self._session is not None:
            session, self._session, self._client = self._session, None, None
            await session.close()
        await self.files.close()
        await self.uploads.close()
        await self.posts.close()
