"""The Graph API's call shape for the WhatsApp Cloud API, on the kernel's HTTP client.

``{api_base}/{api_version}/{node}[/{edge}]`` with ``Authorization: Bearer <token>``,
JSON bodies (multipart for a media upload). Errors come as
``{"error": {"message", "type", "code", "error_subcode", "error_data": {"details"},
"fbtrace_id"}}``, mostly with HTTP 400 whatever they mean, so the code decides what an
error is: :data:`RATE_LIMIT_CODES` are throttling (retried after a pause), 190 is an
expired or revoked token, 131047 the closed 24-hour window.
"""

from __future__ import annotations

import mimetypes
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from chatkernel.channels import HttpClient, PlatformError

DEFAULT_API_BASE = "https://graph.facebook.com"
DEFAULT_API_VERSION = "v23.0"

#: Throttling codes, with how long to wait before trying again (Meta says no
#: Retry-After): 130429 the number's throughput (80 messages/s), 131056 the pair rate
#: (one business number to one user, about one message every 6 s), 80007 the
#: WhatsApp Business Account's call rate, 4 the app's call rate.
RATE_LIMIT_CODES: dict[int, float] = {130429: 1.0, 131056: 6.0, 80007: 60.0, 4: 60.0}
TOKEN_EXPIRED = 190
OUTSIDE_WINDOW = 131047
UNSUPPORTED_MEDIA = 131053
#: Meta's codes about one recipient or one message, not the account (sent or in a
#: later ``failed`` status): 131026 undeliverable (not on WhatsApp, an old app, the
#: business blocked), 131047 the closed 24-hour window, 131049 the per-user marketing
#: limit, 131050 the user stopped marketing messages, 131051 an unsupported message
#: type, 131021 recipient is the sender, 131056 the pair rate, 131053 a file Meta
#: could not take.
RECIPIENT_CODES = frozenset({131026, 131047, 131049, 131050, 131051, 131021, 131056,
                             131053})
#: Meta's transient errors (an unknown error, a service hiccup): worth another try.
TRANSIENT_CODES = frozenset({1, 2, 131000, 131016})

#: Graph access tokens (user, system-user and page tokens start "EAA"): redacted from
#: every log line, wherever they show up.
TOKEN_PATTERN = r"\bEAA[A-Za-z0-9]{20,}"

#: The MIME type Meta takes for a file, by extension (what it accepts: jpeg and png
#: images, mp4 and 3gpp video, ogg/opus, mpeg, amr, mp4 and aac audio, and documents).
#: ``audio/opus`` and ``audio/x-m4a``, which ``mimetypes`` may give, are refused (131053).
MIME_TYPES: dict[str, str] = {
    ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png",
    ".webp": "image/webp",
    ".mp4": "video/mp4", ".3gp": "video/3gpp",
    ".ogg": "audio/ogg; codecs=opus", ".oga": "audio/ogg; codecs=opus",
    ".opus": "audio/ogg; codecs=opus",
    ".mp3": "audio/mpeg", ".amr": "audio/amr", ".m4a": "audio/mp4", ".aac": "audio/aac",
    ".txt": "text/plain", ".pdf": "application/pdf",
    ".doc": "application/msword",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".xls": "application/vnd.ms-excel",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ".ppt": "application/vnd.ms-powerpoint",
    ".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
}
#: MIME types other tools name differently from what Meta accepts.
MIME_ALIASES: dict[str, str] = {
    "audio/opus": "audio/ogg; codecs=opus", "audio/ogg": "audio/ogg; codecs=opus",
    "audio/x-m4a": "audio/mp4", "audio/m4a": "audio/mp4", "audio/mp3": "audio/mpeg",
    "audio/x-aac": "audio/aac", "image/jpg": "image/jpeg", "image/pjpeg": "image/jpeg",
    "video/3gp": "video/3gpp",
}


def media_mime(path: str | Path) -> str:
    """The MIME type to upload ``path`` with, as Meta names it (``.opus`` is
    ``audio/ogg; codecs=opus``, never ``audio/opus``). Extensions Meta does not list
    keep the type their extension gives, normalised the same way."""
    suffix = Path(path).suffix.lower()
    if suffix in MIME_TYPES:
        return MIME_TYPES[suffix]
    guessed = mimetypes.guess_type(str(path))[0] or "application/octet-stream"
    return normalize_mime(guessed)


def normalize_mime(mime: str) -> str:
    """A MIME type as Meta accepts it (``audio/opus`` → ``audio/ogg; codecs=opus``)."""
    base = mime.split(";", 1)[0].strip().lower()
    return MIME_ALIASES.get(base, mime if ";" in mime else base)


class GraphError(PlatformError):
    """A Graph API error answer; :attr:`code` is Meta's ``error.code``."""

    @property
    def subcode(self) -> int | None:
        return self.details.get("error_subcode")

    @property
    def title(self) -> str:
        return str(self.details.get("details") or self.description)


