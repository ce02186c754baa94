"""The channel contract suite, run against the loopback channel and its LoopbackPlatform.

This is what every channel plugin's test suite does with its own fake platform
(see docs/testing.md), through the sample's adapter (the template's). The loopback
platform has every optional capability, revoked credentials, non-message events and a
chat's refusal included; the last test here runs the suite again for an adapter that
declares some absent, to show they are skipped and named.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chatkernel.sdk.models import InboundMessage
from chatkernel.testing.contract import ChannelContract, open_contract_run
from chatkernel.testing.loopback.contract import LoopbackAdapter


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


@pytest.mark.slow
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
            supports_non_message_events = False
            supports_chat_refusal = False


        class TestPartialContract(ChannelContract):
            adapter_class = PartialAdapter
    """)
    result = pytester.runpytest_inprocess("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=15, skipped=6)  # with the pairing and group-policy tests
    for capability in ("threads", "media_out", "revoke", "own_messages",
                       "non_message_events", "chat_refusal"):
        result.stdout.fnmatch_lines(
            [f"SKIPPED*PartialAdapter declares supports_{capability} = False"])
