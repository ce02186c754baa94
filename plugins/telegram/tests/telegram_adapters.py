"""The contract suite's adapter for the Telegram channel on :class:`FakeBotAPI`, long
polling (test_contract.py runs it, and tests that put faults around it reuse it)."""

from __future__ import annotations

import time
from typing import Any

import chatkernel_telegram
from chatkernel.testing import PlatformAdapter, fast_pacing
from chatkernel_telegram.fake import FakeBotAPI

TOKEN = "123456:AAContractTokenForTestsOnly_abcdefgh"
MEDIA_KINDS = {"sendPhoto": "photo", "sendDocument": "document", "sendVideo": "video",
               "sendAudio": "audio", "sendVoice": "voice", "sendAnimation": "animation"}


class TelegramAdapter(PlatformAdapter):
    """Drives :class:`FakeBotAPI` for the Telegram channel, long polling."""

    channel_plugin = chatkernel_telegram
    channel_name = "telegram"
    supports_revoke = True
    supports_chat_refusal = True
    #: An edit, the user blocking the bot, a service message (a pinned message).
    non_message_events = ("edited_message", "my_chat_member", "pinned_message")

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
        pacing = fast_pacing()
        pacing["rate_limits"]["group"] = "1000/min"  # Telegram paces groups of their own
        return pacing

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

    async def inject_own_message(self, chat_id: str, text: str) -> None:
        self.api.inject_message(int(chat_id), text, from_bot=True)

    async def refuse_chat(self, chat_id: str) -> None:
        self.api.block_chat(int(chat_id))  # 403: bot was blocked by the user

    async def inject_non_message_event(self, kind: str, chat_id: str, *, sender_id: str,
                                       text: str) -> None:
        now = int(time.time())
        user = {"id": int(sender_id), "is_bot": False, "first_name": "User"}
        chat = {"id": int(chat_id), "type": "private", "first_name": "User"}
        # Message ids no message of the test takes, so no dedupe can hide an event.
        earlier = {"message_id": 900_001, "from": user, "chat": chat, "date": now - 60,
                   "text": text}
        bot = self.api.bot_user()
        events = {
            "edited_message": {"edited_message": {**earlier, "edit_date": now}},
            "my_chat_member": {"my_chat_member": {
                "chat": chat, "from": user, "date": now,
                "old_chat_member": {"status": "member", "user": bot},
                "new_chat_member": {"status": "kicked", "user": bot, "until_date": 0}}},
            "pinned_message": {"message": {"message_id": 900_002, "from": user, "chat": chat,
                                           "date": now, "pinned_message": earlier}},
        }
        self.api.inject_update(events[kind])

    def sent_texts(self, chat_id: str, *, thread_id: str | None = None) -> list[str]:
        return [m.plain_text or "" for m in self.api.sent(chat_id=int(chat_id))
                if m.method == "sendMessage"
                and (thread_id is None or m.message_thread_id == int(thread_id))]

    def live_timeline(self, chat_id: str) -> list[tuple[str, str]]:
        # A private chat's live reply is drafts, then the answer's messages.
        kinds = {"draft": "preview", "message": "final", "edit": "final"}
        return [(kinds[kind], text) for kind, chat, text in self.api.history
                if chat == int(chat_id) and kind in kinds]

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
