"""A Bot API that answers 5xx for a while, in the middle of a burst of replies: an outage
of the account, waited out like a refused connection, never a reason to fail a reply.

These tests run in real time (a proxy answers 5xx for a window of seconds). The window
is longer than the whole retry budget of a payload (Telegram's pacing: 400 ms, then
800 ms), which is what lost replies before; the behaviour does not depend on how much
longer, so most windows are a few seconds; one is the 20 s of the original report. The
outage's probes are capped at 1 s so each test ends soon after its window."""

from __future__ import annotations

import anyio
import pytest

import chatkernel_telegram
from chatkernel.testing import FaultProxy, KernelHarness, wait_until
from chatkernel_telegram.fake import FakeBotAPI

pytestmark = pytest.mark.anyio

TOKEN = "123456:AAExampleTokenForTestsOnly_abcdefghij"
CHATS = [100 + n for n in range(10)]
PER_CHAT = 30
#: Telegram's retry pacing (attempts 3, 400 ms doubling: a budget of 1.2 s), probes of
#: an outage capped at 1 s.
RETRY = {"attempts": 3, "base_delay_ms": 400, "max_delay_ms": 1000}
#: Fast enough for a short test, slow enough that the burst spans the window.
RATES = {"account": "100/s", "chat": "10/s"}


async def send_through_an_outage(tmp_path, fault, window: float):
    """300 replies to 10 chats; once 100 are in, the proxy applies ``fault`` for
    ``window`` seconds. Returns the fake, the proxy, what had arrived when the fault
    began, and every outbox status."""
    async with FakeBotAPI(token=TOKEN, username="chatkernel_bot") as api, \
            FaultProxy(api.base_url) as proxy:
        config = {"channels": {"telegram": {
            "retry": RETRY, "rate_limits": RATES,
            "accounts": {"main": {"bot_token": api.token, "api_base": proxy.url,
                                  "allow_from": ["*"], "poll_timeout": 1}}}}}
        async with KernelHarness(tmp_path, config=config,
                                 plugins=[("telegram", chatkernel_telegram)]) as h:
            for index in range(PER_CHAT):
                for chat in CHATS:
                    await h.send_text("telegram", str(chat), f"{chat} #{index}", fmt="plain")
            await wait_until(lambda: len(api.sent()) >= 100, timeout=30,
                             what="100 replies sent", state=lambda: len(api.sent()))
            before = len(api.sent())
            fault(proxy)
            # The outage outlasts the retries' budget, on the wall clock as reported.
            # real time: the test is about an outage of real seconds (see its name)
            await anyio.sleep(window)
            proxy.recover()
            with anyio.fail_after(60):
                await h.outbox_idle()
            statuses = await h.outbox_statuses()
            failing = h.account("telegram").runtime.send_failing_since
        return api, proxy, before, statuses, failing


def assert_every_reply_arrived_once_in_order(api, statuses):
    assert statuses == ["sent"] * len(CHATS) * PER_CHAT
    for chat in CHATS:
        assert api.texts(chat_id=chat) == [f"{chat} #{index}" for index in range(PER_CHAT)]


@pytest.mark.slow
@pytest.mark.parametrize(("status", "window"), [(502, 3.0), (503, 3.0), (502, 20.0)])
async def test_a_5xx_outage_longer_than_the_retries_loses_no_reply_in_real_time(
        tmp_path, status, window):
    # 20 s: the outage of the original report, once; 3 s already outlasts the retries.
    api, proxy, before, statuses, failing = await send_through_an_outage(
        tmp_path, lambda proxy: proxy.fail(status), window=window)
    assert before < len(CHATS) * PER_CHAT  # the outage came in the middle of the burst
    assert proxy.failed > 0
    assert_every_reply_arrived_once_in_order(api, statuses)
    assert failing is None  # its sends count as working again


@pytest.mark.slow
async def test_429s_without_retry_after_are_an_outage_too_in_real_time(tmp_path):
    api, proxy, before, statuses, _ = await send_through_an_outage(
        tmp_path, lambda proxy: proxy.fail(429, body=b'{"ok": false, "error_code": 429, '
                                                      b'"description": "Too Many Requests"}'),
        window=2.0)
    assert before < len(CHATS) * PER_CHAT and proxy.failed > 0
    assert_every_reply_arrived_once_in_order(api, statuses)
