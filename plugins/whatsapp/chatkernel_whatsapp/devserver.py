"""The fake Graph API as a server, to try a WhatsApp bot offline:
``python -m chatkernel_whatsapp.devserver``.

Its routes (``/_fake/subscribe``, ``/_fake/messages``, ``/_fake/fail``,
``/_fake/close-window``, ``/_fake/sent``), options and config snippet are in
docs/channels/whatsapp.md, "Developing offline"; the runner in chatkernel.testing.devserver.
"""

from __future__ import annotations

from aiohttp import web

from chatkernel.testing.devserver import DevServer, bad_request, fields, json_body, wait_until
from chatkernel_whatsapp.fake import DEFAULT_TOKEN, FakeGraph


def developer_routes(graph: FakeGraph) -> list[web.RouteDef]:
    """Subscribe a webhook, write as users, fail a number, read what was sent."""

    async def recipient(request: web.Request, **more: type) -> dict:
        return fields(await json_body(request), {"to": str, **more}, required=("to",))

    async def subscribe(request: web.Request) -> web.Response:
        url = fields(await json_body(request), {"url": str}, required=("url",))["url"]
        return web.json_response({"passed": await graph.subscribe(url)})

    async def messages(request: web.Request) -> web.Response:
        body = await json_body(request)
        items = body.get("messages", [body])
        if not isinstance(items, list) or not items or not all(
                isinstance(m, dict) and isinstance(m.get("from"), str)
                and isinstance(m.get("text", ""), str) for m in items):
            raise bad_request('expected {"from": "<wa_id>", "text": "..."} or '
                              '{"messages": [...]}')
        made = [graph.message(m["from"], m.get("text", "")) for m in items]
        graph.inject_messages(made)
        return web.json_response({"ids": [m["id"] for m in made]})

    async def fail(request: web.Request) -> web.Response:
        body = await recipient(request, code=int, title=str)
        graph.fail_delivery(body["to"], code=body.get("code", 131026),
                            title=body.get("title", "Message undeliverable"))
        return web.json_response({"ok": True})

    async def close_window(request: web.Request) -> web.Response:
        graph.close_window((await recipient(request))["to"])
        return web.json_response({"ok": True})

    async def sent(request: web.Request) -> web.Response:
        to = request.query.get("to")
        await wait_until(request, graph, lambda: bool(graph.sent(to)))
        return web.json_response({"messages": [
            {"to": m.to, "type": m.type, "text": m.text, "when": m.when, "id": m.wamid}
            for m in graph.sent(to)]})

    return [web.post("/_fake/subscribe", subscribe), web.post("/_fake/messages", messages),
            web.post("/_fake/fail", fail), web.post("/_fake/close-window", close_window),
            web.get("/_fake/sent", sent)]


def _platform(args) -> FakeGraph:
    graph = FakeGraph(token=args.token, app_secret=args.app_secret,
                      verify_token=args.verify_token, webhook_workers=args.workers)
    graph.latency, graph.statuses = args.latency, not args.no_statuses
    return graph


def _options(parser) -> None:
    parser.add_argument("--token", default=DEFAULT_TOKEN)
    parser.add_argument("--app-secret", default="fake-app-secret")
    parser.add_argument("--verify-token", default="fake-verify-token")
    parser.add_argument("--workers", type=int, default=1,
                        help="notifications posted at a time (in order per user)")
    parser.add_argument("--latency", type=float, default=0.0,
                        help="seconds added to every Graph API call (as real round trips)")
    parser.add_argument("--no-statuses", action="store_true",
                        help="post no sent/delivered statuses after sends")


SNIPPET = """# the fake Graph API is up; point an account at it:
#   export WHATSAPP_TOKEN={g.token}
#   export WHATSAPP_APP_SECRET={g.app_secret}
#   export WHATSAPP_VERIFY_TOKEN={g.verify_token}
[channels.whatsapp.accounts.main]
access_token = "${{WHATSAPP_TOKEN}}"
phone_number_id = "{g.phone_number_id}"
app_secret = "${{WHATSAPP_APP_SECRET}}"
verify_token = "${{WHATSAPP_VERIFY_TOKEN}}"
api_base = "{g.base_url}"
allow_from = ["*"]
# start chatkernel run, then subscribe its webhook and write as a user:
#   curl -d '{{"url": "http://127.0.0.1:8787/whatsapp/main/webhook"}}' {g.base_url}/_fake/subscribe
#   curl -d '{{"from": "15551234567", "text": "hello"}}' {g.base_url}/_fake/messages
#   curl '{g.base_url}/_fake/sent?to=15551234567&wait=10'"""

server = DevServer(
    prog="python -m chatkernel_whatsapp.devserver", port=8082, platform=_platform,
    description="Run the fake Graph API as a server, to develop and try a WhatsApp bot offline.",
    announce=lambda g, args: {"base_url": g.base_url, "token": g.token,
                              "phone_number_id": g.phone_number_id,
                              "app_secret": g.app_secret, "verify_token": g.verify_token},
    snippet=lambda g, args: SNIPPET.format(g=g), routes=developer_routes, options=_options)
main = server.main

if __name__ == "__main__":
    main()
