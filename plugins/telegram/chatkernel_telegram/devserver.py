"""The fake Bot API as a server, to try a bot offline: ``python -m chatkernel_telegram.devserver``.

Its routes (``/_fake/messages``, ``/_fake/sent``), options and config snippet are in
docs/channels/telegram.md, "Developing offline"; the runner in chatkernel.testing.devserver.
"""

from __future__ import annotations

import sys

from aiohttp import web

from chatkernel.testing.devserver import DevServer, bad_request, fields, json_body, wait_until
from chatkernel_telegram.fake import FakeBotAPI, SentMessage

DEFAULT_TOKEN = "123456:DEVSERVER-offline-token"
MESSAGE_FIELDS = {"chat_id": int, "text": str, "from_id": int, "chat_type": str,
                  "chat_title": str, "message_thread_id": int}


def developer_routes(api: FakeBotAPI) -> list[web.RouteDef]:
    """``POST /_fake/messages``: a user writes; ``GET /_fake/sent``: what the bot sent."""

    async def inject(request: web.Request) -> web.Response:
        body = fields(await json_body(request), MESSAGE_FIELDS, required=("chat_id",))
        chat_id, text = body.pop("chat_id"), body.pop("text", None)
        if "message_thread_id" in body:
            body["is_topic_message"] = True
        return web.json_response({"update_id": api.inject_message(chat_id, text, **body)})

    async def sent(request: web.Request) -> web.Response:
        chat = request.query.get("chat_id")
        if chat is not None and not chat.lstrip("-").isdigit():
            raise bad_request(f"chat_id must be a number, not {chat!r}")
        chat_id = int(chat) if chat is not None else None
        await wait_until(request, api, lambda: bool(api.sent(chat_id=chat_id)))
        return web.json_response({"messages": [
            {"chat_id": s.chat_id, "method": s.method, "text": s.plain_text,
             "parse_mode": s.parse_mode, "kind": s.kind} for s in api.sent(chat_id=chat_id)]})

    return [web.post("/_fake/messages", inject), web.get("/_fake/sent", sent)]


class DevBotAPI(FakeBotAPI):
    """The fake Bot API, telling on stderr what the bot sent and what was refused."""

    def record_sent(self, message: SentMessage) -> None:
        super().record_sent(message)
        print(f"bot -> chat {message.chat_id}: {message.method} (parse_mode "
              f"{message.parse_mode or 'none'}, {message.kind}): {message.text!r}",
              file=sys.stderr, flush=True)

    async def serve_call(self, request, call, answer):
        response = await super().serve_call(request, call, answer)
        if call.error is not None:
            print(f"bot -> {call.method} refused: {call.error}", file=sys.stderr, flush=True)
        return response


def _platform(args) -> DevBotAPI:
    api = DevBotAPI(token=args.token, username=args.username, strict_chats=not args.any_chat)
    api.latency = args.latency
    return api


def _options(parser) -> None:
    parser.add_argument("--token", default=DEFAULT_TOKEN)
    parser.add_argument("--username", default="chatkernel_dev_bot")
    parser.add_argument("--latency", type=float, default=0.0,
                        help="seconds added to every Bot API call (as real round trips)")
    parser.add_argument("--any-chat", action="store_true",
                        help="take sends to any chat id (the Bot API answers 400 chat not "
                             "found for a chat nobody wrote from)")


SNIPPET = """# the fake Bot API is up; point an account at it:
#   export TELEGRAM_BOT_TOKEN={api.token}
[channels.telegram.accounts.main]
bot_token = "${{TELEGRAM_BOT_TOKEN}}"
api_base = "{api.base_url}"
allow_from = ["*"]
# then write as a user:
#   curl -d '{{"chat_id": 42, "text": "hello"}}' {api.base_url}/_fake/messages
#   curl '{api.base_url}/_fake/sent?chat_id=42&wait=10'"""

server = DevServer(
    prog="python -m chatkernel_telegram.devserver", port=8081, platform=_platform,
    description="Run the fake Bot API as a server, to develop and try a bot offline.",
    announce=lambda api, args: {"base_url": api.base_url, "token": api.token},
    snippet=lambda api, args: SNIPPET.format(api=api), routes=developer_routes,
    options=_options)
main = server.main

if __name__ == "__main__":
    main()
