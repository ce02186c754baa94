"""The platform adapters that drive the fake Slack for the contract suite and the other
tests: one over Socket Mode, one over the Events API."""

from __future__ import annotations

from typing import Any

import chatkernel_slack
from chatkernel.testing import PlatformAdapter, fast_pacing
from chatkernel_slack.fake import FakeSlack


class SlackSocketAdapter(PlatformAdapter):
    """Drives :class:`FakeSlack` for the Slack channel, over Socket Mode."""

    channel_plugin = chatkernel_slack
    channel_name = "slack"
    supports_revoke = True
    supports_chat_refusal = True
    #: An edit, a deletion, a join (as a message subtype and as its own event), a reaction.
    non_message_events = ("message_changed", "message_deleted", "channel_join",
                          "member_joined_channel", "reaction_added")
    mode = "socket"

    def __init__(self) -> None:
        self.slack = FakeSlack(mode=self.mode)
        self._last: list[str] = []
        #: More keys for the account's and the channel's tables (a test's own settings).
        self.account_extra: dict[str, Any] = {}
        self.channel_extra: dict[str, Any] = {}

    async def start(self) -> None:
        await self.slack.__aenter__()

    async def stop(self) -> None:
        await self.slack.__aexit__(None, None, None)

    def account_config(self) -> dict[str, Any]:
        return {"bot_token": self.slack.bot_token, "app_token": self.slack.app_token,
                "api_base": f"{self.slack.base_url}/api/", "ping_interval": 2,
                "silent_after": 15, **self.account_extra}

    def channel_config(self) -> dict[str, Any]:
        return {**fast_pacing(), **self.channel_extra}

    # Slack's ids: U… users, D… direct messages, C… channels; a thread is its parent's ts.
    def user_id(self, n: int) -> str:
        return f"U0USER{n:04d}"

    def direct_chat(self, n: int) -> str:
        return f"D0DIRECT{n:02d}"

    def group_chat(self, n: int) -> str:
        return f"C0GROUP{n:03d}"

    def thread_id(self, n: int) -> str:
        return f"1600000000.{n:06d}"

    def _emitted(self, before: int) -> None:
        self._last = [w["event_id"] for _, w in self.slack.emitted[before:]]

    async def inject(self, chat_id: str, text: str, *, sender_id: str = "U0USER0001",
                     sender_name: str = "", group: bool = False, mention: bool = False,
                     thread_id: str | None = None) -> None:
        before = len(self.slack.emitted)
        self.slack.inject_message(chat_id, text, user=sender_id, user_name=sender_name,
                                  thread_ts=thread_id, mention=mention)
        self._emitted(before)

    async def refuse_chat(self, chat_id: str) -> None:
        self.slack.refuse_posts(chat_id, "channel_not_found")

    async def inject_own_message(self, chat_id: str, text: str) -> None:
        self.slack.inject_message(chat_id, text, user=self.slack.bot_user,
                                  bot_id=self.slack.app.bot_id)

    async def inject_non_message_event(self, kind: str, chat_id: str, *, sender_id: str,
                                       text: str) -> None:
        slack = self.slack
        room = slack.channel(chat_id)
        earlier = slack.next_ts()
        original = {"type": "message", "user": sender_id, "text": text, "ts": earlier,
                    "team": slack.app.team_id}
        common = {"channel": chat_id, "channel_type": room["type"]}
        events = {
            "message_changed": {
                "type": "message", "subtype": "message_changed", "hidden": True,
                "ts": slack.next_ts(), **common,
                "message": {**original, "edited": {"user": sender_id, "ts": slack.next_ts()}},
                "previous_message": {**original, "text": "before the edit"}},
            "message_deleted": {
                "type": "message", "subtype": "message_deleted", "hidden": True,
                "ts": slack.next_ts(), "deleted_ts": earlier, **common,
                "previous_message": original},
            "channel_join": {
                "type": "message", "subtype": "channel_join", "user": sender_id,
                "text": f"<@{sender_id}> has joined the channel {text}", "ts": slack.next_ts(),
                **common},
            "member_joined_channel": {
                "type": "member_joined_channel", "user": sender_id, "channel": chat_id,
                "channel_type": "C", "team": slack.app.team_id},
            "reaction_added": {
                "type": "reaction_added", "user": sender_id, "reaction": "eyes",
                "item": {"type": "message", "channel": chat_id, "ts": earlier},
                "item_user": sender_id},
        }
        slack.inject_event(events[kind])

    def sent_texts(self, chat_id: str, *, thread_id: str | None = None) -> list[str]:
        return [m.plain_text for m in self.slack.sent(chat_id, thread_ts=thread_id)
                if not m.files]

    def live_timeline(self, chat_id: str) -> list[tuple[str, str]]:
        # Each message's last state is what stays (the answer); its earlier ones were a
        # live reply's preview. A deleted message was no answer.
        history = [(ts, text) for kind, chat, ts, text in self.slack.history
                   if chat == chat_id and kind != "delete"]
        gone = {m.ts for m in self.slack.sent(chat_id) if m.deleted}
        last = {ts: index for index, (ts, _) in enumerate(history)}
        return [("final" if last[ts] == index else "preview", text)
                for index, (ts, text) in enumerate(history) if ts not in gone]

    def sent_media(self, chat_id: str) -> list[tuple[str, str | None]]:
        return [("file", f.name) for m in self.slack.sent(chat_id) for f in m.files]

    def typing_count(self, chat_id: str) -> int:
        return sum(1 for s in self.slack.status_calls(chat_id) if s.status)

    async def redeliver_last(self) -> None:
        assert self._last, "nothing was injected yet"
        for event_id in self._last:
            self.slack.redeliver(event_id)

    async def revoke_credentials(self) -> None:
        self.slack.revoke()


class SlackEventsAdapter(SlackSocketAdapter):
    """The same over the Events API: the fake POSTs each event, signed, to the gateway's
    ``/slack/main/webhook``."""

    mode = "events"

    def __init__(self) -> None:
        super().__init__()
        # Slack retries three times; a restart here takes well under the ~10 s these add
        # up to, so an event sent while no gateway listens arrives after it.
        self.slack.events_retry_delays = (0.05, 0.1, 0.2) + (0.25,) * 40

    async def attach_gateway(self, url: str) -> None:
        self.slack.set_request_url(f"{url}/slack/main/webhook")  # a new address per start

    def account_config(self) -> dict[str, Any]:
        return {"bot_token": self.slack.bot_token, "signing_secret": self.slack.signing_secret,
                "mode": "events", "api_base": f"{self.slack.base_url}/api/",
                **self.account_extra}
