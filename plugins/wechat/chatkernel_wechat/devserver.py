"""Run the fake iLink gateway (API and CDN) as a server, to try the channel offline.

::

    python -m chatkernel_wechat.devserver --port 8082

Besides iLink's own routes it answers developer routes the real gateway does not have:

``POST /_fake/messages``  ``{"user": "u1@im.wechat", "text": "hi"}``: a user writes.
``GET  /_fake/sent``      what the bot sent: ``{"messages": [{"to", "kind", "text"}]}``.
``POST /_fake/qr``        ``{"status": "scaned" | "confirmed" | "expired" | ...}``: drive
                          the newest QR code of a running ``chatkernel login wechat``
                          (409 before a code was fetched, 400 for an unknown state).

Its first line on stdout is JSON: ``{"base_url", "cdn_base", "token"}`` (a bot token it
accepts, for running the gateway without logging in).
``POST /_fake/redeliver`` serve the last message again. ``POST /_fake/expire``: ``-14``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys

import anyio
from aiohttp import web

from chatkernel_wechat.fake import FakeILink

#: The QR states ``/_fake/qr`` can set: those the real gateway answers.
QR_STATES = frozenset({"wait", "scaned", "confirmed", "expired", "need_verifycode",
                       "verify_code_blocked", "scaned_but_redirect", "binded_redirect"})


def developer_routes(ilink: FakeILink) -> list[web.RouteDef]:
    async def body_of(request: web.Request) -> dict:
        try:
            body = await request.json()
        except ValueError:
            raise web.HTTPBadRequest(text="the body must be JSON") from None
        if not isinstance(body, dict):
            raise web.HTTPBadRequest(text="the body must be a JSON object")
        return body

    async def inject(request: web.Request) -> web.Response:
        body = await body_of(request)
        if not isinstance(body.get("user"), str) or not isinstance(body.get("text"), str):
            return web.json_response({"error": 'expected {"user": "...", "text": "..."}'},
                                     status=400)
        message = ilink.inject_message(body["user"], body["text"])
        return web.json_response({"message_id": str(message["message_id"])})

    async def sent(request: web.Request) -> web.Response:
        return web.json_response({"messages": [
            {"to": m.to, "kind": m.kind, "text": m.text, "filename": m.filename}
            for m in ilink.sent(request.query.get("user"))]})

    async def qr(request: web.Request) -> web.Response:
        body = await body_of(request)
        if ilink.qr_code is None:
            return web.json_response({"error": "no QR code was fetched yet"}, status=409)
        if body.get("status") not in QR_STATES:
            return web.json_response({"error": f"status must be one of {sorted(QR_STATES)}"},
                                     status=400)
        ilink.set_qr_state(body["status"])
        return web.json_response({"qrcode": ilink.qr_code})

    async def redeliver(request: web.Request) -> web.Response:
        if not ilink.updates:
            return web.json_response({"error": "nothing to redeliver"}, status=409)
        ilink.redeliver(ilink.updates[-1])
        return web.json_response({"ok": True})

    async def expire(request: web.Request) -> web.Response:
        for token in list(ilink.tokens):
            ilink.expire_session(token)
        return web.json_response({"ok": True})

    return [web.post("/_fake/messages", inject), web.get("/_fake/sent", sent),
            web.post("/_fake/qr", qr), web.post("/_fake/redeliver", redeliver),
            web.post("/_fake/expire", expire)]


async def serve(port: int) -> None:
    async with FakeILink(port=port, poll_timeout_ms=30_000,
                         extra_routes=developer_routes) as ilink:
        print(json.dumps({"base_url": ilink.base_url, "cdn_base": ilink.cdn_base,
                          "token": ilink.token}), flush=True)
        print(f"""# the fake iLink gateway is up; log in against it:
#   chatkernel login wechat --api-base {ilink.base_url}
#   curl -d '{{"status": "confirmed"}}' {ilink.base_url}/_fake/qr
# or use the bot token {ilink.token!r} with api_base = "{ilink.base_url}";
# then set cdn_base = "{ilink.cdn_base}" and allow_from = ["*"] on the account, and write:
#   curl -d '{{"user": "u1@im.wechat", "text": "hello"}}' {ilink.base_url}/_fake/messages""",
              file=sys.stderr, flush=True)
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                return


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m chatkernel_wechat.devserver",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8082, help="0 picks a free port")
    anyio.run(serve, parser.parse_args(argv).port)


if __name__ == "__main__":
    main()
