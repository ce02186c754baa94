"""The scopes a Slack account needs, reported by its probe for ``chatkernel doctor``: the
bot token's (Slack's ``x-oauth-scopes`` header on ``auth.test``) for what the account is
configured to do, chat:write's absence a failure and each other missing scope a warning,
each naming where to add it; Socket Mode's app-level token's ``connections:write``."""

from __future__ import annotations

import pytest

from chatkernel.testing import open_contract_run
from chatkernel_slack.manifest import manifest
from chatkernel_slack.scopes import BOT_SCOPES
from slack_adapters import SlackEventsAdapter, SlackSocketAdapter

pytestmark = pytest.mark.anyio


def findings(probe) -> dict[str, dict[str, str]]:
    return {item["check"]: item for item in probe.extra["findings"]}


def test_the_channel_asks_for_what_the_manifest_grants():
    assert {scope.name for scope in BOT_SCOPES} == \
        set(manifest()["oauth_config"]["scopes"]["bot"])


async def test_a_token_with_every_scope_is_ok(tmp_path):
    async with SlackSocketAdapter() as adapter:
        async with open_contract_run(adapter, tmp_path, loop=False) as run:
            probe = await run.probe()
            found = findings(probe)
            assert probe.ok and probe.detail == "Fake Workspace as @chatkernel"
            assert found["scopes"]["status"] == "ok"
            assert found["scope.connections:write"]["status"] == "ok"
            assert set(found) == {"scopes", "scope.connections:write"}
            assert probe.extra["server_date"]  # Slack's clock, for doctor's


async def test_each_missing_scope_is_named_with_where_to_add_it(tmp_path):
    async with SlackEventsAdapter() as adapter:
        for scope in ("chat:write", "files:write", "im:history", "channels:history"):
            adapter.slack.app.scopes.discard(scope)
        async with open_contract_run(adapter, tmp_path, loop=False) as run:
            probe = await run.probe()
            found = findings(probe)
    assert probe.ok  # auth.test passed: the health stays as it was, with a warning
    assert "missing scopes chat:write, files:write, im:history, channels:history" in \
        probe.detail
    assert set(found) == {"scope.chat:write", "scope.files:write", "scope.im:history",
                          "scope.channels:history"}  # events mode: no app-level token
    assert found["scope.chat:write"]["status"] == "fail"
    assert "no reply can be posted" in found["scope.chat:write"]["message"]
    for scope in ("files:write", "im:history", "channels:history"):
        item = found[f"scope.{scope}"]
        assert item["status"] == "warn" and f"lacks the {scope} scope" in item["message"]
        assert f"add {scope} under Bot Token Scopes on the app's OAuth & Permissions " \
               "page" in item["fix"]
        assert "reinstall the app" in item["fix"]
    assert "subscribe to the message.im bot event" in found["scope.im:history"]["fix"]


async def test_only_the_scopes_the_account_uses_are_asked_for(tmp_path):
    """An account that takes no group message needs no history scope of a channel."""
    async with SlackSocketAdapter() as adapter:
        for scope in ("channels:history", "groups:history", "mpim:history",
                      "app_mentions:read"):
            adapter.slack.app.scopes.discard(scope)
        async with open_contract_run(adapter, tmp_path, loop=False,
                                     account_settings={"group_policy": "disabled"}) as run:
            found = findings(await run.probe())
    assert found["scopes"]["status"] == "ok"
    assert "the 4 scopes this account uses" in found["scopes"]["message"]


async def test_an_app_token_without_connections_write(tmp_path):
    async with SlackSocketAdapter() as adapter:
        adapter.slack.app.app_scopes.clear()
        async with open_contract_run(adapter, tmp_path, loop=False) as run:
            found = findings(await run.probe())
            again = findings(await run.probe())
        item = found["scope.connections:write"]
        assert item["status"] == "fail"
        assert "the app-level token lacks connections:write" in item["message"]
        assert "App-Level Tokens" in item["fix"] and "app_token" in item["fix"]
        assert again["scope.connections:write"] == item
        # apps.connections.open is Tier 1: asked once, not at every probe.
        assert len(adapter.slack.calls_to("apps.connections.open")) == 1
