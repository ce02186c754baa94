"""The channel contract under platform faults: every channel waits out an outage.

Part of :class:`chatkernel.testing.contract.ChannelContract` (so every plugin's
contract run, the template's included, goes through it unchanged). The account's
calls to its fake go through a :class:`~chatkernel.testing.fakes.faultproxy.FaultProxy`
(every ``http://127.0.0.1:…`` address of the fake in the account's table points at
the proxy instead), and while a reply is on its way the platform

- **refuses connections** (the proxy stops listening),
- **answers 502 with an HTML page** (a load balancer in front of the platform), or
- **hangs** (the proxy takes the request and answers nothing until it recovers;
  the kit's calls give up after :attr:`FaultChecks.hang_timeout`, as they would
  after their real timeout).

Whatever the channel's ``send`` lets escape, nothing may be reported ``failed``:
the reply waits for the platform and is delivered once when it is back (a send
whose answer was lost in the hang is ``unknown``, never repeated: the platform
still gets it once, when the proxy forwards what it held).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest

from chatkernel.sdk.http_client import HttpClient
from chatkernel.testing.fakes.faultproxy import FaultProxy

__all__ = ["FaultChecks", "faulty_platform"]

_ORIGIN = re.compile(r"^http://127\.0\.0\.1:\d+")


@contextlib.asynccontextmanager
async def faulty_platform(adapter: Any) -> AsyncIterator[list[FaultProxy]]:
    """Put a :class:`FaultProxy` between the account and every address of its fake.

    Each ``http://127.0.0.1:<port>`` origin in :meth:`PlatformAdapter.account_config`
    other than the gateway's gets a proxy; the adapter's account table names the
    proxy's address from then on. Yields the proxies (one per origin)."""
    gateways: list[str] = []
    attach, account_config = adapter.attach_gateway, adapter.account_config

    async def attach_gateway(url: str) -> None:
        gateways.append(_origin(url) or url)
        await attach(url)

    origins = sorted({origin for value in _strings(account_config())
                      if (origin := _origin(value))})
    async with contextlib.AsyncExitStack() as stack:
        proxies = {origin: await stack.enter_async_context(FaultProxy(origin))
                   for origin in origins}

        def proxied() -> dict[str, Any]:
            def swap(value: str) -> str:
                origin = _origin(value)
                if origin in proxies and origin not in gateways:
                    return proxies[origin].url + value[len(origin):]
                return value
            return _mapped(account_config(), swap)

        adapter.attach_gateway, adapter.account_config = attach_gateway, proxied
        try:
            yield list(proxies.values())
        finally:
            adapter.attach_gateway, adapter.account_config = attach, account_config


def _origin(value: str) -> str | None:
    found = _ORIGIN.match(value)
    return found.group(0) if found else None


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, (list, tuple)):
        return [s for item in value for s in _strings(item)]
    return []


def _mapped(value: Any, swap: Any) -> Any:
    if isinstance(value, str):
        return swap(value)
    if isinstance(value, dict):
        return {key: _mapped(item, swap) for key, item in value.items()}
    if isinstance(value, list):
        return [_mapped(item, swap) for item in value]
    return value


