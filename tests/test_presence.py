"""Presence: the gateway's own entry, case-insensitive ids, TTL, bound, loopback rule."""

from __future__ import annotations

import pytest

from chatkernel.core.health.presence import Presence, PresenceEntry, is_loopback


class Clock:
    def __init__(self, now=1_000_000.0):
        self.now = now

    def __call__(self):
        return self.now


def make(clock, **options):
    return Presence(PresenceEntry("gateway-host-1"), clock=clock, **options)


def ids(presence):
    return [entry.instance_id for entry in presence.entries()]


def test_the_gateway_has_its_own_entry_first():
    presence = make(Clock())
    presence.report("cli-a", mode="cli")
    entries = presence.entries()
    assert entries[0].instance_id == "gateway-host-1" and entries[0].kind == "gateway"
    assert entries[1].instance_id == "cli-a" and entries[1].kind == "client"


def test_instance_ids_are_case_insensitive():
    clock = Clock()
    presence = make(clock)
    presence.report("Laptop-ABC", mode="cli", version="0.1")
    clock.now += 1
    presence.report("laptop-abc", reason="health")
    assert ids(presence) == ["gateway-host-1", "Laptop-ABC"]
    entry = presence.entries()[1]
    assert (entry.mode, entry.version, entry.reason) == ("cli", "0.1", "health")
    assert entry.ts == clock.now and entry.first_seen == clock.now - 1


def test_entries_older_than_the_ttl_are_pruned():
    clock = Clock()
    presence = make(clock, ttl=300)
    presence.report("old")
    clock.now += 200
    presence.report("newer")
    clock.now += 101  # "old" is 301 s old, "newer" 101 s
    assert ids(presence) == ["gateway-host-1", "newer"]
    clock.now += 1000
    assert ids(presence) == ["gateway-host-1"]  # the gateway itself is never pruned


def test_at_most_max_entries_are_kept_oldest_dropped_first():
    clock = Clock()
    presence = make(clock)  # the default bound: 200
    for n in range(250):
        clock.now += 0.5
        presence.report(f"client-{n}")
    entries = presence.entries()
    assert len(entries) == 200
    assert entries[0].kind == "gateway"
    kept = {entry.instance_id for entry in entries[1:]}
    assert kept == {f"client-{n}" for n in range(51, 250)}


def test_a_loopback_address_never_overwrites_a_reported_one():
    presence = make(Clock())
    presence.report("phone", ip="192.0.2.7")
    presence.report("phone", ip="127.0.0.1")
    presence.report("phone", ip="::1")
    presence.report("PHONE", ip="::ffff:127.0.0.1")
    assert presence.entries()[1].ip == "192.0.2.7"
    presence.report("phone", ip="198.51.100.9")  # a real new address does
    assert presence.entries()[1].ip == "198.51.100.9"
    presence.report("local-only", ip="127.0.0.1")  # loopback is kept when it is all we know
    assert [e.ip for e in presence.entries() if e.instance_id == "local-only"] == ["127.0.0.1"]


def test_reports_are_validated_and_bounded():
    presence = make(Clock())
    with pytest.raises(ValueError):
        presence.report("")
    with pytest.raises(ValueError):
        presence.report("x" * 201)
    with pytest.raises(ValueError, match="gateway's own"):
        presence.report("GATEWAY-HOST-1")
    entry = presence.report("c", text="t" * 10_000, unknown="ignored")
    assert len(entry.text) == 500 and not hasattr(entry, "unknown")


@pytest.mark.parametrize("address, loopback", [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("::ffff:127.0.0.1", True),
    ("localhost", True), ("192.0.2.1", False), ("0.0.0.0", False), ("::", False),
    ("", False), (None, False), ("not-an-ip", False),
])
def test_is_loopback(address, loopback):
    assert is_loopback(address) is loopback
