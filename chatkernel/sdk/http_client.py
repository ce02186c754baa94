"""The channel kit's HTTP client: one account's connection to its platform's API.

Every HTTP platform needs the same things around its calls, and each is easy to
get subtly wrong, so they are written once here:

- aiohttp sessions made on first use: a pool for sends and calls, and a single
  kept-alive connection of its own for long polls, so a poll never waits behind
  a burst of sends and sends never lose a connection to the poll;
- timeouts per call;
- the account's secrets (a token in the URL, a bearer header) redacted from every
  error this module raises, so nothing built from one can leak them;
- failures classified for the retry policy (:class:`PlatformError`, a
  :class:`~chatkernel.SendError`): refused before the request was written (safe
  to repeat), no answer after it may have arrived (never repeated blindly: a
  duplicate is a bug like a loss), rate limited (``Retry-After``), the platform
  unavailable (502/503/504, whatever the body: a load balancer's HTML page, an
  empty one, the platform's JSON), rejected. Whatever transport failure escapes a
  channel's ``send`` is classified the same way (:func:`as_send_error`), so no
  plugin can turn an outage into failed replies by catching too little;
- multipart uploads from files, and streamed downloads with a size cap.

The plugin keeps only its platform's call shape: which URL, which body, how its
answers say "ok" and which error codes mean what.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import socket
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import aiohttp

from chatkernel.sdk.models import ErrorKind, SendError, error_kind
from chatkernel.sdk.codec import decode_json, encode_json, encode_json_bytes

__all__ = ["Answer", "HttpClient", "PlatformError", "as_send_error", "classified",
           "parse_retry_after", "transport_error"]

T = TypeVar("T")

_JSON = {"Content-Type": "application/json"}
#: The kinds of failure after which the request may be made again.
_REPEATABLE = frozenset({"not_sent", "rate_limited", "unavailable"})


class PlatformError(SendError):
    """A platform call that failed, classified.

    It is a :class:`~chatkernel.SendError` whose flags follow from :attr:`kind`, so
    one that escapes a channel's ``send`` is retried, waited out or reported as the
    failure it is (:meth:`send_error` gives a plain one with flags added).

    :attr:`kind` says what the failure means:

    - ``not_sent``: the request was never written (connection refused, no route,
      DNS): the platform cannot have seen it;
    - ``no_answer``: it may have reached the platform (a timeout, a connection
      dropped after the request was written): repeating it could send twice;
    - ``rate_limited``: HTTP 429 (or the platform's own way of saying it), with
      :attr:`retry_after` when the platform said how long;
    - ``unavailable``: 502, 503 or 504: the platform did not act on it;
    - ``rejected``: any other answer: the platform refused the request.

    ``status`` is the HTTP status (None without an answer), ``code`` the
    platform's own error code, ``details`` whatever else the answer said
    (Telegram's ``parameters``, Graph's ``error_data``). The message never holds
    a secret of the account: the client redacts them.
    """

    def __init__(self, description: str, *, kind: ErrorKind | None = None,
                 status: int | None = None, code: str | int | None = None,
                 retry_after: float | None = None,
                 details: Mapping[str, Any] | None = None) -> None:
        kind = kind or error_kind(status)
        super().__init__(description, retryable=kind in _REPEATABLE,
                         delivery_unknown=kind == "no_answer", retry_after=retry_after,
                         status=status, code=code)
        self.description = description
        self.details: Mapping[str, Any] = details or {}
        self.kind: ErrorKind = kind

    @property
    def not_sent(self) -> bool:
        """Whether the request is known not to have reached the platform (what the
        outbox waits out as an outage rather than counting it an attempt)."""
        return self.kind == "not_sent"

    @classmethod
    def from_answer(cls, answer: "Answer", description: str, *, code: str | int | None = None,
                    retry_after: float | None = None,
                    details: Mapping[str, Any] | None = None,
                    rate_limited: bool = False) -> "PlatformError":
        """The error for an answer the platform gave: classified by its status;
        ``retry_after`` defaults to the answer's ``Retry-After`` header.
        ``rate_limited``: the platform signals throttling in its body, not with 429."""
        return cls(description, status=answer.status, code=code,
                   retry_after=retry_after if retry_after is not None else answer.retry_after,
                   details=details, kind="rate_limited" if rate_limited else None)

    @property
    def repeatable(self) -> bool:
        """Whether repeating the request cannot deliver twice."""
        return self.kind in _REPEATABLE

    def send_error(self, **flags: Any) -> SendError:
        """This failure as the :class:`chatkernel.SendError` a channel's ``send`` raises.

        ``flags`` add what only the platform can tell (``markup_rejected``,
        ``moved_to``) and override the classification where it must.
        """
        values: dict[str, Any] = {
            "retryable": self.repeatable,
            "delivery_unknown": self.kind == "no_answer",
            "retry_after": self.retry_after,
            "status": self.status,
            "code": self.code,
        }
        values.update(flags)
        return SendError(self.description, **values)


@dataclass(slots=True)
class Answer:
    """What the platform answered: the status, the headers and the raw body."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    #: Names the call in errors ("sendMessage", "chat.postMessage").
    what: str = "the call"

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def retry_after(self) -> float | None:
        """Seconds from a ``Retry-After`` header (a number or an HTTP date), if any."""
        return parse_retry_after(self.headers.get("Retry-After"))

    def json(self) -> Any:
        """The body as JSON; a body that is not JSON is a :class:`PlatformError`."""
        try:
            return decode_json(self.body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise PlatformError.from_answer(
                self, f"{self.what}: HTTP {self.status} without a readable answer") from None


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds: delta-seconds or an HTTP date; None if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        import time

        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


@functools.lru_cache(maxsize=32)
def _timeout(total: float) -> aiohttp.ClientTimeout:
    """One ClientTimeout per distinct value (immutable; a client uses a few)."""
    return aiohttp.ClientTimeout(total=total)


class HttpClient:
    """One account's HTTP connection to its platform.

    ``base_url`` is what relative paths are joined to (``base + "/" + path``, so a
    base with a path prefix works; an absolute URL is used as it is).
    ``secrets`` are redacted from every error (a token in the URL, a bearer
    token); ``headers`` go with every request (``Authorization``...);
    ``timeout`` is the default per call, in seconds; ``platform`` names it in
    errors ("cannot connect to the Bot API").
    """

    #: The longest any call but a long poll waits for its answer, whatever its own
    #: timeout (None: no cap): a test kit's setting, so a hung platform's calls end
    #: within a test as they would after their real timeout.
    longest_call: ClassVar[float | None] = None

    def __init__(self, base_url: str = "", *, secrets: Iterable[str] = (),
                 headers: Mapping[str, str] | None = None, timeout: float = 30.0,
                 connections: int = 100, platform: str = "the platform") -> None:
        self.base_url = base_url.rstrip("/")
        self.platform = platform
        self.headers = dict(headers or {})
        self.timeout = timeout
        self.connections = connections
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._session: aiohttp.ClientSession | None = None
        self._poll_session: aiohttp.ClientSession | None = None
        self._last_headers: Mapping[str, str] = {}

    # -- sessions -------------------------------------------------------------------------

    @property
    def session(self) -> aiohttp.ClientSession:
        """The pooled session for sends and every call but long polls."""
        self._session = _open(self._session, limit=self.connections, headers=self.headers)
        return self._session

    @property
    def poll_session(self) -> aiohttp.ClientSession:
        """The long polls' session: one connection, kept alive."""
        self._poll_session = _open(self._poll_session, limit=1, headers=self.headers)
        return self._poll_session

    async def close(self) -> None:
        """Close both sessions (they are made again on the next call)."""
        for session in (self._session, self._poll_session):
            if session is not None:
                await session.close()
        self._session = self._poll_session = None

    def server_date(self) -> str | None:
        """The ``Date`` header of the platform's last answer (its clock, to the second),
        for a probe to report as ``extra["server_date"]`` (``chatkernel doctor``)."""
        return self._last_headers.get("Date")

    # -- redaction ------------------------------------------------------------------------

    def add_secret(self, secret: str) -> None:
        """Redact one more value (a token learnt at run time)."""
        if secret and secret not in self._secrets:
            self._secrets = sorted([*self._secrets, secret], key=len, reverse=True)

    def redact(self, text: str) -> str:
        """``text`` with every secret of the account replaced by ``***``."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "***")
        return text

    # -- calls ----------------------------------------------------------------------------

    def url(self, path: str) -> str:
        if "://" in path:
            return path
        return f"{self.base_url}/{path.lstrip('/')}" if self.base_url else path

    async def request(self, method: str, path: str, *, json: Any = None, data: Any = None,
                      params: Mapping[str, Any] | None = None,
                      files: Mapping[str, Path | tuple[Path, str]] | None = None,
                      headers: Mapping[str, str] | None = None,
                      timeout: float | None = None, long_poll: bool = False,
                      what: str | None = None) -> Answer:
        """Make one request and return the platform's :class:`Answer`, whatever its status.

        ``json``: a JSON body (encoded by the kernel's codec). ``files``: a
        multipart upload, field name → file path (or ``(path, content type)``: the
        part's ``Content-Type``, which is otherwise guessed from the file's name),
        with ``data`` as the other form fields (a non-string value is sent as JSON). ``long_poll``: use the poll
        connection. ``what`` names the call in errors (default: the path).
        Raises :class:`PlatformError` (``not_sent`` or ``no_answer``) when no
        answer came.
        """
        what = what or path.rsplit("/", 1)[-1]
        handles: list[Any] = []
        kwargs: dict[str, Any] = {}
        if files:
            form = aiohttp.FormData()
            for key, value in (data or {}).items():
                if value is not None:
                    form.add_field(key, value if isinstance(value, str) else encode_json(value))
            for field, file in files.items():
                file_path, content_type = file if isinstance(file, tuple) else (file, None)
                handle = open(file_path, "rb")  # closed below, after the upload
                handles.append(handle)
                form.add_field(field, handle, filename=Path(file_path).name,
                               content_type=content_type)
            kwargs["data"] = form
        elif json is not None:
            # The kernel's codec (orjson) rather than aiohttp's ``json=``, which runs
            # json.dumps with a new encoder per call, several times slower.
            kwargs["data"] = encode_json_bytes(json, what=what)
            kwargs["headers"] = {**_JSON, **headers} if headers else _JSON
        elif data is not None:
            kwargs["data"] = data
        if headers and "headers" not in kwargs:
            kwargs["headers"] = headers
        if params:
            kwargs["params"] = {k: v if isinstance(v, str) else encode_json(v)
                                for k, v in params.items() if v is not None}
        total = timeout or self.timeout
        if self.longest_call is not None and not long_poll:
            total = min(total, self.longest_call)
        limit = _timeout(total)
        session = self.poll_session if long_poll else self.session
        try:
            async with session.request(method, self.url(path), timeout=limit,
                                       **kwargs) as response:
                body = await response.read()
                self._last_headers = response.headers
                return Answer(response.status, response.headers, body, what)
        except (aiohttp.ClientError, asyncio.TimeoutError, TimeoutError) as exc:
            raise transport_error(exc, what, limit.total, self.redact, self.platform) from None
        finally:
            for handle in handles:
                handle.close()

    async def download(self, path: str, *, max_bytes: int, chunk_size: int = 64 * 1024,
                       headers: Mapping[str, str] | None = None,
                       timeout: float | None = None) -> AsyncIterator[bytes]:
        """Stream a file, refusing one larger than ``max_bytes`` (before or while reading).

        Raises :class:`PlatformError`: ``rejected`` for a non-200 answer or a
        file over the cap, ``no_answer`` / ``not_sent`` for a broken connection.
        """
        what = "download"
        limit = _timeout(timeout or max(self.timeout, 120.0))
        try:
            async with self.session.get(self.url(path), timeout=limit,
                                        headers=headers) as response:
                if response.status != 200:
                    raise PlatformError(f"download failed: HTTP {response.status}",
                                        status=response.status)
                if response.content_length is not None and response.content_length > max_bytes:
                    raise _too_large(max_bytes)
                received = 0
                async for chunk in response.content.iter_chunked(chunk_size):
                    received += len(chunk)
                    if received > max_bytes:
                        raise _too_large(max_bytes)
                    yield chunk
        except (aiohttp.ClientError, asyncio.TimeoutError, TimeoutError) as exc:
            raise transport_error(exc, what, limit.total, self.redact, self.platform) from None


def transport_error(exc: BaseException, what: str, timeout: float | None = None,
                    redact: Any = None, platform: str = "the platform") -> PlatformError:
    """The :class:`PlatformError` for a failure that left no answer (aiohttp's, or the
    socket's own ``OSError``).

    A connection that could not be opened (refused, no route, DNS, a connect that
    timed out) is ``not_sent``; a timeout or a connection lost (reset, closed) after
    the request was written is ``no_answer``: it may have reached the platform. An
    aiohttp ``ClientResponseError`` (an SDK's ``raise_for_status``) is classified by
    its status. For clients that are not an :class:`HttpClient` (an SDK on aiohttp)
    as well.
    """
    def scrub(text: str) -> str:
        return redact(text) if redact is not None else text

    if isinstance(exc, aiohttp.ClientResponseError):
        return PlatformError(scrub(f"{what}: HTTP {exc.status} {exc.message}".rstrip()),
                             status=exc.status)
    if isinstance(exc, aiohttp.ClientConnectorError):
        reason = scrub(str(exc.os_error or exc))
        return PlatformError(f"{what}: cannot connect to {platform} ({reason})",
                             kind="not_sent")
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        within = f" within {timeout:g}s" if timeout else ""
        return PlatformError(f"{what}: cannot connect to {platform} (no connection{within})",
                             kind="not_sent")
    if isinstance(exc, (ConnectionRefusedError, socket.gaierror)) or (
            type(exc) is OSError and exc.errno in _UNREACHABLE):
        return PlatformError(f"{what}: cannot connect to {platform} ({scrub(str(exc))})",
                             kind="not_sent")
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        within = f" within {timeout:g}s" if timeout else ""
        return PlatformError(f"{what}: no answer{within}", kind="no_answer")
    return PlatformError(f"{what}: connection failed ({type(exc).__name__})", kind="no_answer")


#: ``OSError`` numbers of a connection that could not be opened at all.
_UNREACHABLE = frozenset({errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH,
                          errno.EADDRNOTAVAIL})


def as_send_error(exc: BaseException, what: str = "send",
                  platform: str = "the platform") -> SendError | None:
    """What a failure that escaped a channel's ``send`` means to the retry policy.

    A :class:`~chatkernel.SendError` (a :class:`PlatformError` too) is itself; a
    transport failure the channel let through (aiohttp's, a socket's ``OSError``, a
    timeout) is classified by :func:`transport_error`; anything else (a bug, a
    ``ValueError``) is None: the payload fails with it as it is.
    """
    if isinstance(exc, SendError):
        return exc
    if isinstance(exc, (aiohttp.ClientError, asyncio.TimeoutError, TimeoutError, OSError)):
        return transport_error(exc, what, platform=platform)
    return None


async def classified(sending: Awaitable[T], what: str = "send",
                     platform: str = "the platform") -> T:
    """Await a channel's ``send`` (``sending``) with whatever transport failure escapes
    it raised as the classified :class:`~chatkernel.SendError` it is
    (:func:`as_send_error`): what the kit's ``outbound_send`` hands the outbox."""
    try:
        return await sending
    except Exception as exc:
        error = as_send_error(exc, what, platform)
        if error is None or error is exc:
            raise
        raise error from exc


def _too_large(max_bytes: int) -> PlatformError:
    return PlatformError(f"download refused: larger than {max_bytes / 1024 / 1024:g} MB",
                         kind="rejected", status=413)


def _open(session: aiohttp.ClientSession | None, *, limit: int,
          headers: Mapping[str, str]) -> aiohttp.ClientSession:
    """``session`` if it is still open, else a new one with at most ``limit`` connections."""
    if session is None or session.closed:
        session = aiohttp.ClientSession(
            headers=headers or None,
            connector=aiohttp.TCPConnector(limit=limit, keepalive_timeout=60))
    return session
