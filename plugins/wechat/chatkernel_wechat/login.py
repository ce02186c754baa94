"""``chatkernel login wechat``: the iLink QR login.

Fetch a QR code (``get_bot_qrcode?bot_type=3``), draw its ``qrcode_img_content`` in
the terminal and print the URL, then long-poll ``get_qrcode_status``: ``wait`` →
``scaned`` → ``confirmed`` (the bot token, the bot id, the ``baseurl`` to use and the
owner's user id). ``scaned_but_redirect`` polls the host it names; ``expired``
fetches a new code, at most :data:`MAX_REFRESHES` times; ``need_verifycode`` asks
for the digits WeChat shows.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit

import anyio

from chatkernel.channels import (
    Login,
    LoginFailed,
    LoginRequest,
    LoginResult,
    LoginStep,
    PlatformError,
)
from chatkernel_wechat.api import DEFAULT_API_BASE, ILinkAPI

MAX_REFRESHES = 3
#: Seconds between status polls answered at once (a held poll waits on the server).
POLL_INTERVAL = 1.0


def _qr(text: str):
    import qrcode  # loads only for a login

    qr = qrcode.QRCode(border=1)
    qr.add_data(text)
    return qr


def render_qr(text: str) -> str:
    """The QR code of ``text`` as terminal text."""
    import io

    out = io.StringIO()
    _qr(text).print_ascii(out=out, invert=True)
    return out.getvalue()


def qr_modules(text: str) -> tuple[tuple[bool, ...], ...]:
    """The QR code of ``text`` as its modules (dark ``True``), quiet zone included: what
    a screen draws (the console)."""
    return tuple(tuple(row) for row in _qr(text).get_matrix())


class WeChatLogin(Login):
    name = "wechat"
    description = "scan a QR code with WeChat to bind a personal bot"

    def __init__(self, *, poll_interval: float = POLL_INTERVAL, deadline: float = 600.0,
                 read_code: Any = None) -> None:
        self.poll_interval = poll_interval
        self.deadline = deadline
        self.read_code = read_code or (lambda: input("verification code shown in WeChat: "))

    async def run(self, request: LoginRequest) -> LoginResult:
        base = (request.api_base or request.current.get("api_base")
                or DEFAULT_API_BASE).rstrip("/")
        api = ILinkAPI(None, base)
        try:
            return await self._login(api, base, request)
        finally:
            await api.close()

    async def _qr(self, api: ILinkAPI, request: LoginRequest) -> str:
        reply = await api.call("get_bot_qrcode", {"local_token_list": []},
                               with_base_info=False, path="ilink/bot/get_bot_qrcode?bot_type=3")
        code, image = reply.get("qrcode"), reply.get("qrcode_img_content")
        if not code or not image:
            raise LoginFailed("iLink answered no QR code: try again later")
        if request.progress is not None:  # a screen draws it
            request.step(LoginStep("waiting", "Scan this QR code with WeChat (Me → Scan), "
                                   "then confirm on the phone", qr_text=image,
                                   qr_modules=qr_modules(image)))
            return code
        request.echo("Scan this QR code with WeChat (Me → Scan), then confirm on the phone:")
        request.echo(render_qr(image))
        request.echo(f"or open: {image}")
        return code

    async def _login(self, api: ILinkAPI, base: str, request: LoginRequest) -> LoginResult:
        try:
            code = await self._qr(api, request)
        except PlatformError as exc:
            raise LoginFailed(f"could not fetch a QR code from {base}: {exc}") from None
        status_base, refreshes, verify, said = base, 0, None, None
        started = time.monotonic()
        while time.monotonic() - started < self.deadline:
            began = time.monotonic()
            params = {"qrcode": code}
            if verify:
                params["verify_code"] = verify
            try:
                reply = await api.get(f"{status_base}/ilink/bot/get_qrcode_status", params,
                                      what="get_qrcode_status")
                status = reply.get("status") or "wait"
            except PlatformError as exc:
                if exc.status is not None and exc.status < 500:
                    raise LoginFailed(f"the QR status check failed: {exc}") from None
                status = "wait"  # a timeout or a 5xx: still waiting
            if status != said:
                said = status
                message = {"scaned": "scanned: confirm the login on the phone…",
                           "wait": "waiting for the scan…"}.get(status)
                if message:
                    request.echo(message)
                if status in ("wait", "scaned", "confirmed"):
                    request.step(LoginStep({"wait": "waiting", "scaned": "scanned"}.get(
                        status, status), message or "confirmed on the phone"))
            if status == "confirmed":
                return self._result(reply, status_base)
            if status == "expired":
                refreshes += 1
                if refreshes > MAX_REFRESHES:
                    raise LoginFailed(f"the QR code expired {refreshes} times without a scan: "
                                      "run `chatkernel login wechat` again when ready")
                request.echo(f"the QR code expired: here is a new one ({refreshes}/"
                             f"{MAX_REFRESHES})")
                request.step(LoginStep("expired", f"the QR code expired: a new one comes "
                                                  f"({refreshes}/{MAX_REFRESHES})"))
                code = await self._qr(api, request)
                said = None
                continue
            if status == "scaned_but_redirect":
                host = reply.get("redirect_host")
                if host:
                    # The real gateway redirects to https; a local fake speaks http.
                    scheme = urlsplit(status_base).scheme or "https"
                    status_base = f"{scheme}://{host}"
                continue
            if status == "need_verifycode":
                verify = await anyio.to_thread.run_sync(self.read_code)
                continue
            if status == "verify_code_blocked":
                raise LoginFailed("WeChat blocked the verification code after too many "
                                  "tries: wait a while and log in again")
            if status == "binded_redirect":
                raise LoginFailed("this WeChat account is bound to a bot already: the "
                                  "existing credentials stay (unbind it in WeChat to log in "
                                  "anew)")
            wait = self.poll_interval - (time.monotonic() - began)
            if wait > 0:
                await anyio.sleep(wait)
        raise LoginFailed("no confirmation in time: run `chatkernel login wechat` again")

    @staticmethod
    def _result(reply: dict[str, Any], status_base: str) -> LoginResult:
        token = reply.get("bot_token")
        if not token:
            raise LoginFailed("the login was confirmed but iLink sent no bot token: try again")
        config = {"bot_token": token, "api_base": (reply.get("baseurl") or status_base),
                  "bot_id": reply.get("ilink_bot_id"),
                  "owner_user_id": reply.get("ilink_user_id")}
        return LoginResult(config=config, secret_keys=frozenset({"bot_token"}),
                           detail=f"bot {config['bot_id']}, owner {config['owner_user_id']}")
