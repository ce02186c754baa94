"""Run the fake Slack as a server, to develop and try a Slack bot offline.

::

    python -m chatkernel_slack.devserver --port 8082                 # Socket Mode
    python -m chatkernel_slack.devserver --port 8082 --mode events   # the Events API

serves :class:`chatkernel_slack.fake.FakeSlack` on 127.0.0.1 (the Web API at
``http://127.0.0.1:8082/api/<method>``, Socket Mode's websocket, private files), prints
one JSON line with its ``api_base``, ``bot_token``, ``app_token``, ``signing_secret``
and ``bot_user``, and a config snippet for ``chatkernel run``. Besides Slack's own API
it answers developer routes, which the real Slack does not have:

``POST /_fake/messages``     ``{"channel": "D0DIRECT01", "text": "hi"}`` (optional
                             ``user``, ``user_name``, ``thread_ts``, ``mention`` (true:
                             the bot's ``<@U…>`` first), ``files``: ``[{"name", "text"}]``):
                             a user writes; answers ``{"ts": ...}``.
``GET /_fake/sent``          ``?channel=...`` (optional): what the bot posted, in order:
                             ``{"messages": [{"channel", "ts", "thread_ts", "text",
                             "files"}]}`` (``text`` as a person reads it).
``POST /_fake/request_url``  ``{"url": "http://127.0.0.1:8787/slack/main/webhook"}``:
                             where events go in events mode, after Slack's
                             ``url_verification`` handshake; answers ``{"verified": bool}``.

Its tokens are fixed (``--bot-token``, ``--app-token``), so a config can take them from
the environment as a real one does. As the real Slack, it answers a post to a
conversation it does not have with ``{"ok": false, "error": "channel_not_found"}``
(HTTP 200), and a refused token with ``invalid_auth``.

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

from chatkernel_slack.fake import FakeSlack

DEFAULT_BOT_TOKEN = "xoxb-0000000001-0000000002-DEVSERVERofflineBotToken"
DEFAULT_APP_TOKEN = "xapp-1-A0DEVSERVER-0000000001-DEVSERVERofflineAppToken"
MESSAGE_FIELDS = {"channel": str, "text": str, "user": str, "user_name": str,
                  "thread_ts": str, "mention": bool, "files": list}


def _bad(reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=400)


def developer_routes(slack: FakeSlack) -> list[web.RouteDef]:
    """The ``/_fake/*`` routes: write as a user, read what the bot posted."""

    async def inject(request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return _bad("the body must be JSON")
        if not isinstance(body, dict) or not isinstance(body.get("channel"), str):
            return _bad('expected {"channel": "D0DIRECT01", "text": ...}')
        for name, value in body.items():
            kind = MESSAGE_FIELDS.get(name)
            if kind is None:
                return _bad(f"unknown field {name!r} (fields: {', '.join(MESSAGE_FIELDS)})")
            if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
                return _bad(f"{name} must be a {kind.__name__}, not {value!r}")
        files = []
        for item in body.get("files", []):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str) \
                    or not isinstance(item.get("text"), str):
                return _bad('each file is {"name": "notes.txt", "text": "..."}')
            files.append((item["name"], item["text"].encode(), "text/plain"))
        options: dict[str, Any] = {k: body[k] for k in ("user", "user_name", "thread_ts",
                                                        "mention") if k in body}
        ts = slack.inject_message(body["channel"], body.get("text", ""), files=files, **options)
        return web.json_response({"ts": ts})

    async def sent(request: web.Request) -> web.Response:
        channel = request.query.get("channel")
        return web.json_response({"messages": [
            {"channel": m.channel, "ts": m.ts, "thread_ts": m.thread_ts, "text": m.plain_text,
             "files": [f.name for f in m.files]} for m in slack.sent(channel)]})

    async def request_url(request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return _bad("the body must be JSON")
        if not isinstance(body, dict) or not isinstance(body.get("url"), str):
            return _bad('expected {"url": "http://127.0.0.1:8787/slack/main/webhook"}')
        return web.json_response({"verified": await slack.verify_url(body["url"])})

    return [web.post("/_fake/messages", inject), web.get("/_fake/sent", sent),
            web.post("/_fake/request_url", request_url)]


async def serve(port: int, mode: str, latency: float, bot_token: str = DEFAULT_BOT_TOKEN,
                app_token: str = DEFAULT_APP_TOKEN) -> None:
    async with FakeSlack(mode=mode, port=port, extra_routes=developer_routes) as slack:
        slack.latency = latency
        slack.app.bot_token, slack.app.app_token = bot_token, app_token
        api_base = f"{slack.base_url}/api/"
        print(json.dumps({"base_url": slack.base_url, "api_base": api_base,
                          "bot_token": slack.bot_token, "app_token": slack.app_token,
                          "signing_secret": slack.signing_secret, "bot_user": slack.bot_user,
                          "team_id": slack.app.team_id, "mode": mode}), flush=True)
        secret = ('app_token = "${SLACK_APP_TOKEN}"' if mode == "socket" else
                  'mode = "events"\nsigning_secret = "${SLACK_SIGNING_SECRET}"')
        exports = (f"#   export SLACK_APP_TOKEN={slack.app_token}" if mode == "socket" else
                   f"#   export SLACK_SIGNING_SECRET={slack.signing_secret}")
        print(f"""# the fake Slack is up ({mode} mode); point an account at it:
#   export SLACK_BOT_TOKEN={slack.bot_token}
{exports}
[channels.slack.accounts.main]
bot_token = "${{SLACK_BOT_TOKEN}}"
{secret}
api_base = "{api_base}"
allow_from = ["*"]
# then write as a user (in a DM; a channel message needs "mention": true):
#   curl -d '{{"channel": "D0DIRECT01", "text": "hello"}}' {slack.base_url}/_fake/messages
#   curl {slack.base_url}/_fake/sent?channel=D0DIRECT01""", file=sys.stderr, flush=True)
        if mode == "events":
            print(f"# events mode: once the gateway runs, tell the fake where to post:\n"
                  f"#   curl -d '{{\"url\": \"http://127.0.0.1:8787/slack/main/webhook\"}}' "
                  f"{slack.base_url}/_fake/request_url", file=sys.stderr, flush=True)
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                return


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m chatkernel_slack.devserver",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8082, help="0 picks a free port")
    parser.add_argument("--mode", choices=("socket", "events"), default="socket",
                        help="how the app receives events: Socket Mode or the Events API")
    parser.add_argument("--latency", type=float, default=0.0,
                        help="seconds added to every Web API call (as real round trips)")
    parser.add_argument("--bot-token", default=DEFAULT_BOT_TOKEN)
    parser.add_argument("--app-token", default=DEFAULT_APP_TOKEN)
    args = parser.parse_args(argv)
    anyio.run(serve, args.port, args.mode, args.latency, args.bot_token, args.app_token)


if __name__ == "__main__":
    main()
