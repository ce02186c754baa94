"""The kernel's channel contract suite, run unchanged against the fake Slack: once over
Socket Mode (the default), once over the Events API on the gateway's HTTP server."""

from __future__ import annotations

from chatkernel.testing import ChannelContract
from slack_adapters import SlackEventsAdapter, SlackSocketAdapter


class TestSlackSocketContract(ChannelContract):
    adapter_class = SlackSocketAdapter

    async def test_events_arrive_over_the_socket_and_are_acknowledged(self, contract_kernel):
        run = contract_kernel
        slack = run.adapter.slack
        await run.adapter.inject("D0DIRECT01", "hello sk01z", sender_id="U0USER0001")
        await run.wait_for_tokens("D0DIRECT01", ["sk01z"])
        await run.wait(lambda: all(e.acked for e in slack.envelopes),
                       what="every envelope acknowledged",
                       state=lambda: [(e.event_id, e.acked) for e in slack.envelopes])
        assert slack.calls_to("apps.connections.open")
        assert slack.dropped == []


class TestSlackEventsContract(ChannelContract):
    adapter_class = SlackEventsAdapter

    async def test_events_arrive_through_the_webhook(self, contract_kernel):
        run = contract_kernel
        slack = run.adapter.slack
        await run.adapter.inject("D0DIRECT01", "hello ev01z", sender_id="U0USER0001")
        await run.wait_for_tokens("D0DIRECT01", ["ev01z"])
        assert slack.calls_to("apps.connections.open") == []
        assert any(status == 200 for _, status, _ in slack.deliveries)
