"""The runs the plugin's tests share: a kernel with the Discord channel against a fresh
fake, the same with its gateway up, a channel made by hand, the replies in a chat."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chatkernel.channels import Account
from chatkernel.testing import ManualClock, open_contract_run
from chatkernel_discord.channel import DiscordAccount, DiscordChannel
from chatkernel_discord.contract import DiscordAdapter
from chatkernel_discord.fake import FakeDiscord

USER = "300000000000000001"


@contextlib.asynccontextmanager
async def discord_run(tmp_path: Path, *, account=None, channel=None, accounts=None,
                      clock=None, pacing=None, allow_from=("*",)):
    """A kernel with the Discord channel against a fresh fake (an open_contract_run);
    ``accounts``: more accounts beside ``main`` (their loops are the test's to start)."""
    async with DiscordAdapter() as adapter:
        adapter.account_extra.update(account or {})
        adapter.channel_extra.update(channel or {})
        extra = None
        if accounts:
            section = {**adapter.channel_config(), "accounts": {
                "main": {**adapter.account_config(), "allow_from": list(allow_from)},
                **{name: {"api_base": adapter.discord.api_base, **table}
                   for name, table in accounts.items()}}}
            extra = {"channels": {"discord": section}}
        async with open_contract_run(adapter, tmp_path / "kernel", allow_from=allow_from,
                                     extra_config=extra, channel_clock=clock,
                                     pacing=pacing) as run:
            yield run


@dataclass
class Up:
    """A Discord run whose gateway is up: a DM from ``USER`` in :attr:`chat`, carrying
    the token :attr:`first`, was answered."""

    run: Any
    chat: str
    first: str = "up01z"

    @property
    def adapter(self) -> DiscordAdapter:
        return self.run.adapter

    @property
    def discord(self) -> FakeDiscord:
        return self.run.adapter.discord

    @property
    def gateway(self) -> Any:
        """The channel's gateway connection."""
        return self.run.channel.gateway


@contextlib.asynccontextmanager
async def gateway_up(tmp_path: Path, *, clock: ManualClock | None = None
                     ) -> AsyncIterator[Up]:
    """A :func:`discord_run` whose gateway is up: a first DM answered. With ``clock``,
    the channel's timers and the fake's rate limits run on it."""
    async with discord_run(tmp_path, clock=clock) as run:
        if clock is not None:
            run.adapter.discord.rates.clock = clock.monotonic
        up = Up(run, run.adapter.direct_chat(1))
        await up.adapter.inject(up.chat, f"before {up.first}", sender_id=USER)
        await run.wait_for_tokens(up.chat, [up.first])
        yield up


def make_channel(discord: FakeDiscord, **config) -> DiscordChannel:
    settings = {"token": discord.bot.token, "api_base": discord.api_base, **config}
    return DiscordChannel(Account(channel_name="discord", name="main",
                                  config=DiscordAccount(**settings)))


def replies(run, chat: str, token: str, thread: str | None = None) -> list[str]:
    return [t for t in run.adapter.sent_texts(chat, thread_id=thread) if token in t]
