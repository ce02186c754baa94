"""Presence: which gateway instances and clients are around.

The gateway keeps its own entry plus one per instance or client that reports
itself (``POST /control/presence``; the CLI does it whenever it asks the
gateway something). Entries are keyed by a stable instance id, compared
case-insensitively; an entry not heard from for ``ttl`` seconds is pruned,
and at most ``max_entries`` are kept (the oldest go first; the gateway's own
entry is never dropped). A report from a loopback address never overwrites a
real address reported before: a client that once came from 192.0.2.7 and now
talks through an SSH tunnel is still shown at 192.0.2.7.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from chatkernel.core.config.listen import is_loopback

#: The fields a report may set, besides the instance id, with their length caps.
REPORTED_FIELDS: dict[str, int] = {"host": 255, "version": 64, "platform": 128, "mode": 64,
                                   "reason": 200, "text": 500}
MAX_INSTANCE_ID = 200


@dataclass(slots=True)
class PresenceEntry:
    """One instance or client as last reported."""

    instance_id: str
    kind: str = "client"  # "gateway" for the gateway itself
    host: str = ""
    ip: str | None = None
    version: str = ""
    platform: str = ""
    mode: str = ""  # what the client is: "gateway", "cli", a channel's page...
    reason: str = ""  # why it reported ("status", "health", "connect"...)
    text: str = ""
    ts: float = 0.0  # last heard from (Unix time)
    first_seen: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Presence:
    """The presence table of one gateway (in memory; it is about now, not history)."""

    own: PresenceEntry
    ttl: float = 300.0
    max_entries: int = 200
    clock: Callable[[], float] = time.time
    _entries: dict[str, PresenceEntry] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.own.kind = "gateway"
        self.own.first_seen = self.own.first_seen or self.clock()

    @staticmethod
    def key(instance_id: str) -> str:
        return instance_id.strip().casefold()

    def report(self, instance_id: str, *, ip: str | None = None, **fields: Any) -> PresenceEntry:
        """Record that ``instance_id`` is around; returns its entry.

        Unknown fields are ignored and long values are cut, so a client cannot grow
        the table without bound. ValueError for an empty or overlong id, or the
        gateway's own id.
        """
        instance_id = (instance_id or "").strip()
        if not instance_id or len(instance_id) > MAX_INSTANCE_ID:
            raise ValueError(f"instance_id must be 1 to {MAX_INSTANCE_ID} characters")
        key = self.key(instance_id)
        if key == self.key(self.own.instance_id):
            raise ValueError(f"{instance_id!r} is the gateway's own instance id")
        now = self.clock()
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = PresenceEntry(instance_id, first_seen=now)
        for name, cap in REPORTED_FIELDS.items():
            value = fields.get(name)
            if value is not None:
                setattr(entry, name, str(value)[:cap])
        # A loopback address says only that this hop was local: keep a real one.
        if ip and not (is_loopback(ip) and entry.ip and not is_loopback(entry.ip)):
            entry.ip = ip
        entry.ts = now
        self.prune(now)
        return entry

    def prune(self, now: float | None = None) -> None:
        """Drop entries older than the TTL, then the oldest beyond ``max_entries``."""
        now = self.clock() if now is None else now
        for key in [k for k, e in self._entries.items() if now - e.ts > self.ttl]:
            del self._entries[key]
        room = max(0, self.max_entries - 1)  # the gateway's own entry counts too
        if len(self._entries) > room:
            by_age = sorted(self._entries, key=lambda k: self._entries[k].ts)
            for key in by_age[:len(self._entries) - room]:
                del self._entries[key]

    def entries(self) -> list[PresenceEntry]:
        """The gateway first, then the others, most recently heard from first."""
        now = self.clock()
        self.prune(now)
        self.own.ts = now  # the gateway answering this is its own proof of life
        others = sorted(self._entries.values(), key=lambda e: e.ts, reverse=True)
        return [self.own, *others]

    def __len__(self) -> int:
        return len(self.entries())
