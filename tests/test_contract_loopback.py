"""The channel contract suite, run against the loopback channel and its LoopbackPlatform.

This is what every channel plugin's test suite does with its own fake platform
(see docs/testing.md). The loopback platform has every optional capability,
revoked credentials included, but non-message events (its wire carries messages
only); the last test here runs the suite again for an adapter that declares some
absent, to show they are skipped and named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chatkernel.sdk.models import InboundMessage
from chatkernel.testing.contract import ChannelContract, PlatformAdapter, open_contract_run
from chatkernel.testing.loopback import LoopbackPlatform, LoopbackPlugin


class LoopbackAdapter(PlatformAdapter):
    """Drives :class:`LoopbackPlatform` for :class:`LoopbackChannel`."""

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
        update_id = self.platform.inject(chat_id, text, sender_id=sender_id,
                                         sender_name=sender_name, is_group=group,
                                         mentions_bot=mention, thread_id=thread_id)
        self._last = next(u for u in self.platform.injected if u["update_id"] == update_id)

    def sent_texts(self, chat_id: str, *, thread_id: str | None = None) -> list[str]:
        return self.platform.texts(chat_id, thread_id=thread_id)  # plain text: nothing to render

    def sent_media(self, chat_id: str) -> list[tuple[str, str | None]]:
        return self.platform.media(chat_id)

    def typing_count(self, chat_id: str) -> int:
        return self.platform.typing.count(chat_id)

    def live_timeline(self, chat_id: str) -> list[tuple[str, str]]:
        return [(kind, text) for chat, kind, text in self.platform.timeline if chat == chat_id]

    supports_revoke = True
    supports_non_message_events = False  # its wire carries messages only

    async def revoke_credentials(self) -> None:
        self.platform.revoked = True

    async def inject_own_message(self, chat_id: str, text: str) -> None:
        self.platform.inject(chat_id, text, sender_id=self.platform.bot_id)

    async def redeliver_last(self) -> None:
        assert self._last is not None, "nothing was injected yet"
        self.platform.redeliver(self._last["message_id"])


class TestLoopbackContract(ChannelContract):
    adapter_class = LoopbackAdapter


class TestLoopbackContractOnRedis(ChannelContract):
    """The whole contract again with the kernel on the Redis store: one instance that
    owns its account through a lease, takes its messages from the account's inbox, and
    recovers on a restart as on SQLite (docs/testing.md shows the same for a plugin)."""

    adapter_class = LoopbackAdapter

    @pytest.fixture(autouse=True)
    def _on_redis(self, redis_server, redis_prefix):
        self.store = {"backend": "redis", "url": redis_server, "prefix": redis_prefix}

    def contract_run(self, adapter, home, **options):
        extra = {**(options.pop("extra_config", None) or {}), "store": self.store}
        return open_contract_run(adapter, home, extra_config=extra, **options)


@pytest.mark.anyio
async def test_the_loop_delivers_through_the_kernels_receiver(tmp_path):
    async with LoopbackAdapter() as adapter, open_contract_run(adapter, tmp_path) as run:
        def elsewhere(message):
            raise AssertionError("kernel.deliver is not the path a gateway's loop takes")

        run.kernel.deliver = elsewhere
        await adapter.inject("dm-1", "hello rv01z")
        await run.wait_for_tokens("dm-1", ["rv01z"])
        # A batch goes through the receiver's many(), outcomes recorded.
        batch = [InboundMessage(channel="loopback", account="main", chat_id="dm-2",
                                message_id=f"b{n}", sender_id="user-2", text="rv02z")
                 for n in (1, 1)]
        assert await run.receiver.many(batch) == ["accepted", "duplicate"]
        await run.wait_for_tokens("dm-2", ["rv02z"])
        assert [(m.text, outcome) for m, outcome in run.deliveries] == [
            ("hello rv01z", "accepted"), ("rv02z", "accepted"), ("rv02z", "duplicate")]


pytest_plugins = ["pytester"]


def test_absent_capabilities_are_skipped_by_name_and_the_rest_still_runs(pytester):
    pytester.syspathinsert(str(Path(__file__).parent))
    pytester.makepyfile(test_partial="""
        from chatkernel.testing.contract import ChannelContract
        from test_contract_loopback import LoopbackAdapter


        class PartialAdapter(LoopbackAdapter):
            supports_threads = False
            supports_media_out = False
            supports_revoke = False
            supports_own_messages = False


        class TestPartialContract(ChannelContract):
            adapter_class = PartialAdapter
    """)
    result = pytester.runpytest_inprocess("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=13, skipped=6)
    for capability in ("threads", "media_out", "revoke", "own_messages",
                       "non_message_events", "chat_refusal"):
        result.stdout.fnmatch_lines(
            [f"SKIPPED*PartialAdapter declares supports_{capability} = False"])
