"""The Bot API's call shape, on the kernel's HTTP client.

``{api_base}/bot<TOKEN>/<method>`` with JSON bodies (multipart for uploads);
answers ``{"ok": true, "result": ...}`` or ``{"ok": false, "error_code",
"description", "parameters"}``. The token is part of every URL: the client
redacts it from every error, and :data:`TOKEN_PATTERN` from every log line.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from chatkernel.channels import HttpClient, PlatformError

DEFAULT_API_BASE = "https://api.telegram.org"
#: A bot token, also inside a URL ("bot123456:AA..."): redacted in every log line.
TOKEN_PATTERN = r"\b(bot)?\d{5,}:[A-Za-z0-9_-]{20,}"
#: Methods that hold their connection for a long time: they get one of their own.
LONG_POLL_METHODS = frozenset({"getUpdates"})


class BotAPI:
    """One bot's Bot API client."""

    def __init__(self, token: str, api_base: str = DEFAULT_API_BASE, *,
                 timeout: float = 30.0) -> None:
        self.api_base = api_base.rstrip("/")
        self.http = HttpClient(f"{self.api_base}/bot{token}", secrets=[token], timeout=timeout,
                                platform="the Bot API")
        self._files = f"{self.api_base}/file/bot{token}"

    async def call(self, method: str, params: dict[str, Any] | None = None, *,
                   files: dict[str, Path] | None = None, timeout: float | None = None) -> Any:
        """Call a method; returns its ``result`` or raises :class:`PlatformError`
        (``code`` is Telegram's ``error_code``, ``details`` its ``parameters``)."""
        body = {key: value for key, value in (params or {}).items() if value is not None}
        if files:
            answer = await self.http.request("POST", method, data=body, files=files,
                                             timeout=timeout, what=method)
        else:
            answer = await self.http.request("POST", method, json=body, timeout=timeout,
                                             long_poll=method in LONG_POLL_METHODS, what=method)
        # The Bot API answers JSON whatever the status.
        reply = answer.json()
        if not isinstance(reply, dict):
            raise PlatformError.from_answer(answer, f"{method}: unexpected answer")
        if reply.get("ok"):
            return reply.get("result")
        parameters = reply.get("parameters") or {}
        code = int(reply.get("error_code") or answer.status)
        raise PlatformError(self.http.redact(str(reply.get("description") or "unknown error")),
                            status=code, code=code, details=parameters,
                            retry_after=parameters.get("retry_after", answer.retry_after))

    def download(self, file_path: str, *, max_bytes: int) -> AsyncIterator[bytes]:
        """Stream a file from ``{api_base}/file/bot<TOKEN>/<file_path>``."""
        return self.http.download(f"{self._files}/{file_path}", max_bytes=max_bytes)

    async def close(self) -> None:
        await self.http.close()
