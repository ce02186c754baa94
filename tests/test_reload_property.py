"""Reload ≡ restart: a running kernel reloaded to a config is in exactly the state a kernel
freshly started on that config is in, over every setting a reload applies (heartbeats,
agents, bindings, queue, allowlists, accounts, send policy).

The config a reload arrives at is compared with the fresh one down to which keys are set,
since a key's presence means something (a ``[heartbeat]`` table turns the config heartbeat
on, with its defaults), and so are the parts built from it."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from chatkernel.core import config as cfg
from chatkernel.sdk.models import InboundMessage, Route
from chatkernel.testing.clock import ManualClock
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.slow

EVERY = st.sampled_from(["0", "30m", "1h", "2h"])
heartbeat_tables = st.one_of(
    st.none(),  # no table: the config heartbeat is off
    st.just({}),  # an empty table: on, with its defaults
    st.fixed_dictionaries({"every": EVERY}),
    st.fixed_dictionaries({"every": EVERY, "target": st.just("last")}),
)
queue_tables = st.one_of(st.none(), st.fixed_dictionaries({}, optional={
    "mode": st.sampled_from(["collect", "followup", "interrupt", "steer"]),
    "debounce_ms": st.sampled_from([0, 500]),
    "cap": st.sampled_from([5, 20]),
}))
allowlists = st.one_of(st.none(), st.lists(st.sampled_from(["*", "user-1", "user-2",
                                                            "chat:room-1"]),
                                           max_size=3, unique=True))


@st.composite
def configs(draw) -> dict[str, Any]:
    """A config.toml's tables, as a dict, over the settings a reload applies."""
    data: dict[str, Any] = {"agent": {"kind": "echo"}}
    heartbeat = draw(heartbeat_tables)
    if heartbeat is not None:
        data["heartbeat"] = heartbeat
    agent_heartbeat = draw(heartbeat_tables)
    if agent_heartbeat is not None:
        data["agent"]["heartbeat"] = agent_heartbeat
    named = draw(st.lists(st.sampled_from(["work", "home"]), max_size=2, unique=True))
    if named:
        data["agents"] = {}
        for name in named:
            table: dict[str, Any] = {"kind": "echo"}
            own = draw(heartbeat_tables)
            if own is not None:
                table["heartbeat"] = own
            data["agents"][name] = table
        data["bindings"] = [{"agent": name, "chat": f"chat-{name}"}
                            for name in draw(st.lists(st.sampled_from(named), max_size=2,
                                                      unique=True))]
    queue = draw(queue_tables)
    if queue is not None:
        data["queue"] = {"debounce_ms": 0, **queue}
    accounts: dict[str, Any] = {}
    for name in ["main", *draw(st.lists(st.just("second"), max_size=1))]:
        account: dict[str, Any] = {}
        allow_from = draw(allowlists)
        if allow_from is not None:
            account["allow_from"] = allow_from
        if draw(st.booleans()):
            account["require_mention"] = draw(st.booleans())
        accounts[name] = account
    data["channels"] = {"memory": {"accounts": accounts}}
    if draw(st.booleans()):
        data["send_policy"] = {"default": draw(st.sampled_from(["allow", "deny"]))}
    return data


def fields_set(model: Any, prefix: str = "") -> set[str]:
    """Every key a config sets, as dotted paths: what a table's presence decides."""
    found: set[str] = set()
    if isinstance(model, BaseModel):
        for name in model.model_fields_set:
            found.add(prefix + name)
            found |= fields_set(getattr(model, name), f"{prefix}{name}.")
    elif isinstance(model, dict):
        for key, value in model.items():
            found |= fields_set(value, f"{prefix}{key}.")
    elif isinstance(model, list):
        for index, value in enumerate(model):
            found |= fields_set(value, f"{prefix}{index}.")
    return found


VOLATILE = {"next_in_seconds", "last_run_at", "last_outcome", "log_session", "running",
            "waiting_for", "forced", "hold_until"}


def state(h: KernelHarness) -> dict[str, Any]:
    """What a kernel made of its config, as far as a reload may change it."""
    kernel = h.kernel
    heartbeats = kernel.heartbeats.status()
    beats = sorted(({key: value for key, value in beat.items() if key not in VOLATILE}
                    for beat in heartbeats["heartbeats"]), key=lambda beat: beat["id"])
    messages = [InboundMessage(channel="memory", account="main", chat_id=chat,
                               sender_id=sender, text="hi", is_group=group,
                               message_id=f"{chat}-{sender}-{group}")
                for chat in ("chat-1", "chat-work", "chat-home", "room-1")
                for sender in ("user-1", "user-2") for group in (False, True)]
    return {
        "config": kernel.config.model_dump(),
        "set": fields_set(kernel.config),
        "heartbeats": beats,
        "scheduled": heartbeats["scheduled"],
        "agents": kernel.roster.names,
        "bindings": [kernel.agent_for(message) for message in messages],
        "queue": [kernel.queue_settings(f"memory:main:{chat}")
                  for chat in ("chat-1", "chat-work")],
        "accounts": {key: (account.config.model_dump(), account.access_level)
                     for key, account in sorted(kernel.accounts.items())},
        "access": [bool(kernel.pm.call("inbound_accept", message=message,
                                       account=kernel.accounts[f"memory:{message.account}"]))
                   for message in messages],
        "send_policy": [bool(kernel.send_policy.check(Route("memory", "main", chat)))
                        for chat in ("chat-1", "chat-work")],
    }


def harness(home, data: dict[str, Any], clock: ManualClock) -> KernelHarness:
    return KernelHarness(home, config=data, heartbeat_clock=clock)


async def reloaded_and_fresh(tmp_path, first: dict[str, Any], second: dict[str, Any]):
    clock = ManualClock()
    # The restart is on the same home: what the first kernel stored is there for both.
    async with harness(tmp_path, first, clock) as h:
        # The config a reload reads is parsed from the file, as a start reads it.
        await h.kernel.reload(cfg.parse(h.config_data(second), strict_env=False))
        reloaded = state(h)
    async with harness(tmp_path, second, clock) as h:
        fresh = state(h)
    return reloaded, fresh


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=configs(), second=configs())
def test_a_reload_reaches_the_state_a_fresh_start_on_its_config_reaches(tmp_path_factory,
                                                                         first, second):
    tmp_path = tmp_path_factory.mktemp("reload")
    reloaded, fresh = anyio.run(reloaded_and_fresh, tmp_path, first, second)
    for part in fresh:
        assert reloaded[part] == fresh[part], part


def test_reloading_an_unchanged_config_without_a_heartbeat_table_schedules_nothing(tmp_path):
    """The reported case: `[agent] kind = "command"`-style config with no `[heartbeat]`
    table; `chatkernel reload` said "nothing changed", then a heartbeat ran every 30m."""
    data = {"agent": {"kind": "echo"}}

    async def main():
        async with harness(tmp_path, data, ManualClock()) as h:
            assert not h.kernel.heartbeats.status()["scheduled"]
            report = await h.kernel.reload(cfg.parse(h.config_data(data), strict_env=False))
            assert report.lines() == ["nothing changed"]
            status = h.kernel.heartbeats.status()
            assert not status["scheduled"], status
            assert all(beat["off"] for beat in status["heartbeats"])

    anyio.run(main)
