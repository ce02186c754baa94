"""The app manifest shipped with the plugin asks for what the channel uses, no more."""

from __future__ import annotations

import json
import subprocess
import sys

from chatkernel_slack.fake import BOT_SCOPES, METHOD_SCOPES
from chatkernel_slack.manifest import manifest


def test_the_manifest_has_the_scopes_and_events_the_channel_uses():
    data = manifest()
    scopes = set(data["oauth_config"]["scopes"]["bot"])
    # Every Web API method the channel calls, files:read for url_private downloads, and
    # the history scope of each kind of conversation the events come from.
    assert set(METHOD_SCOPES.values()) | {"files:read"} <= scopes
    assert {"channels:history", "groups:history", "im:history", "mpim:history",
            "app_mentions:read"} <= scopes
    assert scopes <= BOT_SCOPES  # nothing the fake (and the channel) does not need
    assert set(data["settings"]["event_subscriptions"]["bot_events"]) == {
        "app_mention", "message.channels", "message.groups", "message.im", "message.mpim"}
    assert data["settings"]["socket_mode_enabled"] is True
    assert data["features"]["app_home"]["messages_tab_enabled"] is True


def test_the_events_api_variant_names_the_request_url():
    url = "https://gateway.example/slack/main/webhook"
    out = subprocess.run([sys.executable, "-m", "chatkernel_slack.manifest", "--events", url,
                          "--name", "Research bot"], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    data = json.loads(out)
    assert data["settings"]["socket_mode_enabled"] is False
    assert data["settings"]["event_subscriptions"]["request_url"] == url
    assert data["display_information"]["name"] == "Research bot"
