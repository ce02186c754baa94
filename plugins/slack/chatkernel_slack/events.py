"""Reading Slack's events: which ones are messages, their ids, their text and files.

Both transports carry the same Events API wrapper (``{"type": "event_callback",
"event_id", "team_id", "event": {...}}``): Socket Mode as an envelope's
``payload``, the Events API as the POST body. What is decided here:

- **One message, one id.** A message's id is ``<channel>:<ts>``: its ``ts`` is
  unique within its channel and is the same in every event about it. One
  @mention arrives twice — a ``message`` event and an ``app_mention`` event,
  in either order, with different event ids — and a redelivered envelope
  carries it again; with this id the kernel's journal takes it once, whichever
  comes first. (An id from ``event_id`` would answer the mention twice.)
- **What is a message.** ``message`` events without a subtype, and the
  subtypes a person writes (``file_share``, ``thread_broadcast``,
  ``me_message``); ``app_mention``. Edits (``message_changed``) and deletions
  (``message_deleted``) are not new messages: they are ignored, so an edited
  message is not answered again and a deleted one is not taken back. Joins,
  topics, pins and the other service subtypes are ignored too.
- **Bots.** Messages with a ``bot_id`` (or subtype ``bot_message``) are other
  bots' — ignored unless ``allow_bots`` — or this app's own: always ignored,
  so the bot never answers itself.
"""

from __future__ import annotations

import re
from typing import Any

#: ``message`` subtypes that are something a person wrote.
SPOKEN_SUBTYPES = frozenset({None, "file_share", "thread_broadcast", "me_message"})
MESSAGE_EVENTS = frozenset({"message", "app_mention"})
#: Channel types that are not a direct message with the bot.
_GROUP_TYPES = frozenset({"channel", "group", "mpim"})
_ENTITIES = (("&lt;", "<"), ("&gt;", ">"), ("&amp;", "&"))


def event_of(wrapper: Any) -> dict[str, Any] | None:
    """The inner event of an ``event_callback`` wrapper (None for anything else)."""
    if not isinstance(wrapper, dict) or wrapper.get("type") != "event_callback":
        return None
    event = wrapper.get("event")
    return event if isinstance(event, dict) else None


def message_event(wrapper: Any) -> dict[str, Any] | None:
    """The event, when it is a message someone wrote (see the module docstring)."""
    event = event_of(wrapper)
    if event is None or event.get("type") not in MESSAGE_EVENTS:
        return None
    if event.get("subtype") not in SPOKEN_SUBTYPES or event.get("hidden"):
        return None
    if not isinstance(event.get("channel"), str) or not isinstance(event.get("ts"), str):
        return None
    return event


def message_id(event: dict[str, Any]) -> str:
    """``<channel>:<ts>``, the same for every event about one message."""
    return f"{event['channel']}:{event['ts']}"


class RecentMessages:
    """The ids of the messages a transport journaled lately (the last ``size``), so the
    second event of a mention is known without a journal write: its twin is in already."""

    __slots__ = ("size", "_ids")

    def __init__(self, size: int = 10_000) -> None:
        self.size = size
        self._ids: dict[str, None] = {}

    def __contains__(self, message: str) -> bool:
        return message in self._ids

    def add(self, message: str) -> None:
        ids = self._ids
        ids[message] = None
        if len(ids) > self.size:
            del ids[next(iter(ids))]


def message_key(wrapper: Any) -> str | None:
    """The id of the message a wrapper's event is (None: the event is not a message)."""
    event = message_event(wrapper)
    return message_id(event) if event is not None else None


def is_group(event: dict[str, Any]) -> bool:
    """Whether the message is in a channel or group DM rather than a DM with the bot."""
    kind = event.get("channel_type")
    if kind is not None:
        return kind in _GROUP_TYPES
    # app_mention events carry no channel_type; DM channel ids start with D.
    return not str(event["channel"]).startswith("D")


def plain_text(text: str, bot_user: str | None) -> str:
    """The message's text as the agent reads it: a leading mention of the bot removed
    (so ``<@U123> !status`` is the command ``!status``), Slack's three escapes undone."""
    if bot_user:
        text = re.sub(rf"^\s*<@{re.escape(bot_user)}(?:\|[^>]*)?>[\s:,]*", "", text)
    for escaped, char in _ENTITIES:
        text = text.replace(escaped, char)
    return text


def mentions(text: str, bot_user: str | None) -> bool:
    return bool(bot_user) and f"<@{bot_user}" in text


def sender_name(event: dict[str, Any]) -> str:
    profile = event.get("user_profile")
    if isinstance(profile, dict):
        return str(profile.get("display_name") or profile.get("real_name")
                   or profile.get("name") or "")
    return ""


def media_kind(mimetype: str | None) -> str:
    """The kernel's kind for an inbound file, by its MIME type."""
    major = (mimetype or "").split("/", 1)[0]
    return major if major in ("image", "video", "audio") else "document"
