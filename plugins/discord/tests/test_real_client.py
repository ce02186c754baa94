"""The fake is faithful to a real client too: discord.py (a test dependency, the
``testing`` extra) logs in to the fake's REST API, finds its gateway with
``GET /gateway/bot``, identifies, and receives a user's message as discord.py's own
``on_message``."""

from __future__ import annotations

import logging
import warnings

import anyio
import pytest

with warnings.catch_warnings():  # discord.py imports audioop, deprecated in 3.11
    warnings.simplefilter("ignore", DeprecationWarning)
    import discord
    from discord.http import Route

from chatkernel_discord.fake import FakeDiscord

pytestmark = pytest.mark.anyio
USER = "300000000000000001"


@pytest.mark.slow
async def test_discord_py_connects_to_the_fake_and_receives_a_message(monkeypatch):
    logging.getLogger("discord").setLevel(logging.WARNING)
    async with FakeDiscord() as fake:
        monkeypatch.setattr(Route, "BASE", fake.api_base)
        intents = discord.Intents.default()
        intents.message_content = True
        # The sharded client asks GET /gateway/bot for its URL, as chatkernel does (the
        # plain one goes to Discord's default host).
        client = discord.AutoShardedClient(intents=intents)
        ready, received = anyio.Event(), anyio.Event()
        seen: list[tuple[str, int, bool]] = []

        @client.event
        async def on_ready() -> None:
            ready.set()

        @client.event
        async def on_message(message: discord.Message) -> None:
            seen.append((message.content, message.author.id, message.guild is None))
            received.set()

        try:
            await client.login(fake.bot.token)
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.connect)
                with anyio.fail_after(15):
                    await ready.wait()
                assert client.user is not None and str(client.user.id) == fake.bot.id
                fake.inject_message("400000000000000001", "hello from a user", author=USER,
                                    dm=True)
                with anyio.fail_after(15):
                    await received.wait()
                await client.close()
                tg.cancel_scope.cancel()
        finally:
            if not client.is_closed():
                await client.close()
        assert seen == [("hello from a user", int(USER), True)]
        (identify,) = fake.identifies()
        assert identify.identify["intents"] & (1 << 15)  # MESSAGE_CONTENT asked for
