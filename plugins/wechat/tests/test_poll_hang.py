"""An iLink gateway that hangs during the long poll: the poll is abandoned once it is
past the wait the server named (``longpolling_timeout_ms``) plus the kit's margin,
health turns red saying so, and the loop polls again. Before, the channel read its
client's timeout as an empty answer: a hung gateway left /healthz 200 and nothing
received, poll after poll."""

from __future__ import annotations

import time

import pytest

from chatkernel.channels import POLL_MARGIN_SECONDS
from chatkernel.testing import ManualClock, faulty_platform, open_contract_run
from chatkernel_wechat.contract import WeChatAdapter

pytestmark = pytest.mark.anyio


async def test_a_poll_the_gateway_holds_past_its_wait_is_a_failed_call(tmp_path):
    clock = ManualClock()  # the loop's deadlines and backoffs move only when the test says
    async with WeChatAdapter() as adapter, faulty_platform(adapter) as proxies:
        (proxy,) = proxies  # the API and the CDN share the fake's one address
        async with open_contract_run(adapter, tmp_path / "kernel",
                                     channel_clock=clock) as run:
            run.account.runtime.loop_started(time.time())
            user = adapter.user_id(1)
            server_wait = adapter.ilink.poll_timeout_ms / 1000  # what getupdates says

            def problems() -> list[str]:
                return run.health.account_snapshot(run.account, time.time()).problems

            await adapter.inject(user, "warm up wh00z", sender_id=user)
            await run.wait_for_tokens(user, ["wh00z"])  # a poll answered: the wait is said
            await run.settle()

            proxy.hold()  # the gateway takes the next poll and answers nothing
            await run.wait(lambda: proxy.held >= 1, what="a poll held")
            clock.advance(server_wait)  # within the server's own wait: not a failure yet
            assert problems() == []
            await adapter.inject(user, "during wh01z", sender_id=user)
            clock.advance(POLL_MARGIN_SECONDS)  # past it, with the margin
            await run.wait(lambda: bool(problems()), what="the account red", state=problems)
            (problem,) = problems()
            assert "the long poll got no answer within" in problem, problem
            assert f"{server_wait + POLL_MARGIN_SECONDS:g}s" in problem, problem

            proxy.recover()  # the gateway answers again: the next poll (after the
            clock.advance(60)  # backoff) gets the message sent meanwhile
            await run.wait_for_tokens(user, ["wh01z"])
            await run.wait(lambda: not problems(), what="the account green",
                           state=problems)
            await run.settle()
            assert run.tokens_sent(user, ["wh00z", "wh01z"]) == ["wh00z", "wh01z"]
