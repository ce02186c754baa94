"""Delivery statuses a platform reports after a send (ChannelContext.report_delivery_status):
counted, and a late "failed" correlated with the payload it belongs to and surfaced as
a delivery failure (outbox, session log, metrics), as a failed send would be."""

from __future__ import annotations

import sqlite3

import pytest

from chatkernel.channels import Capabilities
from chatkernel.testing import KernelHarness, MemoryChannel
from chatkernel.testing.contract import wait_until

pytestmark = pytest.mark.anyio


def metric(kernel, name: str, **labels: str) -> float:
    kernel.metrics.sync()
    value = kernel.metrics.registry.get_sample_value(name, labels)
    return value or 0.0


async def test_a_late_failure_is_a_delivery_failure_of_its_payload(tmp_path, monkeypatch):
    monkeypatch.setattr(MemoryChannel, "capabilities", Capabilities(delivery_statuses=True))
    async with KernelHarness(tmp_path, config={"agent": {"kind": "echo"}}) as h:
        await h.channel.receive("hello there", chat_id="c1")
        await h.settle()
        (sent,) = h.channel.sent
        platform_id = "1"  # MemoryChannel's SendResult.message_id
        channel = h.channel
        assert await channel.context.report_delivery_status(platform_id, "sent")
        assert await channel.context.report_delivery_status(platform_id, "delivered")
        assert await channel.context.report_delivery_status(
            platform_id, "failed", reason="Message undeliverable", code=131026)
        await h.kernel.store.flush()

        labels = {"channel": "memory", "account": "main"}
        for status, count in (("sent", 1), ("delivered", 1), ("failed", 1), ("read", 0)):
            assert metric(h.kernel, "chatkernel_delivery_statuses_total", **labels,
                          status=status) == count
        assert metric(h.kernel, "chatkernel_send_failures_total", **labels) == 1

        entry = await h.kernel.store.outbox_by_platform_id("memory", "main", platform_id)
        assert entry is not None and entry.status == "failed"
        assert entry.error == "Message undeliverable (code 131026)"
        log = await h.kernel.store.read_log("memory:main:c1")
        notes = [e for e in log if e.role == "notification"]
        assert [n.text for n in notes] == [
            "delivery failed: chunk 1/1 was accepted, then not delivered: "
            "Message undeliverable (code 131026)"]
        assert notes[0].meta["platform_id"] == platform_id
        assert notes[0].meta["code"] == 131026
        assert len(h.channel.sent) == 1  # recording the failure sent nothing


async def test_a_failure_that_overtakes_its_sends_answer_still_finds_it(tmp_path, monkeypatch):
    """The platform may post a status before the send's answer is in (and its id
    recorded): the lookup waits a little for it."""
    monkeypatch.setattr(MemoryChannel, "capabilities", Capabilities(delivery_statuses=True))
    async with KernelHarness(tmp_path, config={"agent": {"kind": "echo"}}) as h:
        h.channel.send_delay = 0.3
        await h.channel.receive("hello", chat_id="c1")
        async def sending() -> bool:
            return await h.outbox_statuses() == ["sending"]

        # the send is under way; its answer is not in yet
        await wait_until(sending, timeout=5, what="the reply sending", interval=0.005)
        assert not h.channel.sent
        assert await h.channel.context.report_delivery_status("1", "failed", reason="late")
        assert h.channel.sent


async def test_a_status_for_a_message_it_never_sent_is_counted_and_logged(tmp_path, monkeypatch,
                                                                          caplog):
    monkeypatch.setattr(MemoryChannel, "capabilities", Capabilities(delivery_statuses=True))
    monkeypatch.setattr("chatkernel.core.outbound.delivery_statuses.LOOKUP_RETRIES", (0.01,))
    async with KernelHarness(tmp_path) as h:
        assert not await h.channel.context.report_delivery_status("wamid.unknown", "failed",
                                                          reason="gone")
        assert "wamid.unknown failed after it was sent: gone" in caplog.text
        with pytest.raises(ValueError, match="must be one of"):
            await h.channel.context.report_delivery_status("x", "bounced")


async def test_channels_without_late_statuses_keep_no_platform_ids(tmp_path):
    async with KernelHarness(tmp_path, config={"agent": {"kind": "echo"}}) as h:
        await h.channel.receive("hi", chat_id="c1")
        await h.settle()
        assert h.channel.sent
        await h.kernel.store.flush()
        assert await h.kernel.store.outbox_by_platform_id("memory", "main", "1") is None
    db = sqlite3.connect(tmp_path / "state.db")
    assert db.execute("SELECT COUNT(*) FROM outbox WHERE platform_id IS NOT NULL"
                      ).fetchone() == (0,)
