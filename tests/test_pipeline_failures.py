"""A message that fails inside the pipeline is never silent: its chat gets a notice (once,
through the outbox), the failure is logged, counted in the metrics and shown by `status`."""

from __future__ import annotations

import logging

import pytest

from chatkernel.core.health.report import render_status
from chatkernel.core.inbound.pipeline import FAILURE_NOTICE
from chatkernel.hookspecs import hookimpl
from chatkernel.sdk.models import InboundMessage, SendError
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio


class Exploding:
    """A plugin whose ``inbound_accept`` raises for a message that says "explode"."""

    @hookimpl
    def inbound_accept(self, message):
        if "explode" in message.text:
            raise RuntimeError("the policy plugin tripped over it")


def exploding_kernel(tmp_path):
    return KernelHarness(tmp_path, plugins=[("exploding", Exploding())])


async def receive(h, text, message_id):
    """What a receive loop does: hand the message to the kernel's receiver, which
    returns once it is journaled (the rest of the pipeline runs behind it)."""
    message = InboundMessage(channel="memory", account="main", chat_id="chat-1",
                             message_id=message_id, sender_id="user-1", text=text)
    assert await h.kernel.receiver(message) == "accepted"


def failures(h):
    return h.metric("chatkernel_inbound_failures_total", channel="memory", account="main")


async def test_a_failing_message_gets_a_notice_is_counted_logged_and_in_status(tmp_path,
                                                                              caplog):
    caplog.set_level(logging.ERROR, logger="chatkernel.inbound")
    async with exploding_kernel(tmp_path) as h:
        await receive(h, "please explode", "m1")
        await h.settle()
        assert h.channel.texts() == [FAILURE_NOTICE]
        assert failures(h) == 1
        [record] = [r for r in caplog.records if "failed in the pipeline" in r.getMessage()]
        assert record.exc_info and "tripped over it" in str(record.exc_info[1])

        # The chat goes on: the next message is answered as usual.
        await receive(h, "hello again", "m2")
        await h.settle()
        assert h.channel.texts() == [FAILURE_NOTICE, "hello again"]
        assert failures(h) == 1

        status = render_status((await h.kernel.health.snapshot()).model_dump(mode="json"))
        assert "Messages that failed in the pipeline (their chats were told):" in status
        [line] = [line for line in status.splitlines() if line.startswith("  memory:main: 1")]
        assert line.endswith("s ago: RuntimeError: the policy plugin tripped over it"), line


async def test_a_notice_that_cannot_be_sent_is_not_sent_again(tmp_path):
    async with exploding_kernel(tmp_path) as h:
        h.channel.fail_next = [SendError("Forbidden: bot was blocked by the user", status=403)]
        await receive(h, "explode", "m1")
        await h.settle()
        assert h.channel.texts() == [] and h.channel.fail_next == []
        assert await h.outbox_statuses() == ["failed"]
        assert failures(h) == 1


async def test_status_says_nothing_of_the_pipeline_when_nothing_failed(tmp_path):
    async with exploding_kernel(tmp_path) as h:
        await receive(h, "hello", "m1")
        await h.settle()
        assert failures(h) is None
        status = render_status((await h.kernel.health.snapshot()).model_dump(mode="json"))
        assert "failed in the pipeline" not in status
