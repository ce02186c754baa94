"""The fake Slack as a server, to try a Slack bot offline: ``python -m chatkernel_slack.devserver``
(docs/channels/slack.md, "Developing offline"; its routes: FakeSlack.developer_routes, its
first line and config snippet: FakeSlack.developer_info and config_snippet)."""

from __future__ import annotations

from chatkernel.testing.devserver import DevServer
from chatkernel_slack.fake import FakeSlack


def _platform(args) -> FakeSlack:
    slack = FakeSlack(mode=args.mode)
    slack.app.bot_token, slack.app.app_token = args.bot_token, args.app_token
    return slack


server = DevServer(
    prog="python -m chatkernel_slack.devserver", port=8082, platform=_platform,
    description="Run the fake Slack as a server, to try a Slack bot offline.",
    options={"--mode": {"choices": ("socket", "events"), "default": "socket",
                        "help": "how the app receives events: Socket Mode or the Events API"},
             "--bot-token": {"default": "xoxb-0000000001-0000000002-DEVSERVERofflineBotToken"},
             "--app-token": {"default": "xapp-1-A0DEVSERVER-0000000001-DEVSERVERofflineAppToken"}})
main = server.main

if __name__ == "__main__":
    main()
