"""The Slack channel is written against the current channel contract: it uses no name the
kit keeps only for older plugins, and receives through its transports."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from chatkernel.channels import Account, Capabilities
from chatkernel_slack.channel import RECIPIENT_ERRORS, SlackAccount, SlackChannel
from chatkernel_slack.receiving import SlackEvents, SlackSocket

TOKENS = {"bot_token": "xoxb-1-2-SHAPEBOTTOKEN", "app_token": "xapp-1-A1-1-SHAPEAPPTOKEN",
          "signing_secret": "shape-signing-secret"}


def channel(mode: str) -> SlackChannel:
    config = SlackAccount.model_validate({**TOKENS, "mode": mode, "silent_after": 12})
    return SlackChannel(Account("slack", "main", config))


@pytest.mark.slow
def test_nothing_it_does_warns_of_a_deprecated_name():
    # A fresh interpreter: the class is made (and checked by the kit) on import.
    script = textwrap.dedent(f"""
        from chatkernel.channels import Account, PlatformError, refusal
        from chatkernel_slack.channel import SlackAccount, SlackChannel
        for mode in ("socket", "events"):
            config = SlackAccount.model_validate({{**{TOKENS!r}, "mode": mode}})
            channel = SlackChannel(Account("slack", "main", config))
            transport = channel.transport()
            transport.quiet, transport.http_routes()
            error = PlatformError("invalid_auth", code="invalid_auth", kind="rejected")
            assert "restart the gateway" in refusal(channel, error)
        """)
    done = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", script],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_each_mode_has_its_transport():
    socket, events = channel("socket").transport(), channel("events").transport()
    assert type(socket) is SlackSocket and not socket.quiet and socket.silent_after == 12
    assert socket.http_routes() == []
    assert type(events) is SlackEvents and events.quiet
    assert [(method, path) for method, path, _ in events.http_routes()] == [
        ("POST", "/slack/main/webhook"), ("GET", "/slack/main/webhook")]


def test_platform_features_are_declared_as_data():
    assert SlackChannel.capabilities == Capabilities(
        command_prefixes="/!", recipient_error_codes=RECIPIENT_ERRORS)
    assert SlackChannel.limits.indicator_interval == 30.0
    assert SlackAccount.identity == ("api_base", "bot_token")
