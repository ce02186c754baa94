"""The kernel implements its components' ports (chatkernel.core.wiring): every call a
port names is there, takes the port's parameters, and is a coroutine where the port's is."""

from __future__ import annotations

import inspect

import pytest

from chatkernel.core.health.probes import HealthRuntime, RunFacts
from chatkernel.core.inbound.pipeline import InboundRouting, InboundRuntime
from chatkernel.core.kernel import Kernel
from chatkernel.core.outbound.outbox import OutboxRuntime, SendRules
from chatkernel.core.runtime.cluster import ClusterHost
from chatkernel.core.runtime.control import ControlRuntime, SendTargets
from chatkernel.core.wiring import Directory, Hosting, Running

PORTS = [(InboundRuntime, Running), (InboundRouting, Directory), (OutboxRuntime, Running),
         (SendRules, Running), (HealthRuntime, Running), (RunFacts, Running),
         (ControlRuntime, Running), (SendTargets, Directory), (ClusterHost, Hosting)]


def calls(port: type) -> dict[str, inspect.Signature]:
    """A port's calls by name, each without ``self``."""
    found = {}
    for name, member in vars(port).items():
        if inspect.isfunction(member) and not name.startswith("_"):
            signature = inspect.signature(member)
            found[name] = signature.replace(parameters=list(signature.parameters.values())[1:])
    return found


@pytest.mark.parametrize(("port", "side"), PORTS,
                         ids=[f"{port.__name__}-{side.__name__}" for port, side in PORTS])
def test_the_kernel_implements_every_call_of_a_port(port, side):
    implemented = side(Kernel())
    assert 2 <= len(calls(port)) <= 5
    for name, signature in calls(port).items():
        call = getattr(implemented, name)
        wanted = list(signature.parameters)
        assert list(inspect.signature(call).parameters)[:len(wanted)] == wanted, name
        assert inspect.iscoroutinefunction(call) == \
            inspect.iscoroutinefunction(getattr(port, name)), name


def test_the_check_sees_a_missing_call():
    class Lacking:
        def __init__(self, kernel: Kernel) -> None:
            self.store = kernel._started_store

    with pytest.raises(AttributeError):
        test_the_kernel_implements_every_call_of_a_port(OutboxRuntime, Lacking)
