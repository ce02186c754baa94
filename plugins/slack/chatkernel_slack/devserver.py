"""The fake Slack as a server, to try a Slack bot offline: ``python -m chatkernel_slack.devserver``.

Its routes (``/_fake/messages``, ``/_fake/sent``, ``/_fake/request_url``), options and
config snippet are in docs/channels/slack.md, "Developing offline"; the runner in
chatkernel.testing.devserver.
"""

from __future__ import annotations

from aiohttp import web

from chatkernel.testing.devserver import DevServer, bad_request, fields, json_body, wait_until
from chatkernel_slack.fake import FakeSlack

DEFAULT_BOT_TOKEN = "xoxb-0000000001-0000000002-DEVSERVERofflineBotToken"
DEFAULT_APP_TOKEN = "xapp-1-A0DEVSERVER-0000000001-DEVSERVERofflineAppToken"
MESSAGE_FIELDS = {"channel": str, "text": str, "user": str, "user_name": str,
                  "thread_ts": str, "mention": bool, "files": list}


def developer_routes(slack: FakeSlack) -> list[web.RouteDef]:
    """Write as a user, read what the bot posted, point events mode at a URL."""

    async def inject(request: web.Request) -> web.Response:
        body = fields(await json_body(request), MESSAGE_FIELDS, required=("channel",))
        files = []
        for item in body.pop("files", []):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str) \
                    or not isinstance(item.get("text"), str):
                raise bad_request('each file is {"name": "notes.txt", "text": "..."}')
            files.append((item["name"], item["text"].encode(), "text/plain"))
        channel, text = body.pop("channel"), body.pop("text", "")
        return web.json_response({"ts": slack.inject_message(channel, text, files=files,
                                                             **body)})

    async def sent(request: web.Request) -> web.Response:
        channel = request.query.get("channel")
        await wait_until(request, slack, lambda: bool(slack.sent(channel)))
        return web.json_response({"messages": [
            {"channel": m.channel, "ts": m.ts, "thread_ts": m.thread_ts, "text": m.plain_text,
             "files": [f.name for f in m.files]} for m in slack.sent(channel)]})

    async def request_url(request: web.Request) -> web.Response:
        url = fields(await json_body(request), {"url": str}, required=("url",))["url"]
        return web.json_response({"verified": await slack.verify_url(url)})

    return [web.post("/_fake/messages", inject), web.get("/_fake/sent", sent),
            web.post("/_fake/request_url", request_url)]


def _platform(args) -> FakeSlack:
    slack = FakeSlack(mode=args.mode)
    slack.latency = args.latency
    slack.app.bot_token, slack.app.app_token = args.bot_token, args.app_token
    return slack


def _options(parser) -> None:
    parser.add_argument("--mode", choices=("socket", "events"), default="socket",
                        help="how the app receives events: Socket Mode or the Events API")
    parser.add_argument("--latency", type=float, default=0.0,
                        help="seconds added to every Web API call (as real round trips)")
    parser.add_argument("--bot-token", default=DEFAULT_BOT_TOKEN)
    parser.add_argument("--app-token", default=DEFAULT_APP_TOKEN)


def _announce(slack: FakeSlack, args) -> dict:
    return {"base_url": slack.base_url, "api_base": f"{slack.base_url}/api/",
            "bot_token": slack.bot_token, "app_token": slack.app_token,
            "signing_secret": slack.signing_secret, "bot_user": slack.bot_user,
            "team_id": slack.app.team_id, "mode": args.mode}


def _snippet(slack: FakeSlack, args) -> str:
    socket = args.mode == "socket"
    secret = (f"export SLACK_APP_TOKEN={slack.app_token}" if socket
              else f"export SLACK_SIGNING_SECRET={slack.signing_secret}")
    setting = ('app_token = "${SLACK_APP_TOKEN}"' if socket
               else 'mode = "events"\nsigning_secret = "${SLACK_SIGNING_SECRET}"')
    events = "" if socket else (
        "\n# events mode: once the gateway runs, tell the fake where to post:\n"
        f"#   curl -d '{{\"url\": \"http://127.0.0.1:8787/slack/main/webhook\"}}' "
        f"{slack.base_url}/_fake/request_url")
    return f"""# the fake Slack is up ({args.mode} mode); point an account at it:
#   export SLACK_BOT_TOKEN={slack.bot_token}
#   {secret}
[channels.slack.accounts.main]
bot_token = "${{SLACK_BOT_TOKEN}}"
{setting}
api_base = "{slack.base_url}/api/"
allow_from = ["*"]
# then write as a user (in a DM; a channel message needs "mention": true):
#   curl -d '{{"channel": "D0DIRECT01", "text": "hello"}}' {slack.base_url}/_fake/messages
#   curl '{slack.base_url}/_fake/sent?channel=D0DIRECT01&wait=10'{events}"""


server = DevServer(prog="python -m chatkernel_slack.devserver", port=8082, platform=_platform,
                   description="Run the fake Slack as a server, to try a Slack bot offline.",
                   announce=_announce, snippet=_snippet, routes=developer_routes,
                   options=_options)
main = server.main

if __name__ == "__main__":
    main()