class FaultChecks:
    """The fault cases of the channel contract (mixed into ``ChannelContract``)."""

    #: Seconds the kit's calls wait for a hung platform in the hang case (their real
    #: timeouts are 30 s and more).
    hang_timeout: ClassVar[float] = 1.0

    @contextlib.asynccontextmanager
    async def _faulty_run(self, adapter: Any, home: Path) -> AsyncIterator[tuple[Any, Any]]:
        async with faulty_platform(adapter) as proxies, \
                self.contract_run(adapter, home) as run:  # type: ignore[attr-defined]
            yield run, _Proxies(proxies)

    async def _reply_during(self, adapter: Any, home: Path, fault: str) -> None:
        """A reply is queued while the platform has ``fault``; once the outbox has
        met the fault past a payload's attempts, the platform recovers; the reply
        arrives once and nothing of the outbox failed."""
        async with self._faulty_run(adapter, home) as (run, proxies):
            chat, token = adapter.direct_chat(1), f"{fault[:2]}01z"
            run.agent.gate = anyio.Event()  # the turn waits until the fault is on
            await adapter.inject(chat, f"during {token}", sender_id=adapter.user_id(1))
            await run.wait(lambda: any(token in text for text in run.agent_texts()),
                           what=f"the agent's turn for {token}")
            outage = run.kernel.outbox.limits.outage(run.account)
            store = run.kernel.store
            failures: list[Any] = []

            async def failed() -> bool:
                failures[:] = [entry for entry, _ in await store.outbox_failures(50)
                               if entry.status == "failed"]
                return bool(failures)

            async def sending() -> bool:
                return any(entry.status == "sending"
                           for entry in await store.outbox_unfinished())

            async def until(condition: Any, what: str) -> None:
                with anyio.move_on_after(run.timeout) as waited:
                    while not await condition() and not await failed():
                        await anyio.sleep(0.02)
                if waited.cancelled_caught:
                    pytest.fail(f"waited {run.timeout}s for {what} ({fault})")

            async def past_the_attempts() -> bool:
                return outage.tries > outage.threshold

            if fault == "refused":
                proxies.stop()
                run.agent.gate.set()
                await until(past_the_attempts, "the platform refused past the attempts")
            elif fault == "unavailable":
                proxies.fail(502)
                run.agent.gate.set()
                await until(past_the_attempts, "502 answered past the attempts")
            else:
                proxies.hold()
                run.agent.gate.set()

                async def held() -> bool:
                    return bool(proxies.held) and await sending()

                await until(held, "the reply's request held by the hung platform")
                # The kit's calls give up after hang_timeout; a client of the channel's
                # own (an SDK's) may wait longer: the platform recovers after a while
                # either way.
                with anyio.move_on_after(self.hang_timeout * 3):
                    while await sending() and not await failed():
                        await anyio.sleep(0.02)
            await failed()
            assert failures == [], [(e.status, e.error) for e in failures]
            proxies.recover()
            await run.wait_for_tokens(chat, [token])
            await run.settle()
            assert not await failed(), [(e.status, e.error) for e in failures]
            assert run.tokens_sent(chat, [token]) == [token], run.texts(chat)

    async def test_a_refused_platform_is_waited_out_and_the_reply_arrives_once(
            self, platform_adapter, tmp_path):
        await self._reply_during(platform_adapter, tmp_path, "refused")

    async def test_a_502_page_from_the_platform_is_waited_out_and_the_reply_arrives_once(
            self, platform_adapter, tmp_path):
        await self._reply_during(platform_adapter, tmp_path, "unavailable")

    async def test_a_hung_platform_fails_nothing_and_the_reply_arrives_once(
            self, platform_adapter, tmp_path, monkeypatch):
        monkeypatch.setattr(HttpClient, "longest_call", self.hang_timeout)
        await self._reply_during(platform_adapter, tmp_path, "hung")


class _Proxies:
    """Every proxy of the account's fake at once."""

    def __init__(self, proxies: list[FaultProxy]) -> None:
        if not proxies:
            pytest.fail("the account's table names no http://127.0.0.1 address of its fake "
                        "for the fault cases to put a proxy in front of")
        self.all = proxies

    def stop(self) -> None:
        for proxy in self.all:
            proxy.stop()

    def fail(self, status: int) -> None:
        for proxy in self.all:
            proxy.fail(status)

    def hold(self) -> None:
        for proxy in self.all:
            proxy.hold()

    def recover(self) -> None:
        for proxy in self.all:
            proxy.recover()
            proxy.start()

    @property
    def failed(self) -> int:
        return sum(proxy.failed for proxy in self.all)

    @property
    def held(self) -> int:
        return sum(proxy.held for proxy in self.all)
