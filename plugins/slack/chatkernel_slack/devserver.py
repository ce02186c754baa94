"""The fake Slack as a server, to try a Slack bot offline: ``python -m chatkernel_slack.devserver``
(docs/channels/slack.md, "Developing offline"; its routes: FakeSlack.developer_routes)."""

from __future__ import annotations

from chatkernel.testing.devserver import DevServer
from chatkernel_slack.fake import FakeSlack

SNIPPET = """# the fake Slack is up ({mode} mode); point an account at it:
#   export SLACK_BOT_TOKEN={s.bot_token}
#   {secret}
[channels.slack.accounts.main]
bot_token = "${{SLACK_BOT_TOKEN}}"
{setting}
api_base = "{s.base_url}/api/"
allow_from = ["*"]
# then write as a user (in a DM; a channel message needs "mention": true):
#   curl -d '{{"channel": "D0DIRECT01", "text": "hello"}}' {s.base_url}/_fake/messages
#   curl '{s.base_url}/_fake/sent?channel=D0DIRECT01&wait=10'{events}"""
#: Per mode: the secret to export, the account's settings for it, what else to do.
MODES = {"socket": dict(secret="export SLACK_APP_TOKEN={s.app_token}", events="",
                        setting='app_token = "${{SLACK_APP_TOKEN}}"'),
         "events": dict(secret="export SLACK_SIGNING_SECRET={s.signing_secret}",
                        setting='mode = "events"\nsigning_secret = "${{SLACK_SIGNING_SECRET}}"',
                        events="\n# events mode: once the gateway runs, tell the fake where "
                               "to post:\n#   curl -d '{{\"url\": \"http://127.0.0.1:8787/"
                               "slack/main/webhook\"}}' {s.base_url}/_fake/request_url")}


def _platform(args) -> FakeSlack:
    slack = FakeSlack(mode=args.mode)
    slack.app.bot_token, slack.app.app_token = args.bot_token, args.app_token
    return slack


server = DevServer(
    prog="python -m chatkernel_slack.devserver", port=8082, platform=_platform,
    description="Run the fake Slack as a server, to try a Slack bot offline.",
    announce=lambda s, args: {"base_url": s.base_url, "api_base": f"{s.base_url}/api/",
                              "bot_token": s.bot_token, "app_token": s.app_token,
                              "signing_secret": s.signing_secret, "bot_user": s.bot_user,
                              "team_id": s.app.team_id, "mode": args.mode},
    snippet=lambda s, args: SNIPPET.format(s=s, mode=args.mode, **{
        part: text.format(s=s) for part, text in MODES[args.mode].items()}),
    options={"--mode": {"choices": ("socket", "events"), "default": "socket",
                        "help": "how the app receives events: Socket Mode or the Events API"},
             "--bot-token": {"default": "xoxb-0000000001-0000000002-DEVSERVERofflineBotToken"},
             "--app-token": {"default": "xapp-1-A0DEVSERVER-0000000001-DEVSERVERofflineAppToken"}})
main = server.main

if __name__ == "__main__":
    main()
