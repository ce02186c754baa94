"""A Bot API that hangs during the long poll: the poll is abandoned once it is past its
own timeout plus the kit's margin, health turns red saying so, and the loop polls again.
Before, a hung poll waited out its client's timeout (poll_timeout + 15 s) with /healthz
200 and nothing received."""

from __future__ import annotations

import time

import pytest

from chatkernel.channels import POLL_MARGIN_SECONDS
from chatkernel.testing import ManualClock
from chatkernel.testing import faulty_platform, open_contract_run
from telegram_adapters import TelegramAdapter

pytestmark = pytest.mark.anyio


async def test_a_poll_the_platform_holds_past_its_timeout_is_a_failed_call(tmp_path):
    clock = ManualClock()  # the loop's deadlines and backoffs move only when the test says
    async with TelegramAdapter() as adapter, faulty_platform(adapter) as proxies:
        (proxy,) = proxies
        async with open_contract_run(adapter, tmp_path / "kernel",
                                     channel_clock=clock) as run:
            run.account.runtime.loop_started(time.time())
            chat, user = adapter.direct_chat(1), adapter.user_id(1)
            poll_timeout = run.channel.config.poll_timeout

            def problems() -> list[str]:
                return run.health.account_snapshot(run.account, time.time()).problems

            await adapter.inject(chat, "warm up ph00z", sender_id=user)
            await run.wait_for_tokens(chat, ["ph00z"])
            await run.settle()

            proxy.hold()  # the Bot API takes the next poll and answers nothing
            await run.wait(lambda: proxy.held >= 1, what="a poll held")
            clock.advance(poll_timeout)  # within the poll's own timeout: not a failure yet
            assert problems() == []
            await adapter.inject(chat, "during ph01z", sender_id=user)
            clock.advance(POLL_MARGIN_SECONDS)  # past it, with the margin
            await run.wait(lambda: bool(problems()), what="the account red", state=problems)
            (problem,) = problems()
            assert "the long poll got no answer within" in problem, problem
            assert f"{poll_timeout + POLL_MARGIN_SECONDS:g}s" in problem, problem

            proxy.recover()  # the Bot API answers again: the next poll (after the
            clock.advance(60)  # backoff) gets the message sent meanwhile
            await run.wait_for_tokens(chat, ["ph01z"])
            await run.wait(lambda: not problems(), what="the account green",
                           state=problems)
            await run.settle()
            assert run.tokens_sent(chat, ["ph00z", "ph01z"]) == ["ph00z", "ph01z"]
