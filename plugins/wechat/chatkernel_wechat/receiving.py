"""How a WeChat bot receives: iLink's ``getupdates`` long poll.

The cursor is iLink's ``get_updates_buf``; the server tells how long it holds a
poll (``longpolling_timeout_ms``; 35 s until it says). That is the poll's wait
(:attr:`WeChatPolling.poll_wait`): the kit abandons a poll still unanswered
``POLL_MARGIN_SECONDS`` past it as a hung gateway, and the client's own timeout is
only a backstop beyond that. Every call goes through the channel
(``channel.call``), which refuses calls while the session is paused after
``ret=-14``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from chatkernel.channels import Polled, Polling
from chatkernel_wechat.api import TIMEOUTS

if TYPE_CHECKING:
    from chatkernel_wechat.channel import WeChatChannel

log = logging.getLogger("chatkernel.wechat")

TEXT_ITEM, IMAGE_ITEM, VOICE_ITEM, FILE_ITEM, VIDEO_ITEM = 1, 2, 3, 4, 5
#: Inbound item type -> (the item's field, the media kind, a file name when it has none).
INBOUND_MEDIA = {IMAGE_ITEM: ("image_item", "image", "image.jpg"),
                 VOICE_ITEM: ("voice_item", "voice", "voice.silk"),
                 FILE_ITEM: ("file_item", "file", "file"),
                 VIDEO_ITEM: ("video_item", "video", "video.mp4")}
#: The client's timeout is this long past the poll's wait: the kit's deadline
#: (``POLL_MARGIN_SECONDS`` past it) comes first, so a hung gateway is a failed call.
CLIENT_TIMEOUT_MARGIN = 15.0


class WeChatPolling(Polling):
    """``getupdates`` from the saved ``get_updates_buf``, after ``msg/notifystart``."""

    channel: "WeChatChannel"
    backoff = (2.0, 30.0)  # a failed poll waits 2 s, doubling to 30 s

    def __init__(self, channel: "WeChatChannel") -> None:
        super().__init__(channel)
        #: How long the server holds a poll: its ``longpolling_timeout_ms`` once said,
        #: Tencent's client's 35 s until then.
        self.server_wait = TIMEOUTS["getupdates"]

    @property
    def poll_wait(self) -> float:
        """The server's hold (WeChat has no ``poll_timeout`` setting): a poll unanswered
        ``POLL_MARGIN_SECONDS`` past it is a hung gateway, abandoned by the kit."""
        return self.server_wait

    async def prepare(self) -> None:
        await self.channel.notify("msg/notifystart")

    async def poll(self, cursor: str | None) -> Polled:
        # While paused (restarted in a pause too), the channel refuses it without a call.
        # Tencent's client makes its timeout the server's hold and reads running out as
        # an empty answer; here the kit's deadline comes first, and a poll that runs out
        # is a failed call: the gateway did not answer within the wait it named.
        reply = await self.channel.call("getupdates", {"get_updates_buf": cursor or ""},
                                        timeout=self.poll_wait + CLIENT_TIMEOUT_MARGIN,
                                        long_poll=True)
        server_ms = reply.get("longpolling_timeout_ms")
        if isinstance(server_ms, (int, float)) and not isinstance(server_ms, bool) \
                and server_ms > 0:
            self.server_wait = server_ms / 1000
        # The server never replays an old cursor: the kit saves this one only once
        # every message of the batch is journaled.
        return Polled(list(reply.get("msgs") or []), reply.get("get_updates_buf") or None)

    def event_chat(self, message: dict[str, Any]) -> Any:
        return message.get("from_user_id")

    def event_has_media(self, message: dict[str, Any]) -> bool:
        return any(item.get("type") in INBOUND_MEDIA for item in message.get("item_list") or ())

    def describe_event(self, message: dict[str, Any]) -> str:
        return f"message {message.get('message_id')} (seq {message.get('seq')})"
