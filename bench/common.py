"""What the webhook echo benchmarks share (whatsapp_echo, slack_events_echo,
webchat_echo): an aiohttp app served on a free port of 127.0.0.1, and percentiles."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web


@contextlib.asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    """Serve ``app`` on a free port of 127.0.0.1; yields its base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values``, which are sorted (nan for none)."""
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(q * len(values)))]
