"""The iLink bot API's call shape, on the kernel's HTTP client.

Every call is ``POST {base}/ilink/bot/<endpoint>`` with a JSON body that carries
``base_info``, and these headers: ``Content-Type: application/json``,
``AuthorizationType: ilink_bot_token``, ``Authorization: Bearer <bot_token>``
(absent before login), ``X-WECHAT-UIN`` (base64 of the decimal string of a random
uint32, new for every request), ``iLink-App-Id: bot`` and
``iLink-App-ClientVersion`` (the protocol version as ``0x00MMNNPP``). Answers are
``{"ret": 0, ...}`` (``{}`` is success too); a non-zero ``ret`` or ``errcode`` is an
:class:`ILinkError`. The login's QR-status call is a GET with only the two
``iLink-App-*`` headers.
"""

from __future__ import annotations

import base64
import secrets as random_source
from typing import Any

from chatkernel.channels import HttpClient, PlatformError

DEFAULT_API_BASE = "https://ilinkai.weixin.qq.com"
DEFAULT_CDN_BASE = "https://novac2c.cdn.weixin.qq.com/c2c"
#: The protocol version this client speaks (that of Tencent's client it follows).
PROTOCOL_VERSION = "2.4.9"
BOT_AGENT = "chatkernel-wechat/0.1.0"
#: Seconds each call may take (the long poll's comes from the server).
TIMEOUTS = {"getupdates": 35.0, "sendmessage": 15.0, "getuploadurl": 15.0,
            "getconfig": 10.0, "sendtyping": 10.0, "msg/notifystart": 10.0,
            "msg/notifystop": 10.0}
#: iLink's answer codes that mean something to the channel.
SESSION_EXPIRED = -14
SEND_REFUSED = -2
#: A bot token: ``<hex>@im.bot:<secret>`` and similar; redacted from every log line.
TOKEN_PATTERN = r"\b[0-9a-f]{8,}@im\.bot:[A-Za-z0-9_\-+/=]{8,}"


def client_version(version: str = PROTOCOL_VERSION) -> str:
    """``iLink-App-ClientVersion``: ``M.N.P`` as the uint32 ``0x00MMNNPP`` (2.4.9 → 132105)."""
    major, minor, patch = (int(part) for part in version.split(".")[:3])
    return str((major & 0xFF) << 16 | (minor & 0xFF) << 8 | (patch & 0xFF))


def wechat_uin() -> str:
    """``X-WECHAT-UIN``: base64 of the decimal string of a random uint32, per request."""
    return base64.b64encode(str(random_source.randbits(32)).encode()).decode()


def base_info() -> dict[str, str]:
    return {"channel_version": PROTOCOL_VERSION, "bot_agent": BOT_AGENT}


def app_headers() -> dict[str, str]:
    return {"iLink-App-Id": "bot", "iLink-App-ClientVersion": client_version()}


class ILinkError(PlatformError):
    """iLink answered with a non-zero ``ret`` / ``errcode`` (``code``: that number)."""

    @property
    def session_expired(self) -> bool:
        return self.code == SESSION_EXPIRED


class ILinkAPI:
    """One bot's iLink client (``token`` None before login)."""

    def __init__(self, token: str | None, api_base: str = DEFAULT_API_BASE,
                 *, route_tag: str | None = None) -> None:
        self.token = token
        self.api_base = api_base.rstrip("/")
        self.route_tag = route_tag
        self.http = HttpClient(self.api_base, secrets=[token] if token else [],
                               platform="iLink", timeout=35.0)

    def headers(self) -> dict[str, str]:
        """The headers of one POST (a new ``X-WECHAT-UIN`` every time)."""
        headers = {"AuthorizationType": "ilink_bot_token", "X-WECHAT-UIN": wechat_uin(),
                   **app_headers()}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if self.route_tag:
            headers["SKRouteTag"] = self.route_tag
        return headers

    async def call(self, endpoint: str, body: dict[str, Any] | None = None, *,
                   timeout: float | None = None, long_poll: bool = False,
                   with_base_info: bool = True, path: str | None = None) -> dict[str, Any]:
        """POST ``ilink/bot/<endpoint>``; the answer, or :class:`ILinkError` /
        :class:`PlatformError`."""
        payload = dict(body or {})
        if with_base_info:
            payload["base_info"] = base_info()
        answer = await self.http.request(
            "POST", path or f"ilink/bot/{endpoint}", json=payload, headers=self.headers(),
            timeout=timeout or TIMEOUTS.get(endpoint, 15.0), long_poll=long_poll,
            what=endpoint)
        return self._reply(answer, endpoint)

    async def get(self, path: str, params: dict[str, str], *, timeout: float = 35.0,
                  what: str) -> dict[str, Any]:
        """A GET with only the ``iLink-App-*`` headers (the QR status)."""
        answer = await self.http.request("GET", path, params=params, headers=app_headers(),
                                         timeout=timeout, what=what)
        return self._reply(answer, what)

    def _reply(self, answer: Any, what: str) -> dict[str, Any]:
        if not answer.ok:
            raise PlatformError.from_answer(answer, f"{what}: HTTP {answer.status}")
        reply = answer.json() if answer.body else {}
        if not isinstance(reply, dict):
            raise PlatformError.from_answer(answer, f"{what}: unexpected answer")
        ret = reply.get("ret") or 0
        errcode = reply.get("errcode") or 0
        if ret or errcode:
            code = SESSION_EXPIRED if SESSION_EXPIRED in (ret, errcode) else (ret or errcode)
            message = self.http.redact(str(reply.get("errmsg") or ""))
            raise ILinkError(f"{what}: ret={code}" + (f" ({message})" if message else ""),
                             status=answer.status, code=code, kind="rejected",
                             details=reply)
        return reply

    async def close(self) -> None:
        await self.http.close()