class GraphAPI:
    """One phone number's Graph API client."""

    def __init__(self, token: str, phone_number_id: str, api_base: str = DEFAULT_API_BASE,
                 api_version: str = DEFAULT_API_VERSION, *, timeout: float = 30.0) -> None:
        self.phone_number_id = phone_number_id
        self.base_url = f"{api_base.rstrip('/')}/{api_version}"
        self.http = HttpClient(self.base_url, secrets=[token], timeout=timeout,
                               platform="the Graph API",
                               headers={"Authorization": f"Bearer {token}"})

    async def call(self, method: str, path: str, *, json: Any = None,
                   params: dict[str, Any] | None = None, data: dict[str, Any] | None = None,
                   files: dict[str, Any] | None = None, timeout: float | None = None,
                   what: str | None = None) -> dict[str, Any]:
        """One Graph call; its JSON answer, or :class:`GraphError`."""
        answer = await self.http.request(method, path, json=json, params=params, data=data,
                                         files=files, timeout=timeout, what=what or path)
        try:
            reply = answer.json()
        except ValueError:
            reply = None
        if answer.ok and isinstance(reply, dict):
            return reply
        error = reply.get("error") if isinstance(reply, dict) else None
        if not isinstance(error, dict):
            raise GraphError.from_answer(answer, f"{what or path}: HTTP {answer.status}")
        code = error.get("code")
        message = self.http.redact(str(error.get("message") or "unknown error"))
        details = {key: error[key] for key in ("error_subcode", "type", "fbtrace_id",
                                               "is_transient") if key in error}
        extra = (error.get("error_data") or {}).get("details")
        if extra:
            details["details"] = self.http.redact(str(extra))
            message = f"{message}: {details['details']}"
        description = f"{message} (code {code})"
        if code in RATE_LIMIT_CODES:
            raise GraphError.from_answer(answer, description, code=code, details=details,
                                         rate_limited=True,
                                         retry_after=answer.retry_after
                                         or RATE_LIMIT_CODES[code])
        if code in TRANSIENT_CODES or error.get("is_transient"):
            raise GraphError(description, kind="unavailable", status=answer.status, code=code,
                             details=details)
        raise GraphError.from_answer(answer, description, code=code, details=details)

    # -- messages ---------------------------------------------------------------------

    async def send_message(self, to: str | tuple[str, str], kind: str,
                           content: dict[str, Any], *, reply_to: str | None = None) -> str:
        """Send one message ``to`` a phone number, or to ``("to", phone)`` or
        ``("recipient", BSUID)``; returns its ``wamid``."""
        field, address = ("to", to) if isinstance(to, str) else to
        body: dict[str, Any] = {"messaging_product": "whatsapp", "recipient_type": "individual",
                                field: address, "type": kind, kind: content}
        if reply_to:
            body["context"] = {"message_id": reply_to}
        reply = await self.call("POST", f"{self.phone_number_id}/messages", json=body,
                                what=f"send {kind}")
        messages = reply.get("messages") or [{}]
        return str(messages[0].get("id") or "")

    async def mark_read(self, message_id: str, *, typing: bool = True) -> None:
        """The read receipt for ``message_id`` (which marks the chat's earlier messages
        read too) and, with ``typing``, the typing indicator: one request."""
        body: dict[str, Any] = {"messaging_product": "whatsapp", "status": "read",
                                "message_id": message_id}
        if typing:
            body["typing_indicator"] = {"type": "text"}
        await self.call("POST", f"{self.phone_number_id}/messages", json=body,
                        timeout=10, what="read receipt")

    # -- media --------------------------------------------------------------------------

    async def upload(self, path: Path, mime: str) -> str:
        """Upload a file for sending; returns its media id."""
        reply = await self.call("POST", f"{self.phone_number_id}/media",
                                data={"messaging_product": "whatsapp", "type": mime},
                                files={"file": (path, mime)}, timeout=120, what="media upload")
        return str(reply["id"])

    async def media_info(self, media_id: str) -> dict[str, Any]:
        """``GET /{media-id}``: its short-lived download URL, MIME type and size."""
        return await self.call("GET", media_id, what="media lookup")

    def download(self, url: str, *, max_bytes: int) -> AsyncIterator[bytes]:
        """Stream a media file from its URL (the token goes with it, as Meta requires)."""
        return self.http.download(url, max_bytes=max_bytes)

    # -- the phone number -------------------------------------------------------------------

    async def phone_number(self, *, timeout: float | None = None) -> dict[str, Any]:
        """``GET /{phone-number-id}``: display number, verified name, quality rating."""
        return await self.call("GET", self.phone_number_id, timeout=timeout,
                               params={"fields": "id,display_phone_number,verified_name,"
                                                 "quality_rating"},
                               what="phone number lookup")

    async def close(self) -> None:
        await self.http.close()
