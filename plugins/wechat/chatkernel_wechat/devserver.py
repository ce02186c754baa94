"""The fake iLink gateway (API and CDN) as a server: ``python -m chatkernel_wechat.devserver``.

Its routes (``/_fake/messages``, ``/_fake/sent``, ``/_fake/qr``, ``/_fake/redeliver``,
``/_fake/expire``) and the way to log in against it are in docs/channels/wechat.md,
"Developing offline"; the runner in chatkernel.testing.devserver.
"""

from __future__ import annotations

from aiohttp import web

from chatkernel.testing.devserver import DevServer, fields, json_body, wait_until
from chatkernel_wechat.fake import FakeILink

#: The QR states ``/_fake/qr`` can set: those the real gateway answers.
QR_STATES = frozenset({"wait", "scaned", "confirmed", "expired", "need_verifycode",
                       "verify_code_blocked", "scaned_but_redirect", "binded_redirect"})


def developer_routes(ilink: FakeILink) -> list[web.RouteDef]:
    """Write as a user, read what the bot sent, drive the QR login, expire the session."""

    def conflict(reason: str) -> web.Response:
        return web.json_response({"error": reason}, status=409)

    async def inject(request: web.Request) -> web.Response:
        body = fields(await json_body(request), {"user": str, "text": str},
                      required=("user", "text"))
        message = ilink.inject_message(body["user"], body["text"])
        return web.json_response({"message_id": str(message["message_id"])})

    async def sent(request: web.Request) -> web.Response:
        user = request.query.get("user")
        await wait_until(request, ilink, lambda: bool(ilink.sent(user)))
        return web.json_response({"messages": [
            {"to": m.to, "kind": m.kind, "text": m.text, "filename": m.filename}
            for m in ilink.sent(user)]})

    async def qr(request: web.Request) -> web.Response:
        status = fields(await json_body(request), {"status": str}, required=("status",))
        if status["status"] not in QR_STATES:
            return web.json_response({"error": f"status must be one of {sorted(QR_STATES)}"},
                                     status=400)
        if not await wait_until(request, ilink, lambda: ilink.qr_code is not None):
            return conflict("no QR code was fetched yet")
        ilink.set_qr_state(status["status"])
        return web.json_response({"qrcode": ilink.qr_code})

    async def redeliver(request: web.Request) -> web.Response:
        if not ilink.updates:
            return conflict("nothing to redeliver")
        ilink.redeliver(ilink.updates[-1])
        return web.json_response({"ok": True})

    async def expire(request: web.Request) -> web.Response:
        for token in list(ilink.tokens):
            ilink.expire_session(token)
        return web.json_response({"ok": True})

    return [web.post("/_fake/messages", inject), web.get("/_fake/sent", sent),
            web.post("/_fake/qr", qr), web.post("/_fake/redeliver", redeliver),
            web.post("/_fake/expire", expire)]


SNIPPET = """# the fake iLink gateway is up; log in against it:
#   chatkernel login wechat --api-base {i.base_url}
#   curl -d '{{"status": "confirmed"}}' '{i.base_url}/_fake/qr?wait=10'
# or use the bot token {i.token!r} with api_base = "{i.base_url}";
# then set cdn_base = "{i.cdn_base}" and allow_from = ["*"] on the account, and write:
#   curl -d '{{"user": "u1@im.wechat", "text": "hello"}}' {i.base_url}/_fake/messages"""

server = DevServer(
    prog="python -m chatkernel_wechat.devserver", port=8082,
    description="Run the fake iLink gateway (API and CDN) as a server, to try the channel "
                "offline.",
    platform=lambda args: FakeILink(poll_timeout_ms=30_000), routes=developer_routes,
    announce=lambda i, args: {"base_url": i.base_url, "cdn_base": i.cdn_base, "token": i.token},
    snippet=lambda i, args: SNIPPET.format(i=i))
main = server.main

if __name__ == "__main__":
    main()
