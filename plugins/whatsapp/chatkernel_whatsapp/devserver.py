"""Run the fake Graph API as a server, to develop and try a WhatsApp bot offline.

::

    python -m chatkernel_whatsapp.devserver --port 8082

serves :class:`chatkernel_whatsapp.fake.FakeGraph` on 127.0.0.1 (the Graph API at
``http://127.0.0.1:8082/v23.0/...``), prints one JSON line with its ``base_url``,
``token``, ``phone_number_id``, ``app_secret`` and ``verify_token``, and a config snippet
for ``chatkernel run``. Besides the Graph API it answers developer routes, which Meta does
not have:

``POST /_fake/subscribe``  ``{"url": "http://127.0.0.1:8787/whatsapp/main/webhook"}``:
                           Meta's GET verification of the callback URL, then
                           notifications go there; answers ``{"passed": true}``.
``POST /_fake/messages``   ``{"from": "15551234567", "text": "hi"}``, or
                           ``{"messages": [{"from", "text"}, ...]}`` for several in one
                           notification: users write to the business; answers the ids.
``POST /_fake/fail``       ``{"to": "15551234567"}``: messages to that user are accepted,
                           then reported ``failed`` (optional ``code``, ``title``).
``POST /_fake/close-window`` ``{"to": ...}``: the user last wrote more than 24 hours ago.
``GET /_fake/sent``        ``?to=15551234567`` (optional): what the business sent, in
                           order: ``{"messages": [{"to", "type", "text", "when"}]}``.

As the real Graph API, it answers a text to a user who has not written in the last 24
hours (one who never wrote, too) with ``400``, error ``131047`` "Re-engagement message";
``/_fake/fail`` rehearses a number that is not on WhatsApp (``131026`` "Message
undeliverable" in a ``failed`` status, after the send was accepted).

It runs until interrupted (Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any

import anyio
from aiohttp import web

from chatkernel_whatsapp.fake import DEFAULT_TOKEN, FakeGraph


def _error(text: str, status: int = 400) -> web.Response:
    return web.json_response({"error": text}, status=status)


async def _body(request: web.Request) -> dict[str, Any] | None:
    try:
        body = await request.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def developer_routes(graph: FakeGraph) -> list[web.RouteDef]:
    """The ``/_fake/*`` routes: subscribe a webhook, write as users, read what was sent."""

    async def subscribe(request: web.Request) -> web.Response:
        body = await _body(request)
        if body is None or not isinstance(body.get("url"), str):
            return _error('expected {"url": "<the webhook\'s URL>"}')
        return web.json_response({"passed": await graph.subscribe(body["url"])})

    async def messages(request: web.Request) -> web.Response:
        body = await _body(request)
        items = body.get("messages", [body]) if body is not None else None
        if not isinstance(items, list) or not items or not all(
                isinstance(m, dict) and isinstance(m.get("from"), str)
                and isinstance(m.get("text", ""), str) for m in items):
            return _error('expected {"from": "<wa_id>", "text": "..."} or '
                          '{"messages": [...]}')
        made = [graph.message(m["from"], m.get("text", "")) for m in items]
        graph.inject_messages(made)
        return web.json_response({"ids": [m["id"] for m in made]})

    async def fail(request: web.Request) -> web.Response:
        body = await _body(request)
        if body is None or not isinstance(body.get("to"), str):
            return _error('expected {"to": "<wa_id>"}')
        graph.fail_delivery(body["to"], code=int(body.get("code", 131026)),
                            title=str(body.get("title", "Message undeliverable")))
        return web.json_response({"ok": True})

    async def close_window(request: web.Request) -> web.Response:
        body = await _body(request)
        if body is None or not isinstance(body.get("to"), str):
            return _error('expected {"to": "<wa_id>"}')
        graph.close_window(body["to"])
        return web.json_response({"ok": True})

    async def sent(request: web.Request) -> web.Response:
        return web.json_response({"messages": [
            {"to": m.to, "type": m.type, "text": m.text, "when": m.when, "id": m.wamid}
            for m in graph.sent(request.query.get("to"))]})

    return [web.post("/_fake/subscribe", subscribe), web.post("/_fake/messages", messages),
            web.post("/_fake/fail", fail), web.post("/_fake/close-window", close_window),
            web.get("/_fake/sent", sent)]


async def serve(args: argparse.Namespace) -> None:
    async with FakeGraph(token=args.token, app_secret=args.app_secret,
                         verify_token=args.verify_token, port=args.port,
                         webhook_workers=args.workers, extra_routes=developer_routes) as graph:
        graph.latency = args.latency
        graph.statuses = not args.no_statuses
        print(json.dumps({"base_url": graph.base_url, "token": graph.token,
                          "phone_number_id": graph.phone_number_id,
                          "app_secret": graph.app_secret,
                          "verify_token": graph.verify_token}), flush=True)
        print(f"""# the fake Graph API is up; point an account at it:
#   export WHATSAPP_TOKEN={graph.token}
#   export WHATSAPP_APP_SECRET={graph.app_secret}
#   export WHATSAPP_VERIFY_TOKEN={graph.verify_token}
[channels.whatsapp.accounts.main]
access_token = "${{WHATSAPP_TOKEN}}"
phone_number_id = "{graph.phone_number_id}"
app_secret = "${{WHATSAPP_APP_SECRET}}"
verify_token = "${{WHATSAPP_VERIFY_TOKEN}}"
api_base = "{graph.base_url}"
allow_from = ["*"]
# start chatkernel run, then subscribe its webhook and write as a user:
#   curl -d '{{"url": "http://127.0.0.1:8787/whatsapp/main/webhook"}}' {graph.base_url}/_fake/subscribe
#   curl -d '{{"from": "15551234567", "text": "hello"}}' {graph.base_url}/_fake/messages
#   curl {graph.base_url}/_fake/sent?to=15551234567""", file=sys.stderr, flush=True)
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                return


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m chatkernel_whatsapp.devserver",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8082, help="0 picks a free port")
    parser.add_argument("--token", default=DEFAULT_TOKEN)
    parser.add_argument("--app-secret", default="fake-app-secret")
    parser.add_argument("--verify-token", default="fake-verify-token")
    parser.add_argument("--workers", type=int, default=1,
                        help="notifications posted at a time (in order per user)")
    parser.add_argument("--latency", type=float, default=0.0,
                        help="seconds added to every Graph API call (as real round trips)")
    parser.add_argument("--no-statuses", action="store_true",
                        help="post no sent/delivered statuses after sends")
    anyio.run(serve, parser.parse_args(argv))


if __name__ == "__main__":
    main()
