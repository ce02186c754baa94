"""The real gateway, in-process, for a plugin's end-to-end tests (webhooks, HTTP routes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chatkernel.core import config as cfg
from chatkernel.core.gateway import run_gateway as _run_gateway

__all__ = ["gateway_config", "run_gateway"]


def gateway_config(data: dict[str, Any]) -> cfg.KernelConfig:
    """A validated config from a dict shaped like ``config.toml``."""
    return cfg.parse(data)


async def run_gateway(config: cfg.KernelConfig, *, stop: Any,
                      on_ready: Callable[[Any], None] | None = None, **options: Any) -> None:
    """Run the gateway (every configured account, the HTTP server) until ``stop`` is set.

    ``on_ready(gateway)`` is called once it listens. Signals are left to the test runner.
    """
    await _run_gateway(config, stop=stop, on_ready=on_ready, handle_signals=False, **options)
