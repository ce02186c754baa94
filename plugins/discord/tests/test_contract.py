"""The kernel's channel contract suite, run unchanged against the fake platform, through
the adapter in ``chatkernel_discord/contract.py``."""

from __future__ import annotations

from chatkernel.testing import ChannelContract
from chatkernel_discord.contract import DiscordAdapter


class TestDiscordContract(ChannelContract):
    adapter_class = DiscordAdapter
