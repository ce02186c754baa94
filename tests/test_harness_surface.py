"""What a test reads of health and scale-out through the harness (``h.health``,
``h.owns``), the stable surface, rather than through ``h.kernel``."""

from __future__ import annotations

import dataclasses
import time

import anyio
import pytest

from chatkernel.channels import InboundMessage, SendError
from chatkernel.testing import KernelHarness

pytestmark = pytest.mark.anyio


async def test_the_harness_probes_and_snapshots_through_h_health(tmp_path):
    async with KernelHarness(tmp_path) as h:
        result = (await h.health.probe())["memory:main"]
        assert result.ok and result.detail == "memory"
        snapshot = await h.health.snapshot()
        account = snapshot.channels["memory"].accounts["main"]
        assert account.probe is not None and account.probe.ok
        one = h.health.account_snapshot(h.account("memory"), time.time())
        assert one.key == "memory:main" and one.probe is not None


async def test_alone_on_its_store_the_harness_owns_every_account(tmp_path):
    async with KernelHarness(tmp_path) as h:
        assert h.owns("memory:main")


async def test_on_a_shared_store_only_the_lease_holder_owns_the_account(
        tmp_path, redis_server, redis_prefix):
    config = {"store": {"backend": "redis", "url": redis_server, "prefix": redis_prefix,
                        "lease_seconds": 30},
              "heartbeat": {"every": "0"}}
    async with KernelHarness(tmp_path / "first", config=config) as first:
        assert first.owns("memory:main")
        async with KernelHarness(tmp_path / "second", config=config) as second:
            assert not second.owns("memory:main")  # the first holds its lease
            assert first.owns("memory:main")


# -- the verbs a plugin's tests drive the kernel with -------------------------------------------


async def test_the_harness_names_an_account_and_its_workspace(tmp_path):
    async with KernelHarness(tmp_path) as h:
        account = h.account("memory")
        assert account.key == "memory:main" and account.channel is h.channel
        assert account.runtime.state == "running"
        assert h.workspace == tmp_path / "workspace"


async def test_a_proactive_text_is_sent_and_its_status_read_by_the_platform_id(tmp_path):
    async with KernelHarness(tmp_path) as h:
        # As a platform that reports each message's fate later (the outbox keeps its id).
        h.channel.capabilities = dataclasses.replace(h.channel.capabilities,
                                                     delivery_statuses=True)
        assert await h.send_text("memory", "chat-9", "**hello**") is not None
        await h.outbox_idle()
        [sent] = h.channel.sent
        assert sent.route.chat_id == "chat-9" and not sent.route.is_group
        assert sent.text == "**hello**"  # the memory channel renders no markup
        await h.send_text("memory", "group-1", "to the group", is_group=True, fmt="plain")
        await h.settle()
        assert h.channel.sent[1].route.is_group
        assert await h.sent_status("memory", "1") == "sent"
        assert await h.sent_status("memory", "no-such-id") is None


async def test_a_failed_send_is_noted_in_the_session_log(tmp_path):
    config = {"channels": {"memory": {"retry": {"attempts": 1},
                                      "accounts": {"main": {"allow_from": ["*"]}}}}}
    async with KernelHarness(tmp_path, config=config) as h:
        h.channel.fail_next.append(SendError("the chat is gone"))
        await h.send_text("memory", "chat-2", "hello")
        await h.settle()
        notes = await h.session_log("memory:main:chat-2", roles=("notification",))
        assert len(notes) == 1 and "the chat is gone" in notes[0].text, notes
        assert await h.sent_status("memory", "1") is None  # never sent: no platform id


async def test_a_turn_leaves_its_session_its_log_and_its_route(tmp_path):
    async with KernelHarness(tmp_path) as h:
        await h.channel.receive("hi there", chat_id="chat-3")
        await h.settle()
        assert await h.session_keys() == ["memory:main:chat-3"]
        log = await h.session_log("memory:main:chat-3")
        assert [entry.role for entry in log][:1] == ["user"] and log[0].text == "hi there"
        route = await h.session_route("memory:main:chat-3")
        assert route is not None and route.chat_id == "chat-3"
        assert await h.session_route("memory:main:nobody") is None


async def test_a_receive_loop_of_the_tests_making_delivers_to_the_kernel(tmp_path):
    config = {"channels": {"memory": {"accounts": {"main": {"allow_from": ["*"]},
                                                   "second": {"allow_from": ["*"]}}}}}
    async with KernelHarness(tmp_path, config=config) as h:
        second = h.account_channel("second")
        async with anyio.create_task_group() as tg:
            tg.start_soon(h.receive_loop, "memory", "second")
            await anyio.sleep(0)  # the loop's task starts: it hands the channel the receiver
            # The receiver journals the message and answers at once ("accepted"); the
            # harness's own attachment runs the whole pipeline first ("started").
            assert await second.receive("via the loop", chat_id="c1") == "accepted"
            await second.wait_for_sent(1)
            message = InboundMessage(channel="memory", account="second", chat_id="c2",
                                     message_id="x1", sender_id="user-1", text="direct")
            assert await h.receiver(message) == "accepted"
            assert await h.receiver(message) == "duplicate"
            await second.wait_for_sent(2)
            tg.cancel_scope.cancel()


async def test_a_metric_counted_on_the_hot_path_is_read_as_a_scrape_shows_it(tmp_path):
    async with KernelHarness(tmp_path) as h:
        await h.channel.receive("hi")
        await h.settle()
        assert h.metric("chatkernel_messages_in_total", channel="memory",
                        account="main") == 1
