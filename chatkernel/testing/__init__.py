"""The chatkernel test kit for plugin authors (a pytest plugin, entry point ``pytest11``).

A plugin's tests import what they need from here, never from ``chatkernel.core``::

    from chatkernel.testing import AgentEvent, KernelHarness, scripted_agent
    from chatkernel.testing import ChannelContract, PlatformAdapter
    from chatkernel.testing import FakePlatform, Call, ErrorAnswer   # a fake's base

Importing this package is cheap (pytest loads it at start-up): each name loads its
module on first access. Where they live, by concern: a kernel in-process (``memory``,
``agents``, ``clock``), the channel contract (``contract/``: the adapter, a run, the
suite), a platform's fake and its dev server (``fake_platform``, ``devserver``), what
surrounds a gateway (``fakes/``: an OpenAI server, a failing network, a full disk), the
real gateway (``gateway``, ``process``, ``instances``, ``redis``), the kernel's own
loopback channel (``loopback/``, built on ``sample/``, the template baked) and the
pytest plugin (``plugin``, ``slowtests``, ``fuzz``).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    # The kernel's side of a turn, as agents and tests see it.
    "AgentEvent": "chatkernel.core.turns.agents",
    "TurnRequest": "chatkernel.core.turns.agents",
    "BUSY_HINT": "chatkernel.core.inbound.pipeline",
    # A kernel in-process, its memory channel, scripted agents, a manual clock.
    "KernelHarness": "chatkernel.testing.memory",
    "MemoryChannel": "chatkernel.testing.memory",
    "MemoryPlugin": "chatkernel.testing.memory",
    "ScriptedAgent": "chatkernel.testing.agents",
    "agent_plugin": "chatkernel.testing.agents",
    "scripted_agent": "chatkernel.testing.agents",
    "ManualClock": "chatkernel.testing.clock",
    "ScaledClock": "chatkernel.testing.clock",
    "FakeOpenAI": "chatkernel.testing.fakes.openai",
    "OtlpReceiver": "chatkernel.testing.fakes.otlp",
    # The channel contract suite.
    "ChannelContract": "chatkernel.testing.contract",
    "ContractReceiver": "chatkernel.testing.contract",
    "ContractRun": "chatkernel.testing.contract",
    "PlatformAdapter": "chatkernel.testing.contract",
    "needs": "chatkernel.testing.contract",
    "fast_pacing": "chatkernel.testing.contract",
    "open_contract_run": "chatkernel.testing.contract",
    "wait_until": "chatkernel.testing.contract",
    "png_bytes": "chatkernel.testing.contract",
    "long_text": "chatkernel.testing.contract",
    # Property tests: a bounded example count, more under the deep profile.
    "fuzz_examples": "chatkernel.testing.fuzz",
    # Property tests of a renderer.
    "markdown_texts": "chatkernel.testing.markdown",
    "PATHOLOGICAL_MARKDOWN": "chatkernel.testing.markdown",
    "registered_markups": "chatkernel.testing.markdown",
    # The base of fake platform servers.
    "Call": "chatkernel.testing.fake_platform",
    "FakePlatform": "chatkernel.testing.fake_platform",
    "Fault": "chatkernel.testing.fake_platform",
    "FaultQueue": "chatkernel.testing.fake_platform",
    "HmacSigner": "chatkernel.testing.fake_platform",
    "ErrorAnswer": "chatkernel.testing.fake_platform",
    "RateWindows": "chatkernel.testing.fake_platform",
    "Signer": "chatkernel.testing.fake_platform",
    "SecretTokenSigner": "chatkernel.testing.fake_platform",
    "Signal": "chatkernel.testing.fake_platform",
    "WebhookAttempt": "chatkernel.testing.fake_platform",
    "WebhookPusher": "chatkernel.testing.fake_platform",
    "serve_routes": "chatkernel.testing.fake_platform",
    # The real gateway: in-process, or as its own process, or several sharing a store.
    "gateway_config": "chatkernel.testing.gateway",
    "run_gateway": "chatkernel.testing.gateway",
    "start_gateway": "chatkernel.testing.gateway",
    "CHATKERNEL": "chatkernel.testing.process",
    "gateway_home": "chatkernel.testing.process",
    "gateway_process": "chatkernel.testing.process",
    "running_gateway_process": "chatkernel.testing.process",
    "wait_for_messages": "chatkernel.testing.process",
    "free_port": "chatkernel.testing.process",
    "post_json": "chatkernel.testing.process",
    "stop_process": "chatkernel.testing.process",
    "GatewayInstance": "chatkernel.testing.instances",
    "GatewayInstances": "chatkernel.testing.instances",
    "RoundRobin": "chatkernel.testing.instances",
    "holder_pid": "chatkernel.testing.instances",
    "wait_for_owner": "chatkernel.testing.instances",
    # Agents for a plugin's own end-to-end tests: by label, and a paced stream.
    "LabelAgent": "chatkernel.testing.agents",
    "STREAM_ANSWER": "chatkernel.testing.agents",
    "STREAM_WORDS": "chatkernel.testing.agents",
    "paced_stream": "chatkernel.testing.agents",
    # Faults of the world around a gateway: the network, the disk.
    "FaultProxy": "chatkernel.testing.fakes.faultproxy",
    "faulty_platform": "chatkernel.testing.contract.faults",
    "SmallDisk": "chatkernel.testing.fakes.disk",
    "DiskUnavailable": "chatkernel.testing.fakes.disk",
    # The starter config file, a channel's example turned on.
    "turn_on_example": "chatkernel.testing.starter",
    # A real redis-server (the fixtures redis_server and redis_prefix come with the plugin).
    "RedisServer": "chatkernel.testing.redis",
    "RedisStore": "chatkernel.testing.redis",
}

#: The kit's public names, each listed in docs/testing.md (tests/test_testing_kit.py).
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'chatkernel.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
