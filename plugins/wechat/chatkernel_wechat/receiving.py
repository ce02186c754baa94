"""How a WeChat bot receives: iLink's ``getupdates`` long poll.

The cursor is iLink's ``get_updates_buf``; the server tells how long it holds a
poll (``longpolling_timeout_ms``), and the client waits a little longer than
that. Every call goes through the channel (``channel.call``), which refuses
calls while the session is paused after ``ret=-14``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from chatkernel.channels import PlatformError, Polled, Polling
from chatkernel_wechat.api import ILinkError

if TYPE_CHECKING:
    from chatkernel_wechat.channel import WeChatChannel

log = logging.getLogger("chatkernel.wechat")

TEXT_ITEM, IMAGE_ITEM, VOICE_ITEM, FILE_ITEM, VIDEO_ITEM = 1, 2, 3, 4, 5
#: Inbound item type -> (the item's field, the media kind, a file name when it has none).
INBOUND_MEDIA = {IMAGE_ITEM: ("image_item", "image", "image.jpg"),
                 VOICE_ITEM: ("voice_item", "voice", "voice.silk"),
                 FILE_ITEM: ("file_item", "file", "file"),
                 VIDEO_ITEM: ("video_item", "video", "video.mp4")}


class WeChatPolling(Polling):
    """``getupdates`` from the saved ``get_updates_buf``, after ``msg/notifystart``."""

    channel: "WeChatChannel"
    backoff = (2.0, 30.0)  # a failed poll waits 2 s, doubling to 30 s

    def __init__(self, channel: "WeChatChannel") -> None:
        super().__init__(channel)
        #: The long poll's client timeout: the server's ``longpolling_timeout_ms`` once said.
        self.poll_timeout = 35.0

    async def prepare(self) -> None:
        await self.channel.notify("msg/notifystart")

    async def poll(self, cursor: str | None) -> Polled:
        try:  # while paused (restarted in a pause too), the channel refuses it without a call
            reply = await self.channel.call("getupdates", {"get_updates_buf": cursor or ""},
                                            timeout=self.poll_timeout, long_poll=True)
        except PlatformError as exc:
            if exc.kind == "no_answer" and not isinstance(exc, ILinkError):
                return Polled([], None)  # the client's timeout: an empty answer
            raise
        server_ms = reply.get("longpolling_timeout_ms")
        if isinstance(server_ms, (int, float)) and server_ms > 0:
            self.poll_timeout = server_ms / 1000 + 5.0
        # The server never replays an old cursor: the kit saves this one only once
        # every message of the batch is journaled.
        return Polled(list(reply.get("msgs") or []), reply.get("get_updates_buf") or None)

    def event_chat(self, message: dict[str, Any]) -> Any:
        return message.get("from_user_id")

    def event_has_media(self, message: dict[str, Any]) -> bool:
        return any(item.get("type") in INBOUND_MEDIA for item in message.get("item_list") or ())

    def describe_event(self, message: dict[str, Any]) -> str:
        return f"message {message.get('message_id')} (seq {message.get('seq')})"
