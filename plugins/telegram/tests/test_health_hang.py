"""A Bot API that takes requests and answers none (a proxy holding them): health turns
red within seconds of a send hanging, and green as soon as calls are answered again,
not when the send's 30 s timeout, the next probe or the next long poll says so.

Real time, bounded by the issue's own figures: red within 10 s of the hold, green
within a few seconds of its end (the logic itself is tested on a ManualClock in
tests/test_calls.py)."""

from __future__ import annotations

from typing import Any

import aiohttp
import anyio
import pytest

from chatkernel.testing import FaultProxy, open_contract_run, wait_until
from telegram_adapters import TelegramAdapter

pytestmark = pytest.mark.anyio


class ProxiedTelegram(TelegramAdapter):
    """The fake Bot API behind a FaultProxy; long polls of 30 s, as in production, so
    only the send and the probe can tell health that the platform answers again."""

    async def start(self) -> None:
        await super().start()
        self.proxy = FaultProxy(self.api.base_url)
        await self.proxy.__aenter__()

    async def stop(self) -> None:
        await self.proxy.__aexit__(None, None, None)
        await super().stop()

    def account_config(self) -> dict[str, Any]:
        return {**super().account_config(), "api_base": self.proxy.url, "poll_timeout": 30}


async def healthz(http: aiohttp.ClientSession, url: str) -> tuple[int, list[str]]:
    async with http.get(f"{url}/healthz") as answer:
        return answer.status, (await answer.json()).get("reasons", [])


async def wait_for_status(http, url: str, status: int, within: float) -> list[str]:
    seen: list[Any] = []

    async def answered() -> bool:
        seen[:] = await healthz(http, url)
        return seen[0] == status

    await wait_until(answered, timeout=within, interval=0.1,
                     what=f"/healthz answering {status}", state=lambda: seen)
    return seen[1]


@pytest.mark.slow
async def test_health_is_red_while_the_platform_hangs_and_green_once_it_answers(tmp_path):
    async with ProxiedTelegram() as adapter, open_contract_run(
            adapter, tmp_path, extra_config={"health": {"probe_timeout_ms": 1000}}) as run, \
            aiohttp.ClientSession() as http:
        chat, user = adapter.direct_chat(1), adapter.user_id(1)
        await adapter.inject(chat, "warm up hh00z", sender_id=user)
        await run.wait_for_tokens(chat, ["hh00z"])
        await wait_for_status(http, run.url, 200, within=10)
        # A turn is running when the Bot API starts to hang: its reply is held.
        run.agent.gate = anyio.Event()
        await adapter.inject(chat, "then hh01z", sender_id=user)
        await run.wait(lambda: run.agent.running == 1, what="the turn to start")
        adapter.proxy.hold()
        run.agent.gate.set()
        await run.wait(lambda: adapter.proxy.held >= 1, what="the reply held")
        reasons = await wait_for_status(http, run.url, 503, within=10)
        assert any("platform hangs: no answer from the platform" in r for r in reasons), reasons
        # A probe meanwhile fails (no answer within its second): cached, it would keep
        # the account red until a probe or a long poll says otherwise.
        probe = (await run.health.probe([run.account]))[run.account.key]
        assert not probe.ok and probe.extra.get("timed_out")
        adapter.proxy.recover()  # the held reply goes on, and is answered
        await run.wait_for_tokens(chat, ["hh01z"])
        reasons = await wait_for_status(http, run.url, 200, within=3)
        assert reasons == []
        assert adapter.sent_texts(chat).count("re: then hh01z") == 1
