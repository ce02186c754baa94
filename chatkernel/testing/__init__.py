"""The chatkernel test kit for plugin authors (a pytest plugin, entry point ``pytest11``).

A plugin's tests import what they need from here (and from
:mod:`chatkernel.channels`), never from ``chatkernel.core``::

    from chatkernel.testing import AgentEvent, KernelHarness, agent_plugin, scripted_agent

Names load on first use, so the pytest plugin costs nothing to import.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "AgentEvent": "chatkernel.core.agents",
    "TurnRequest": "chatkernel.core.agents",
    "BUSY_HINT": "chatkernel.core.inbound",
    "ScriptedAgent": "chatkernel.testing.agents",
    "agent_plugin": "chatkernel.testing.agents",
    "scripted_agent": "chatkernel.testing.agents",
    "KernelHarness": "chatkernel.testing.memory",
    "MemoryChannel": "chatkernel.testing.memory",
    "gateway_config": "chatkernel.testing.gateway",
    "run_gateway": "chatkernel.testing.gateway",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'chatkernel.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
