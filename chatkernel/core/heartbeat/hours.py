"""Active hours: when a heartbeat may run, in which time zone, and when the window
opens next."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from datetime import time as time_of_day
from datetime import tzinfo

from chatkernel.core.config import ActiveHours

log = logging.getLogger("chatkernel.heartbeat")


def zone_for(name: str, user_zone: str | None = None) -> tzinfo | None:
    """The zone of an ``active_hours.timezone``; None is the gateway's local time.

    ``user`` is the session's own zone (``/heartbeat tz``), else local time.
    """
    if name == "user":
        name = user_zone or "local"
    if name == "local":
        return None
    import zoneinfo

    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        log.warning("unknown time zone %r: using the local time", name)
        return None


def _minutes(clock: str) -> int:
    hours, minutes = clock.split(":")
    return int(hours) * 60 + int(minutes)


def in_active_hours(ts: float, hours: ActiveHours, zone: tzinfo | None) -> bool:
    """Whether ``start <= time of day < end`` at ``ts`` (a Unix time) in ``zone``.

    ``start`` after ``end`` spans midnight; ``start == end`` is never.
    """
    start, end = _minutes(hours.start), _minutes(hours.end)
    if start == end:
        return False
    local = datetime.fromtimestamp(ts, zone)
    now = local.hour * 60 + local.minute
    if start < end:
        return start <= now < end
    return now >= start or now < end


def next_window_start(ts: float, hours: ActiveHours, zone: tzinfo | None) -> float | None:
    """The next time after ``ts`` the window opens (None: an empty window never does)."""
    start = _minutes(hours.start)
    if start == _minutes(hours.end):
        return None
    local = datetime.fromtimestamp(ts, zone)
    for days in range(3):
        day = local.date() + timedelta(days=days)
        opening = datetime.combine(day, time_of_day(start // 60, start % 60), tzinfo=zone)
        if opening.timestamp() > ts:
            return opening.timestamp()
    return None  # pragma: no cover - a window opens within two days


def when(ts: float, zone: tzinfo | None) -> str:
    """``ts`` as a moment in ``zone`` (None: local time), for logs and envelopes."""
    moment = datetime.fromtimestamp(ts, zone)
    if zone is None:
        moment = moment.astimezone()
    return moment.strftime("%Y-%m-%d %H:%M %Z").strip()
