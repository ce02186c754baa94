"""Run the fake Bot API as a server, to develop and try a bot offline.

::

    python -m chatkernel_telegram.devserver --port 8081

serves :class:`chatkernel_telegram.fake.FakeBotAPI` on 127.0.0.1 (the Bot API at
``http://127.0.0.1:8081/bot<TOKEN>/<method>``), prints one JSON line with its
``base_url`` and ``token``, and a config snippet for ``chatkernel run``. Besides the Bot
API it answers two developer routes, which the real Telegram does not have:

``POST /_fake/messages``  ``{"chat_id": 42, "text": "hi"}`` (optional ``from_id``,
                          ``chat_type``, ``chat_title``, ``message_thread_id``): a user
                          writes to the bot; answers ``{"update_id": N}``.
``GET /_fake/sent``       ``?chat_id=42`` (optional): what the bot sent, in order:
                          ``{"messages": [{"chat_id", "method", "text", "parse_mode",
                          "kind"}]}`` (``text`` as the user sees it, ``parse_mode`` as sent).

Every message the bot sends is also logged on stderr with its parse mode, and every
call Telegram would refuse with its error. As the real Bot API, it answers a send to a
numeric chat id nobody wrote from (with ``POST /_fake/messages``) ``400 Bad Request:
chat not found``; ``--any-chat`` takes sends to any chat instead.

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

from chatkernel.testing.fake_platform import Call
from chatkernel_telegram.fake import FakeBotAPI, SentMessage

DEFAULT_TOKEN = "123456:DEVSERVER-offline-token"
MESSAGE_FIELDS = {"chat_id": int, "text": str, "from_id": int, "chat_type": str,
                  "chat_title": str, "message_thread_id": int}


def developer_routes(api: FakeBotAPI) -> list[web.RouteDef]:
    """The ``/_fake/*`` routes: write as a user, read what the bot sent."""

    async def inject(request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": "the body must be JSON"}, status=400)
        if not isinstance(body, dict) or "chat_id" not in body:
            return web.json_response({"error": "expected {\"chat_id\": <int>, \"text\": ...}"},
                                     status=400)
        fields: dict[str, Any] = {}
        for name, value in body.items():
            kind = MESSAGE_FIELDS.get(name)
            if kind is None:
                return web.json_response(
                    {"error": f"unknown field {name!r} (fields: {', '.join(MESSAGE_FIELDS)})"},
                    status=400)
            if not isinstance(value, kind) or isinstance(value, bool):
                return web.json_response(
                    {"error": f"{name} must be a {kind.__name__}, not {value!r}"}, status=400)
            fields[name] = value
        chat_id = fields.pop("chat_id")
        text = fields.pop("text", None)
        if "message_thread_id" in fields:
            fields["is_topic_message"] = True
        update_id = api.inject_message(chat_id, text, **fields)
        return web.json_response({"update_id": update_id})

    async def sent(request: web.Request) -> web.Response:
        chat = request.query.get("chat_id")
        try:
            chat_id = int(chat) if chat is not None else None
        except ValueError:
            return web.json_response({"error": f"chat_id must be a number, not {chat!r}"},
                                     status=400)
        return web.json_response({"messages": [
            {"chat_id": s.chat_id, "method": s.method, "text": s.plain_text,
             "parse_mode": s.parse_mode, "kind": s.kind}
            for s in api.sent(chat_id=chat_id)]})

    return [web.post("/_fake/messages", inject), web.get("/_fake/sent", sent)]


class DevBotAPI(FakeBotAPI):
    """The fake Bot API, telling on stderr what the bot sent and what was refused."""

    def record_sent(self, message: SentMessage) -> None:
        super().record_sent(message)
        print(f"bot -> chat {message.chat_id}: {message.method} (parse_mode "
              f"{message.parse_mode or 'none'}, {message.kind}): {message.text!r}",
              file=sys.stderr, flush=True)

    async def serve_call(self, request: web.Request, call: Call, answer: Any
                         ) -> web.StreamResponse:
        response = await super().serve_call(request, call, answer)
        if call.error is not None:
            print(f"bot -> {call.method} refused: {call.error}", file=sys.stderr, flush=True)
        return response


async def serve(port: int, token: str, username: str, latency: float,
                any_chat: bool = False) -> None:
    async with DevBotAPI(token=token, username=username, port=port,
                         strict_chats=not any_chat, extra_routes=developer_routes) as api:
        api.latency = latency
        print(json.dumps({"base_url": api.base_url, "token": api.token}), flush=True)
        print(f"""# the fake Bot API is up; point an account at it:
#   export TELEGRAM_BOT_TOKEN={api.token}
[channels.telegram.accounts.main]
bot_token = "${{TELEGRAM_BOT_TOKEN}}"
api_base = "{api.base_url}"
allow_from = ["*"]
# then write as a user:
#   curl -d '{{"chat_id": 42, "text": "hello"}}' {api.base_url}/_fake/messages
#   curl {api.base_url}/_fake/sent?chat_id=42""", file=sys.stderr, flush=True)
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                return


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m chatkernel_telegram.devserver",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8081, help="0 picks a free port")
    parser.add_argument("--token", default=DEFAULT_TOKEN)
    parser.add_argument("--username", default="chatkernel_dev_bot")
    parser.add_argument("--latency", type=float, default=0.0,
                        help="seconds added to every Bot API call (as real round trips)")
    parser.add_argument("--any-chat", action="store_true",
                        help="take sends to any chat id (the Bot API answers 400 chat not "
                             "found for a chat nobody wrote from)")
    args = parser.parse_args(argv)
    anyio.run(serve, args.port, args.token, args.username, args.latency, args.any_chat)


if __name__ == "__main__":
    main()
