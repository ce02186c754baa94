"""A delivery that failed shows where people look: the session's history (naming the
message), the account's recent failures in `status` and `/status`, and the metrics."""

from __future__ import annotations

import logging

import pytest

from chatkernel.core.gateway.endpoints import render_status_page
from chatkernel.sdk.models import SendError
from chatkernel.core.health.report import render_health, render_status
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio


async def notifications(h, key="memory:main:chat-1"):
    return [e.text for e in await h.kernel.store.read_log(key, roles=("notification",))]


def undelivered(h, outcome):
    metrics = h.kernel.metrics
    return metrics.child(metrics.undelivered, "memory", "main", outcome)._value.get()


async def test_a_platform_failure_and_a_policy_block_are_in_history_status_and_metrics(
        tmp_path):
    async with KernelHarness(tmp_path) as h:
        h.channel.fail_next = [SendError("Forbidden: bot was blocked by the user", status=403)]
        await h.channel.receive("first question")
        await h.settle()
        record = await h.kernel.sessions.get("memory:main:chat-1")
        await h.kernel.sessions.update_settings(record, send="deny")
        await h.channel.receive("second question")
        await h.settle()
        assert h.channel.texts() == []
        assert await notifications(h) == [
            'delivery failed: chunk 1/1 "first question": Forbidden: bot was blocked by '
            'the user',
            'not sent: chunk 1/1 "second question": blocked by the send policy (this '
            "session's send setting)"]
        assert undelivered(h, "failed") == 1 and undelivered(h, "blocked") == 1

        snapshot = await h.kernel.health.snapshot()
        account = next(a for a in snapshot.accounts() if a.key == "memory:main")
        assert [(f.message, f.status, f.why) for f in account.recent_failures] == [
            ('"second question"', "failed", "policy"),
            ('"first question"', "failed", "platform")]
        data = snapshot.model_dump(mode="json")
        text = render_status(data)
        assert "Recent delivery failures:" in text
        assert ('memory:main:chat-1  part 1/1 "first question": failed (platform): '
                'Forbidden: bot was blocked by the user') in text
        assert "Recent delivery failures:" in render_health(data, verbose=True)
        page = render_status_page(snapshot)
        assert 'id="failures"' in page and "&quot;second question&quot;" in page
        rendered = h.kernel.metrics.render().decode()
        assert ('chatkernel_undelivered_total{account="main",channel="memory",'
                'outcome="blocked"} 1.0') in rendered


async def test_what_recovery_found_is_logged_counted_and_listed(tmp_path, caplog,
                                                                 outbox_left_mid_send):
    await outbox_left_mid_send(tmp_path)
    caplog.set_level(logging.INFO, logger="chatkernel.outbox")
    async with KernelHarness(tmp_path) as h:
        await h.settle()
        assert h.channel.texts() == ["never attempted"]
        assert ("outbox: recovered 1 unsent payload(s), sending them now; 1 were in flight "
                "when the gateway stopped (delivery unknown, not resent); 1 not sent after "
                "an earlier part of their reply") in caplog.text
        assert undelivered(h, "unknown") == 1 and undelivered(h, "skipped") == 1
        account = next(a for a in (await h.kernel.health.snapshot()).accounts()
                       if a.key == "memory:main")
        assert [(f.message, f.status, f.why) for f in account.recent_failures] == [
            ('"after the unknown one"', "failed", "earlier part"),
            ('"was in flight"', "unknown", "stopped")]
