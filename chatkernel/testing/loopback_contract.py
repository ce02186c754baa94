"""The contract suite's adapter for the loopback platform (chatkernel.testing.contract).

The kernel runs the suite with it against :class:`LoopbackChannel`
(tests/test_contract_loopback.py), and a channel written against the earlier contract
too (tests/test_legacy_channel.py); a plugin's own adapter has the same shape.
"""

from __future__ import annotations

from typing import Any

from chatkernel.testing.contract import PlatformAdapter
from chatkernel.testing.loopback import LoopbackPlatform, LoopbackPlugin


class LoopbackAdapter(PlatformAdapter):
    """Drives :class:`LoopbackPlatform` for :class:`LoopbackChannel` in the contract suite
    (chatkernel.testing.contract): the kernel's own run of it, and a sample adapter."""

    channel_plugin = LoopbackPlugin
    channel_name = "loopback"

    def __init__(self) -> None:
        self.platform = LoopbackPlatform()
        self._last: dict[str, Any] | None = None

    async def start(self) -> None:
        await self.platform.__aenter__()

    async def stop(self) -> None:
        await self.platform.__aexit__(None, None, None)

    def account_config(self) -> dict[str, Any]:
        return {"base_url": self.platform.url, "poll_timeout": 0.25}

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

    def live_timeline(self, chat_id: str) -> list[tuple[str, str]]:
        return [(kind, text) for chat, kind, text in self.platform.timeline if chat == chat_id]

    supports_revoke = True
    supports_non_message_events = False  # the template's own contract run has them

    async def revoke_credentials(self) -> None:
        self.platform.revoke()

    async def inject_own_message(self, chat_id: str, text: str) -> None:
        self.platform.inject(chat_id, text, sender_id=self.platform.bot_id)

    async def redeliver_last(self) -> None:
        assert self._last is not None, "nothing was injected yet"
        self.platform.redeliver(self._last)
