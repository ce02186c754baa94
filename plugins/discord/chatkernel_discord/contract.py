"""The adapter the kernel's contract suite drives the fake platform with
(``tests/test_contract.py`` runs the suite with it).

It tells the suite how to start the fake, make a user write and read what the bot
sent. When you replace the fake with your platform's, keep this shape and change only
what the adapter calls; declare what your platform lacks (``supports_threads = False``...)
and the test about it is skipped, by name.
"""

from __future__ import annotations

from typing import Any

import chatkernel_discord
from chatkernel.testing import PlatformAdapter, fast_pacing
from chatkernel_discord.fake import DiscordPlatform


class DiscordAdapter(PlatformAdapter):
    """Drives :class:`DiscordPlatform` for the discord channel."""

    channel_plugin = chatkernel_discord
    channel_name = "discord"
    supports_revoke = True
    supports_chat_refusal = True
    non_message_events = ("edit", "join")

    def __init__(self) -> None:
        self.platform = DiscordPlatform()
        self._last: dict[str, Any] | None = None

    async def start(self) -> None:
        await self.platform.__aenter__()

    async def stop(self) -> None:
        await self.platform.__aexit__(None, None, None)

    def account_config(self) -> dict[str, Any]:
        return {"token": "test-token", "base_url": self.platform.base_url,
                "silent_after": 30}

    def channel_config(self) -> dict[str, Any]:
        return fast_pacing()  # faster pacing and retries than the real platform needs

    async def inject(self, chat_id: str, text: str, *, sender_id: str = "user-1",
                     sender_name: str = "", group: bool = False, mention: bool = False,
                     thread_id: str | None = None) -> None:
        self._last = self.platform.inject(chat_id, text, sender_id=sender_id,
                                          sender_name=sender_name, is_group=group,
                                          mentions_bot=mention, thread_id=thread_id)

    def sent_texts(self, chat_id: str, *, thread_id: str | None = None) -> list[str]:
        return self.platform.texts(chat_id, thread_id=thread_id)  # plain text: nothing to render

    def sent_media(self, chat_id: str) -> list[tuple[str, str | None]]:
        return self.platform.media(chat_id)

    def typing_count(self, chat_id: str) -> int:
        return self.platform.typing.count(chat_id)

    async def redeliver_last(self) -> None:
        assert self._last is not None, "nothing was injected yet"
        self.platform.redeliver(self._last)

    async def revoke_credentials(self) -> None:
        self.platform.revoke()

    async def refuse_chat(self, chat_id: str) -> None:
        self.platform.refuse_chat(chat_id)

    async def inject_own_message(self, chat_id: str, text: str) -> None:
        self.platform.inject(chat_id, text, sender_id=self.platform.bot_id)

    async def inject_non_message_event(self, kind: str, chat_id: str, *, sender_id: str,
                                       text: str) -> None:
        self.platform.inject(chat_id, text, sender_id=sender_id, kind=kind)
