"""The kernel's channel contract suite, run unchanged against the fake Bot API."""

from __future__ import annotations

from typing import Any

import chatkernel_telegram
from chatkernel.testing.contract import ChannelContract, PlatformAdapter
from chatkernel_telegram.fake import FakeBotAPI

TOKEN = "123456:AAContractTokenForTestsOnly_abcdefgh"
MEDIA_KINDS = {"sendPhoto": "photo", "sendDocument": "document", "sendVideo": "video",
               "sendAudio": "audio", "sendVoice": "voice", "sendAnimation": "animation"}


class TelegramAdapter(PlatformAdapter):
    """Drives :class:`FakeBotAPI` for the Telegram channel."""

    channel_plugin = chatkernel_telegram
    channel_name = "telegram"
    supports_revoke = True

    def __init__(self) -> None:
        self.api = FakeBotAPI(token=TOKEN, username="chatkernel_bot")
        self._last: int | None = None

    async def start(self) -> None:
        await self.api.__aenter__()

    async def stop(self) -> None:
        await self.api.__aexit__(None, None, None)

    def account_config(self) -> dict[str, Any]:
        return {"bot_token": self.api.token, "api_base": self.api.base_url, "poll_timeout": 1}

    def channel_config(self) -> dict[str, Any]:
        return {"rate_limits": {"chat": "100/s", "group": "1000/min", "account": "1000/s"},
                "retry": {"attempts": 3, "base_delay_ms": 10, "jitter": 0}}

    # Telegram's ids: a private chat's id is the user's id; groups are negative.
    def user_id(self, n: int) -> str:
        return str(1000 + n)

    def direct_chat(self, n: int) -> str:
        return str(1000 + n)

    def group_chat(self, n: int) -> str:
        return str(-1001000000000 - n)

    def thread_id(self, n: int) -> str:
        return str(100 + n)

    async def inject(self, chat_id: str, text: str, *, sender_id: str = "user-1",
                     sender_name: str = "", group: bool = False, mention: bool = False,
                     thread_id: str | None = None) -> None:
        if mention:
            text = f"@{self.api.username} {text}"
        self._last = self.api.inject_message(
            int(chat_id), text, from_id=int(sender_id), from_first_name=sender_name or None,
            chat_type="supergroup" if group else "private",
            message_thread_id=int(thread_id) if thread_id else None,
            is_topic_message=thread_id is not None)

    def sent_texts(self, chat_id: str, *, thread_id: str | None = None) -> list[str]:
        return [m.plain_text or "" for m in self.api.sent(chat_id=int(chat_id))
                if m.method == "sendMessage"
                and (thread_id is None or m.message_thread_id == int(thread_id))]

    def sent_media(self, chat_id: str) -> list[tuple[str, str | None]]:
        return [(MEDIA_KINDS[m.method], m.files[0].filename if m.files else None)
                for m in self.api.sent(chat_id=int(chat_id)) if m.method in MEDIA_KINDS]

    def typing_count(self, chat_id: str) -> int:
        return sum(1 for a in self.api.chat_actions if a.chat_id == int(chat_id))

    async def redeliver_last(self) -> None:
        assert self._last is not None, "nothing was injected yet"
        self.api.inject_update(self.api.update(self._last))  # an unconfirmed update again

    async def revoke_credentials(self) -> None:
        self.api.revoke_token(self.api.token)


class TestTelegramContract(ChannelContract):
    adapter_class = TelegramAdapter
