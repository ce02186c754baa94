"""Socket Mode's health while the websocket is down: a closed socket that cannot be
opened again turns the account red at once, saying so, not after the silence watchdog."""

from __future__ import annotations

import time

import pytest

from chatkernel.testing import ManualClock
from chatkernel.testing import faulty_platform, open_contract_run
from slack_adapters import SlackSocketAdapter

pytestmark = pytest.mark.anyio


async def test_a_dropped_socket_that_cannot_reconnect_is_red_at_once_with_why(tmp_path):
    """The socket drops and ``apps.connections.open`` is refused: slack_sdk logged
    "Failed to ... reconnect" every few seconds while health stayed green ~29 s, then
    turned red for the wrong reason (an open but silent socket)."""
    # The channel's clock never moves unless the test moves it: no silence watchdog,
    # no backoff ends, so whatever turns health red does so without waiting.
    clock = ManualClock()
    async with SlackSocketAdapter() as adapter, faulty_platform(adapter) as proxies:
        (proxy,) = proxies
        async with open_contract_run(adapter, tmp_path / "kernel",
                                     channel_clock=clock) as run:
            runtime, slack = run.account.runtime, adapter.slack
            runtime.loop_started(time.time())

            def problems() -> list[str]:
                return run.health.account_snapshot(run.account, time.time()).problems

            await run.wait(lambda: bool(slack.app.open_sockets) and not problems(),
                           what="the socket open and the account green", state=problems)
            opened = len(slack.calls_to("apps.connections.open"))

            proxy.stop()  # apps.connections.open is refused from now on
            slack.drop_sockets()
            await run.wait(lambda: bool(problems()), what="the account red", state=problems)
            (problem,) = [p for p in problems() if "Socket Mode" in p]
            assert ("Socket Mode is disconnected: apps.connections.open refused (cannot "
                    "connect to Slack (") in problem, problem
            assert "silent" not in problem
            assert not slack.app.open_sockets

            proxy.start()  # Slack is back: the next try (after the backoff) connects
            clock.advance(60)
            await run.wait(lambda: bool(slack.app.open_sockets) and not problems(),
                           what="the socket open again and the account green",
                           state=problems)
            assert len(slack.calls_to("apps.connections.open")) == opened + 1
