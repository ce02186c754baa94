"""The OAuth scopes the channel uses, and what an account lacking one cannot do.

Slack names a token's granted scopes in the ``x-oauth-scopes`` header of every Web API
answer (comma-separated), so the probe's ``auth.test`` tells which of :data:`BOT_SCOPES`
the bot token lacks for what the account is set to do; ``chatkernel doctor`` reports
each (``ProbeResult.extra["findings"]``). The app-level token of Socket Mode needs
``connections:write``: ``apps.connections.open`` answers ``missing_scope`` without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chatkernel_slack.channel import SlackAccount

#: The header of every Web API answer naming the token's scopes.
GRANTED_HEADER = "x-oauth-scopes"
#: What Socket Mode's app-level token needs.
APP_TOKEN_SCOPE = "connections:write"


def where_to_add(scope: str) -> str:
    """How a bot scope is added: on the app's config page, then a reinstall."""
    return (f"add {scope} under Bot Token Scopes on the app's OAuth & Permissions page "
            "(api.slack.com/apps, the app), then reinstall the app to the workspace from "
            "that page (the bot token stays the same)")


def _always(account: SlackAccount) -> bool:
    return True


def _direct(account: SlackAccount) -> bool:
    return account.dm_policy != "disabled"


def _groups(account: SlackAccount) -> bool:
    return account.group_policy != "disabled"


@dataclass(frozen=True, slots=True)
class Scope:
    """A bot scope the channel uses: what fails without it, the bot event it brings (an
    event is only sent to an app with its scope), whether the account needs it as it is
    configured, and whether lacking it stops the account (a failure) or part of it."""

    name: str
    without: str
    event: str = ""
    needed: Callable[[SlackAccount], bool] = _always
    required: bool = False


#: Every bot scope the channel's calls and events need (the shipped manifest asks for
#: these and no other).
BOT_SCOPES = (
    Scope("chat:write", "no reply can be posted (chat.postMessage, chat.update, the "
                        "streams, the working status)", required=True),
    Scope("files:write", "the agent's files cannot be sent (files.getUploadURLExternal)"),
    Scope("files:read", "the files users send are not saved (url_private_download)"),
    Scope("im:history", "direct messages never arrive", "message.im", _direct),
    Scope("app_mentions:read", "mentions in channels never arrive", "app_mention", _groups),
    Scope("channels:history", "messages in public channels (beyond mentions) never arrive",
          "message.channels", _groups),
    Scope("groups:history", "messages in private channels (beyond mentions) never arrive",
          "message.groups", _groups),
    Scope("mpim:history", "group DMs never arrive", "message.mpim", _groups),
)


def granted(headers: Mapping[str, str]) -> frozenset[str] | None:
    """The scopes an answer's headers say the token has (None: it did not say)."""
    for key, value in headers.items():
        if key.lower() == GRANTED_HEADER:
            return frozenset(part.strip() for part in str(value).split(",") if part.strip())
    return None


def missing(scopes: frozenset[str], account: SlackAccount) -> list[Scope]:
    """The bot scopes ``account`` needs, as configured, that ``scopes`` lacks."""
    return [scope for scope in BOT_SCOPES if scope.needed(account) and scope.name not in scopes]


def bot_findings(scopes: frozenset[str] | None, account: SlackAccount) -> list[dict[str, Any]]:
    """Doctor's findings about the bot token's scopes: a warning per missing one (a
    failure for ``chat:write``), naming it and where to add it; one ok when none is."""
    if scopes is None:
        return []
    lacking = missing(scopes, account)
    if not lacking:
        count = sum(1 for scope in BOT_SCOPES if scope.needed(account))
        return [{"check": "scopes", "status": "ok",
                 "message": f"the bot token has the {count} scopes this account uses"}]
    found = []
    for scope in lacking:
        event = (f", and subscribe to the {scope.event} bot event under Event "
                 "Subscriptions if it is not") if scope.event else ""
        found.append({
            "check": f"scope.{scope.name}", "status": "fail" if scope.required else "warn",
            "message": f"the bot token lacks the {scope.name} scope: {scope.without}",
            "fix": where_to_add(scope.name) + event})
    return found


def app_token_finding(code: str | None) -> dict[str, Any]:
    """Doctor's finding about Socket Mode's app-level token from ``apps.connections.open``
    (``code``: Slack's error, None when it opened)."""
    if code is None:
        return {"check": "scope.connections:write", "status": "ok",
                "message": f"the app-level token has {APP_TOKEN_SCOPE}"}
    page = ("generate an app-level token with the connections:write scope under Basic "
            "Information, App-Level Tokens (api.slack.com/apps, the app), set it as "
            "app_token and restart the gateway")
    if code == "missing_scope":
        message = f"the app-level token lacks {APP_TOKEN_SCOPE}: Socket Mode cannot connect"
    elif code == "not_allowed_token_type":
        message = "app_token is not an app-level token (xapp-…): Socket Mode cannot connect"
    else:
        message = f"Slack refused the app-level token ({code}): Socket Mode cannot connect"
    return {"check": "scope.connections:write", "status": "fail", "message": message,
            "fix": page}
