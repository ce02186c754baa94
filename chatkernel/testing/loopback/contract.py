"""The contract suite's adapter for the loopback platform (chatkernel.testing.contract).

The kernel runs the suite with it against :class:`LoopbackChannel`
(tests/test_contract_loopback.py); a plugin's own adapter has the same shape.
"""

from __future__ import annotations

from typing import Any

from chatkernel.testing.loopback.channel import LoopbackPlatform, LoopbackPlugin
from chatkernel.testing.sample.contract import SampleAdapter


class LoopbackAdapter(SampleAdapter):
    """The sample's adapter (the template's) for :class:`LoopbackChannel` on
    :class:`LoopbackPlatform`, with the loopback's live replies to watch."""

    channel_plugin = LoopbackPlugin
    channel_name = "loopback"

    def __init__(self) -> None:
        super().__init__()
        self.platform = LoopbackPlatform()

    def channel_config(self) -> dict[str, Any]:
        return {}  # the loopback channel's own limits are the tests' pace

    def live_timeline(self, chat_id: str) -> list[tuple[str, str]]:
        return [(kind, text) for chat, kind, text in self.platform.timeline if chat == chat_id]
