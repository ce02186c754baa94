"""The adapter the kernel's contract suite drives the fake Discord with
(``tests/test_contract.py`` runs the suite with it).

Ids are Discord's shape (snowflakes); a direct chat is a DM channel, a group chat a text
channel of the fake's server, a thread a public thread under it. A message reaches the
bot only through a gateway session, as on Discord: :meth:`DiscordAdapter.inject` waits
until the bot has one (a message sent while a bot never connected is lost on Discord).
"""

from __future__ import annotations

from typing import Any

import chatkernel_discord
from chatkernel.testing import PlatformAdapter, fast_pacing
from chatkernel_discord.fake import FakeDiscord

USER, DM, CHANNEL, THREAD = (300_000_000_000_000_000, 400_000_000_000_000_000,
                             500_000_000_000_000_000, 600_000_000_000_000_000)


class DiscordAdapter(PlatformAdapter):
    """Drives :class:`FakeDiscord` for the discord channel."""

    channel_plugin = chatkernel_discord
    channel_name = "discord"
    supports_revoke = True
    supports_chat_refusal = True
    #: An edit, a delete, someone typing, and a system message (a member joined).
    non_message_events = ("MESSAGE_UPDATE", "MESSAGE_DELETE", "TYPING_START", "USER_JOIN")

    def __init__(self) -> None:
        self.discord = FakeDiscord()
        self._last: dict[str, Any] | None = None
        self._since = 0  # the fake's connections before the latest kernel started
        #: More keys for the account's table, and the channel's, from a test.
        self.account_extra: dict[str, Any] = {}
        self.channel_extra: dict[str, Any] = {}

    async def start(self) -> None:
        await self.discord.__aenter__()
        # The suite starts kernels one after another on one fake within seconds; the
        # IDENTIFY pacing (max_concurrency per 5 s) is tested in test_gateway.py.
        self.discord.bot.max_concurrency = 16

    async def attach_gateway(self, url: str) -> None:
        # A kernel starts: what is sent from now on goes to the session it identifies
        # or resumes, not to one an earlier kernel left (a new IDENTIFY ends that one).
        self._since = len(self.discord.connections)
        await super().attach_gateway(url)

    async def stop(self) -> None:
        await self.discord.__aexit__(None, None, None)

    def account_config(self) -> dict[str, Any]:
        return {"token": self.discord.bot.token, "api_base": self.discord.api_base,
                **self.account_extra}

    def channel_config(self) -> dict[str, Any]:
        return {**fast_pacing(), **self.channel_extra}

    def user_id(self, n: int) -> str:
        return str(USER + n)

    def direct_chat(self, n: int) -> str:
        return str(DM + n)

    def group_chat(self, n: int) -> str:
        return str(CHANNEL + n)

    def thread_id(self, n: int) -> str:
        return str(THREAD + n)

    async def connected(self) -> None:
        """Wait until the bot has a gateway session (what it is sent before is lost):
        one the latest kernel identified or resumed once it started."""
        await self.discord.wait_until(lambda: any(
            c.session is not None and not c.session.invalid
            for c in self.discord.connections[self._since:]))

    async def inject(self, chat_id: str, text: str, *, sender_id: str = "user-1",
                     sender_name: str = "", group: bool = False, mention: bool = False,
                     thread_id: str | None = None) -> None:
        await self.connected()
        if thread_id is not None:
            self._last = self.discord.inject_message(thread_id, text, author=sender_id,
                                                     name=sender_name, thread_of=chat_id,
                                                     mention=mention)
        else:
            self._last = self.discord.inject_message(chat_id, text, author=sender_id,
                                                     name=sender_name, dm=not group,
                                                     mention=mention)

    def sent_texts(self, chat_id: str, *, thread_id: str | None = None) -> list[str]:
        return self.discord.texts(thread_id or chat_id)

    def sent_media(self, chat_id: str) -> list[tuple[str, str | None]]:
        return [("file", item["filename"]) for message in self.discord.sent(chat_id)
                if not message.deleted for item in message.attachments]

    def typing_count(self, chat_id: str) -> int:
        return self.discord.typing.count(chat_id)

    def live_timeline(self, chat_id: str) -> list[tuple[str, str]]:
        # Each message's last state is what stays (the answer); its earlier ones were a
        # live reply's preview. A deleted message was no answer.
        history = [(mid, text) for channel, mid, text, kind in self.discord.history
                   if channel == chat_id and kind != "delete"]
        gone = {m.id for m in self.discord.sent(chat_id) if m.deleted}
        last = {mid: index for index, (mid, _) in enumerate(history)}
        return [("final" if last[mid] == index else "preview", text)
                for index, (mid, text) in enumerate(history) if mid not in gone]

    async def redeliver_last(self) -> None:
        assert self._last is not None, "nothing was injected yet"
        self.discord.redeliver(self._last)

    async def revoke_credentials(self) -> None:
        self.discord.revoke()

    async def refuse_chat(self, chat_id: str) -> None:
        self.discord.refuse_chat(chat_id)

    async def inject_own_message(self, chat_id: str, text: str) -> None:
        await self.connected()
        self.discord.inject_message(chat_id, text, author=self.discord.bot.id, dm=True,
                                    dm_user=self.user_id(1))

    async def inject_non_message_event(self, kind: str, chat_id: str, *, sender_id: str,
                                       text: str) -> None:
        await self.connected()
        discord = self.discord
        if kind == "USER_JOIN":
            discord.inject_message(chat_id, text, author=sender_id, dm=True, kind=7)
            return
        channel = discord.dm_channel(discord.bot, sender_id, chat_id)["id"]
        if kind == "MESSAGE_UPDATE":
            data: dict[str, Any] = {"id": discord.new_id(), "channel_id": channel,
                                    "content": text, "author": discord.user(sender_id),
                                    "edited_timestamp": "2024-01-15T12:00:00+00:00"}
        elif kind == "MESSAGE_DELETE":
            data = {"id": discord.new_id(), "channel_id": channel}
        else:
            data = {"channel_id": channel, "user_id": sender_id, "timestamp": 1705320000}
        discord.inject_event(kind, data)
