"""The Slack app manifest chatkernel-slack ships: print it to create the app.

::

    python -m chatkernel_slack.manifest                       # Socket Mode (the default)
    python -m chatkernel_slack.manifest --events https://gateway.example/slack/main/webhook
    python -m chatkernel_slack.manifest --name "Research bot"

Paste the output at "Create New App → From a manifest" in Slack's app settings. It asks
for the bot scopes the channel uses (reading mentions, channel, group and DM messages;
posting; files in and out) and subscribes to the events it reads (``app_mention`` and
``message.*``). ``--events URL`` turns Socket Mode off and sets the Events API's request
URL (the gateway's ``/slack/<account>/webhook``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

MANIFEST = Path(__file__).with_name("manifest.json")


def manifest(*, name: str | None = None, request_url: str | None = None) -> dict[str, Any]:
    """The app manifest, for Socket Mode, or for the Events API at ``request_url``."""
    data = json.loads(MANIFEST.read_text())
    if name:
        data["display_information"]["name"] = name
        data["features"]["bot_user"]["display_name"] = name
    if request_url:
        data["settings"]["socket_mode_enabled"] = False
        data["settings"]["event_subscriptions"]["request_url"] = request_url
    return data


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m chatkernel_slack.manifest",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", help="the app's and its bot user's name")
    parser.add_argument("--events", metavar="URL",
                        help="use the Events API at this request URL instead of Socket Mode")
    args = parser.parse_args(argv)
    print(json.dumps(manifest(name=args.name, request_url=args.events), indent=2))


if __name__ == "__main__":
    main()
