"""When a job is due: its slots, from a cron expression in a time zone, an interval, or
one moment. Pure functions of the time given, so tests drive them with any clock.

Cron expressions are read by cronsim, which follows Debian's cron across daylight saving
changes: a job at a fixed time in the hour that is skipped in spring runs when the clocks
jump (02:30 on the day Berlin skips 02:00–03:00 runs at 03:00), one in the hour that
repeats in autumn runs once, at its first occurrence; a job that runs more often than
hourly keeps its pattern through the change (``*/30`` runs at both 02:00s). A slot is a
Unix time, so the two 02:00s are two slots.

An interval's slots lie on a grid from the job's position (``cursor``): its first slot is
one interval after the job was added or first seen, each next one interval later. A
one-shot job has one slot.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from typing import NamedTuple

from chatkernel.core.config.jobs import JobConfig, parse_at
from chatkernel.core.durations import format_interval


def local_zone() -> tzinfo:
    """The gateway's own time zone, with its rules (``TZ``, else /etc/localtime), so a
    ``tz = "local"`` cron job follows its daylight saving changes; UTC when neither
    names one."""
    import zoneinfo

    name = os.environ.get("TZ", "").lstrip(":")
    if name:
        try:
            return zoneinfo.ZoneInfo(name)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            pass
    try:
        with open("/etc/localtime", "rb") as file:
            return zoneinfo.ZoneInfo.from_file(file, key="localtime")
    except (OSError, ValueError):
        return timezone.utc


def zone_named(name: str) -> tzinfo:
    """``local`` or an IANA zone (checked by the config already)."""
    if name == "local":
        return local_zone()
    import zoneinfo

    return zoneinfo.ZoneInfo(name)


class Due(NamedTuple):
    """The slot to act on now: the latest one due, and how many earlier ones it stands
    for (missed while the gateway was down or the loop stalled: they coalesce)."""

    slot: float
    coalesced: int


@dataclass(frozen=True, slots=True)
class Schedule:
    """One job's schedule: ``cron`` in ``zone``, ``every`` seconds, or ``at`` a moment."""

    cron: str | None = None
    zone: tzinfo | None = None
    every: float | None = None
    at: float | None = None

    @classmethod
    def of(cls, job: JobConfig) -> "Schedule":
        if job.cron is not None:
            return cls(cron=job.cron, zone=zone_named(job.tz))
        if job.every is not None:
            return cls(every=job.interval())
        if job.at is not None:
            return cls(at=parse_at(job.at).timestamp())
        raise ValueError("a job with `in` is stored with its `at` (jobs add, /remind)")

    @property
    def one_shot(self) -> bool:
        return self.at is not None

    def describe(self) -> str:
        if self.cron is not None:
            return f"cron {self.cron!r} in {getattr(self.zone, 'key', None) or self.zone}"
        if self.every is not None:
            return f"every {format_interval(self.every)}"
        assert self.at is not None
        return f"at {datetime.fromtimestamp(self.at, timezone.utc).isoformat()}"

    def next_after(self, cursor: float, after: float | None = None) -> float | None:
        """The first slot after ``after`` (default: the ``cursor``) of the schedule whose
        position is ``cursor``; None: no more (a one-shot's slot is past)."""
        after = cursor if after is None else max(after, cursor)
        if self.at is not None:
            return self.at if self.at > after else None
        if self.every is not None:
            steps = math.floor((after - cursor) / self.every) + 1
            return cursor + steps * self.every
        return self._cron_after(after)

    def due(self, cursor: float, now: float) -> Due | None:
        """The latest slot after ``cursor`` and at most ``now``, if any."""
        if self.cron is None:
            first = self.next_after(cursor)
            if first is None or first > now:
                return None
            if self.at is not None:
                return Due(first, 0)
            assert self.every is not None
            steps = math.floor((now - cursor) / self.every)
            return Due(cursor + steps * self.every, steps - 1)
        slots = self._cron_slots(cursor)
        latest, coalesced = None, -1
        for _ in range(1000):  # the usual case: one slot, or a few missed
            slot = next(slots, None)
            if slot is None or slot > now:
                return None if latest is None else Due(latest, coalesced)
            latest, coalesced = slot, coalesced + 1
        before = self._cron_before(now)  # a long outage: straight to the latest
        return Due(before if before is not None else latest, coalesced + 1)

    def _cron_slots(self, ts: float) -> Iterator[float]:
        from cronsim import CronSim

        for moment in CronSim(self.cron, datetime.fromtimestamp(ts, self.zone)):  # type: ignore[arg-type]
            yield moment.timestamp()

    def _cron_after(self, ts: float) -> float | None:
        return next(self._cron_slots(ts), None)  # None: nothing in the next fifty years

    def _cron_before(self, ts: float) -> float | None:
        from cronsim import CronSim

        # cronsim counts in whole seconds and returns slots strictly before its start.
        start = datetime.fromtimestamp(math.floor(ts), self.zone) + timedelta(seconds=1)
        try:
            found = next(CronSim(self.cron, start, reverse=True)).timestamp()  # type: ignore[arg-type]
        except StopIteration:
            return None
        return found if found <= ts else None
