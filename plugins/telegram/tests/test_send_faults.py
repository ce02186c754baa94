"""Sending to the fake Bot API through network faults: trips that vary while it enforces
Telegram's limits (the test counts 429s, it does not time anything), and a Bot API that
cannot be reached."""

from __future__ import annotations

import logging
import random

import anyio
import pytest

import chatkernel_telegram
from chatkernel.testing import FaultProxy, KernelHarness, free_port
from chatkernel_telegram.fake import FakeBotAPI

pytestmark = pytest.mark.anyio

TOKEN = "123456:AAExampleTokenForTestsOnly_abcdefghij"


@pytest.mark.slow
async def test_a_broadcast_through_a_jittered_network_draws_no_429(tmp_path):
    rng = random.Random(20)
    chats = [100 + n for n in range(50)] + [-(500 + n) for n in range(10)]  # 10 groups
    per_chat = 3
    async with FakeBotAPI(token=TOKEN, username="chatkernel_bot") as api:
        api.enforce_limits(per_bot_per_second=30, per_chat_per_second=1,
                           per_group_per_minute=20)
        api.latency = 0.01
        # Half the requests take 100 ms longer to arrive than the others (a congested
        # link, a retransmit), and answers 0-20 ms to come back: far more variation
        # than any margin a limiter counting at send time could add.
        def there() -> float:
            return rng.uniform(0, 0.01) + (0.1 if rng.random() < 0.5 else 0.0)

        async with FaultProxy(api.base_url, there=there,
                              back=lambda: rng.uniform(0, 0.02)) as proxy:
            config = {"channels": {"telegram": {"accounts": {"main": {
                "bot_token": api.token, "api_base": proxy.url, "allow_from": ["*"]}}}}}
            async with KernelHarness(tmp_path, config=config,
                                     plugins=[("telegram", chatkernel_telegram)]) as h:
                for index in range(per_chat):  # the limits Telegram's channel declares
                    for chat in chats:
                        await h.send_text("telegram", str(chat), f"{chat} #{index}",
                                          is_group=chat < 0, fmt="plain")
                with anyio.fail_after(120):
                    await h.outbox_idle()
                statuses = set(await h.outbox_statuses())
        assert api.throttled == 0
        assert statuses == {"sent"}
        for chat in chats:
            assert [m.text for m in api.sent(chat_id=chat)] == [
                f"{chat} #{index}" for index in range(per_chat)]


async def test_an_unreachable_bot_api_holds_the_send_and_nothing_names_the_token(tmp_path,
                                                                                caplog):
    caplog.set_level(logging.DEBUG)
    closed_port = free_port()
    config = {"channels": {"telegram": {
        "retry": {"base_delay_ms": 10, "jitter": 0, "unreachable_max_age": "300ms"},
        "accounts": {"main": {"bot_token": TOKEN, "api_base": f"http://127.0.0.1:{closed_port}",
                              "allow_from": ["*"]}}}}}
    async with KernelHarness(tmp_path, config=config,
                             plugins=[("telegram", chatkernel_telegram)]) as h:
        await h.send_text("telegram", "42", "hello")
        await h.settle(timeout=10)
        notes = [e.text for e in await h.session_log(
            "telegram:main:42", roles=("notification",))]
    # It waited for the platform (one line as the outage began), then failed for good.
    assert "telegram:main: the platform cannot be reached" in caplog.text
    assert len(notes) == 1 and "could not be reached for 300ms" in notes[0]
    assert "cannot connect to the Bot API" in notes[0]
    assert TOKEN not in notes[0] and TOKEN not in caplog.text
