"""A small Telegram Bot API client on aiohttp.

``{api_base}/bot<TOKEN>/<method>`` with JSON bodies (multipart for uploads);
answers ``{"ok": true, "result": ...}`` or ``{"ok": false, "error_code",
"description", "parameters"}``. The token is part of every URL, so no
exception raised here carries a URL or the token: aiohttp's own errors are
replaced by :class:`TelegramError` with a redacted message.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from chatkernel.core.store.codec import decode_json, encode_json_bytes

DEFAULT_API_BASE = "https://api.telegram.org"


class TelegramError(Exception):
    """A Bot API call that failed.

    ``error_code`` is the platform's (0 when no answer came). ``sent`` says
    whether the request may have reached Telegram: False only when the
    connection failed before the request was written.
    """

    def __init__(self, description: str, *, error_code: int = 0,
                 parameters: dict[str, Any] | None = None, sent: bool = True) -> None:
        super().__init__(description)
        self.description = description
        self.error_code = error_code
        self.parameters = parameters or {}
        self.sent = sent

    @property
    def retry_after(self) -> float | None:
        value = self.parameters.get("retry_after")
        return float(value) if value is not None else None

    @property
    def migrate_to_chat_id(self) -> int | None:
        return self.parameters.get("migrate_to_chat_id")


#: Methods that hold their connection for a long time: they get one of their own.
LONG_POLL_METHODS = frozenset({"getUpdates"})

_JSON_HEADERS = {"Content-Type": "application/json"}


@functools.lru_cache(maxsize=16)
def _timeout(total: float) -> aiohttp.ClientTimeout:
    """One ClientTimeout per distinct value (immutable; a call uses one of a few)."""
    return aiohttp.ClientTimeout(total=total)


class BotAPI:
    """One bot's Bot API client.

    Two aiohttp sessions, made on first use: one connection kept for long polls
    (``getUpdates`` holds it for up to its timeout), and a pool of up to 100 for
    everything else. A long poll never waits for a free connection behind a
    burst of sends, and sends never lose a connection to the poll.
    """

    def __init__(self, token: str, api_base: str = DEFAULT_API_BASE, *,
                 timeout: float = 30.0) -> None:
        self._token = token
        self.api_base = api_base.rstrip("/")
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        self._poll_session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        """The session for sends and every other call."""
        self._session = _open(self._session, limit=100)
        return self._session

    @property
    def poll_session(self) -> aiohttp.ClientSession:
        """The session for long polls: a single connection, kept alive."""
        self._poll_session = _open(self._poll_session, limit=1)
        return self._poll_session

    def redact(self, text: str) -> str:
        """The text with the token replaced (for anything that might show a URL)."""
        return text.replace(self._token, "***") if self._token else text

    async def call(self, method: str, params: dict[str, Any] | None = None, *,
                   files: dict[str, Path] | None = None, timeout: float | None = None) -> Any:
        """Call a method; returns ``result`` or raises :class:`TelegramError`."""
        url = f"{self.api_base}/bot{self._token}/{method}"
        data: Any
        if files:
            form = aiohttp.FormData()
            for key, value in (params or {}).items():
                if value is None:
                    continue
                form.add_field(key, value if isinstance(value, str) else json.dumps(value))
            handles = []
            for field, path in files.items():
                handle = open(path, "rb")  # closed below, after the upload
                handles.append(handle)
                form.add_field(field, handle, filename=path.name)
            data = form
            kwargs: dict[str, Any] = {"data": data}
        else:
            handles = []
            # Encoded with the kernel's codec (orjson) rather than aiohttp's ``json=``,
            # which runs json.dumps with a new encoder per call, several times slower.
            kwargs = {"data": encode_json_bytes({k: v for k, v in (params or {}).items()
                                                 if v is not None}, what=method),
                      "headers": _JSON_HEADERS}
        limit = _timeout(timeout or self.timeout)
        try:
            session = self.poll_session if method in LONG_POLL_METHODS else self.session
            async with session.post(url, timeout=limit, **kwargs) as response:
                try:
                    # The Bot API answers JSON whatever the status; read as UTF-8 bytes
                    # (response.json() guesses the charset first).
                    body = decode_json(await response.read())
                except (json.JSONDecodeError, UnicodeDecodeError):
                    raise TelegramError(f"{method}: HTTP {response.status} without a Bot API "
                                        "answer", error_code=response.status) from None
        except aiohttp.ClientConnectorError as exc:
            raise TelegramError(f"{method}: cannot connect to the Bot API "
                                f"({self.redact(str(exc.os_error or exc))})",
                                sent=False) from None
        except (asyncio.TimeoutError, TimeoutError):
            raise TelegramError(f"{method}: no answer within {limit.total:.0f}s") from None
        except aiohttp.ClientError as exc:
            raise TelegramError(f"{method}: connection failed "
                                f"({self.redact(type(exc).__name__)})") from None
        finally:
            for handle in handles:
                handle.close()
        if not isinstance(body, dict):
            raise TelegramError(f"{method}: unexpected answer", error_code=0)
        if body.get("ok"):
            return body.get("result")
        raise TelegramError(self.redact(str(body.get("description") or "unknown error")),
                            error_code=int(body.get("error_code") or 0),
                            parameters=body.get("parameters") or {})

    async def download(self, file_path: str, *, chunk_size: int = 64 * 1024
                       ) -> AsyncIterator[bytes]:
        """Stream a file from ``{api_base}/file/bot<TOKEN>/<file_path>``."""
        url = f"{self.api_base}/file/bot{self._token}/{file_path}"
        try:
            async with self.session.get(url, timeout=aiohttp.ClientTimeout(
                    total=max(self.timeout, 120))) as response:
                if response.status != 200:
                    raise TelegramError(f"download failed: HTTP {response.status}",
                                        error_code=response.status)
                async for chunk in response.content.iter_chunked(chunk_size):
                    yield chunk
        except aiohttp.ClientError as exc:
            raise TelegramError(f"download failed ({type(exc).__name__})") from None

    async def close(self) -> None:
        for session in (self._session, self._poll_session):
            if session is not None:
                await session.close()
        self._session = self._poll_session = None


def _open(session: aiohttp.ClientSession | None, *, limit: int) -> aiohttp.ClientSession:
    """``session`` if it is still open, else a new one with at most ``limit`` connections."""
    if session is None or session.closed:
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=limit, keepalive_timeout=60))
    return session
