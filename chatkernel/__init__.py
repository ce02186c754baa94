"""chatkernel: a plugin-based gateway between chat platforms and an agent.

Plugins import what they need from here or from :mod:`chatkernel.channels`
(the whole public plugin API)::

    from chatkernel import hookimpl, Channel, InboundMessage

Importing this package is cheap: the kernel's heavier parts (the channel base
class and its pydantic models) load on first access. ``chatkernel.core`` is
the kernel's internals: plugins never import it.
"""

from chatkernel.sdk.models import (
    Account,
    Command,
    InboundMessage,
    MediaRef,
    OutboundPayload,
    ProbeResult,
    Route,
    SendError,
    SendResult,
    Session,
    Verdict,
)
from chatkernel.hookspecs import hookimpl, hookspec

__version__ = "0.1.0"

__all__ = [
    "Account",
    "AccountConfig",
    "Agent",
    "AgentEvent",
    "Channel",
    "ChannelLimits",
    "Command",
    "ConfigError",
    "InboundMessage",
    "MediaRef",
    "OutboundPayload",
    "ProbeResult",
    "RateLimit",
    "Route",
    "SendError",
    "SendResult",
    "Session",
    "TurnRequest",
    "Verdict",
    "__version__",
    "hookimpl",
    "hookspec",
]

_LAZY = {
    "Agent": "chatkernel.core.turns.agents",
    "AgentEvent": "chatkernel.core.turns.agents",
    "TurnRequest": "chatkernel.core.turns.agents",
    "Channel": "chatkernel.sdk.channel",
    "ChannelLimits": "chatkernel.sdk.channel",
    "RateLimit": "chatkernel.sdk.channel",
    "AccountConfig": "chatkernel.sdk.accounts",
    "ConfigError": "chatkernel.sdk.errors",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'chatkernel' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
