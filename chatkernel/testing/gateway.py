"""The real gateway, in-process, for a plugin's end-to-end tests (webhooks, HTTP routes)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from chatkernel.core import config as cfg
from chatkernel.core.gateway.process import run_gateway as _run_gateway

__all__ = ["gateway_config", "run_gateway", "start_gateway"]


def gateway_config(data: dict[str, Any]) -> cfg.KernelConfig:
    """A validated config from a dict shaped like ``config.toml``."""
    return cfg.parse(data)


async def run_gateway(config: cfg.KernelConfig, *, stop: Any,
                      on_ready: Callable[[Any], None] | None = None, **options: Any) -> None:
    """Run the gateway (every configured account, the HTTP server) until ``stop`` is set.

    ``on_ready(gateway)`` is called once it listens. Signals are left to the test runner.
    """
    await _run_gateway(config, stop=stop, on_ready=on_ready, handle_signals=False, **options)


async def start_gateway(task_group: TaskGroup, home: Path, data: dict[str, Any] | None = None,
                        *, timeout: float = 10.0) -> tuple[str, anyio.Event]:
    """Run the gateway in ``task_group`` on a free port of 127.0.0.1, its workspace and
    state under ``home``, with ``data`` (shaped like ``config.toml``) on top; returns its
    base URL once it listens, and the event that stops it."""
    config = gateway_config({"gateway": {"workspace": str(home / "workspace"),
                                         "listen": "127.0.0.1:0"},
                             "store": {"path": str(home / "state.db")}, **(data or {})})
    ready, stop = anyio.Event(), anyio.Event()
    where: dict[str, str] = {}

    def on_ready(listening: Any) -> None:
        where["url"] = listening.url
        ready.set()

    task_group.start_soon(lambda: run_gateway(config, on_ready=on_ready, stop=stop))
    with anyio.fail_after(timeout):
        await ready.wait()
    return where["url"], stop
