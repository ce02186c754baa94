"""The contract suite's adapter for the WeChat channel on :class:`FakeILink` (tests import it)."""

from __future__ import annotations

from typing import Any

import chatkernel_wechat
from chatkernel.testing import ChannelContract, PlatformAdapter, fast_pacing
from chatkernel_wechat.fake import WINDOW_MESSAGES, FakeILink

TOKEN = "0a1b2c3d@im.bot:contract-token-for-tests"


class WeChatAdapter(PlatformAdapter):
    """Drives :class:`FakeILink` for the WeChat channel. Direct chats only: a chat is
    the user who writes."""

    channel_plugin = chatkernel_wechat
    channel_name = "wechat"
    supports_groups = False
    supports_threads = False
    supports_revoke = True
    #: The user's quota spent: the reply is an 11th message, refused ``ret=-2``.
    supports_chat_refusal = True
    #: A message with no items, and one of an item type nobody reads.
    non_message_events = ("no_items", "unknown_item")

    def __init__(self) -> None:
        self.ilink = FakeILink(token=TOKEN, poll_timeout_ms=500)
        self._last: dict[str, Any] | None = None
        self._spent: set[str] = set()  # users whose quota refuse_chat spent

    async def start(self) -> None:
        await self.ilink.__aenter__()

    async def stop(self) -> None:
        await self.ilink.__aexit__(None, None, None)

    def account_config(self) -> dict[str, Any]:
        return {"bot_token": TOKEN, "api_base": self.ilink.base_url,
                "cdn_base": self.ilink.cdn_base, "bot_id": self.ilink.bot_id}

    def channel_config(self) -> dict[str, Any]:
        return fast_pacing()

    def user_id(self, n: int) -> str:
        return f"user{n}@im.wechat"

    def direct_chat(self, n: int) -> str:
        return self.user_id(n)

    async def inject(self, chat_id: str, text: str, *, sender_id: str = "user-1",
                     sender_name: str = "", group: bool = False, mention: bool = False,
                     thread_id: str | None = None) -> None:
        self._last = self.ilink.inject_message(sender_id, text)
        if sender_id in self._spent:
            # Ten bot messages went out since this message (a burst of proactive sends,
            # not through this kernel): the reply is the eleventh.
            self.ilink.peers[sender_id].sent_since = WINDOW_MESSAGES

    async def refuse_chat(self, chat_id: str) -> None:
        self._spent.add(chat_id)

    async def inject_own_message(self, chat_id: str, text: str) -> None:
        self.ilink.inject_message(chat_id, text, from_bot=True)

    async def inject_non_message_event(self, kind: str, chat_id: str, *, sender_id: str,
                                       text: str) -> None:
        items = [] if kind == "no_items" else [{"type": 99, "unknown_item": {"text": text}}]
        self.ilink.inject_message(sender_id, items=items)

    def sent_texts(self, chat_id: str, *, thread_id: str | None = None) -> list[str]:
        return [m.text for m in self.ilink.sent(chat_id) if m.text is not None]

    def live_timeline(self, chat_id: str) -> list[tuple[str, str]]:
        # GENERATING states are the preview; a FINISH is the message as it stays.
        return [("preview" if state == 1 else "final", text or "")
                for user, _, state, text in self.ilink.history if user == chat_id]

    def sent_media(self, chat_id: str) -> list[tuple[str, str | None]]:
        return [(m.kind, m.filename) for m in self.ilink.sent(chat_id) if m.kind != "text"]

    def typing_count(self, chat_id: str) -> int:
        return sum(1 for user, status in self.ilink.typing if user == chat_id and status == 1)

    async def redeliver_last(self) -> None:
        assert self._last is not None, "nothing was injected yet"
        self.ilink.redeliver(self._last)

    async def revoke_credentials(self) -> None:
        self.ilink.expire_session(TOKEN)
