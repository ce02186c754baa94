"""/remind on Telegram (docs/jobs.md): a chat's reminder is set, listed and delivered once,
on the job scheduler's fake clock, through the test kit's public verbs."""

from __future__ import annotations

import anyio
import pytest

import chatkernel_telegram
from chatkernel.testing import KernelHarness, ManualClock
from chatkernel_telegram.fake import FakeBotAPI

pytestmark = pytest.mark.anyio

TOKEN = "123456:AAExampleTokenForTestsOnly_abcdefghij"
CHAT = 4242


@pytest.mark.slow  # a Telegram long poll around it
async def test_remind_sets_a_reminder_that_is_sent_once_at_its_time(tmp_path):
    clock = ManualClock()
    async with FakeBotAPI(token=TOKEN, username="chatkernel_bot") as api:
        config = {"channels": {"telegram": {"accounts": {"main": {
            "bot_token": api.token, "api_base": api.base_url, "allow_from": ["*"],
            "poll_timeout": 1}}}}}
        async with KernelHarness(tmp_path, config=config, heartbeat_clock=clock,
                                 plugins=[("telegram", chatkernel_telegram)]) as h:
            async with anyio.create_task_group() as tg:
                tg.start_soon(h.receive_loop, "telegram")
                api.inject_message(CHAT, "/remind 20m check the oven")
                await api.wait_for_sent(1)
                api.inject_message(CHAT, "/remind list")
                await api.wait_for_sent(2)
                set_it, listing = [m.plain_text for m in api.sent(chat_id=CHAT)]
                assert set_it.startswith("Reminder ") and "in 20m, check the oven" in set_it
                assert "check the oven" in listing
                clock.advance(19 * 60)
                await h.jobs_settled()
                assert len(api.sent(chat_id=CHAT)) == 2  # not yet
                clock.advance(60)
                await h.jobs_settled()
                await api.wait_for_sent(3)
                clock.advance(3600)
                await h.jobs_settled()
                texts = [m.plain_text for m in api.sent(chat_id=CHAT)]
                assert texts[2:] == ["Reminder: check the oven"]
                tg.cancel_scope.cancel()
