"""Spans of time as people write them in config and commands: ``500ms``, ``2s``, ``30m``.

Two readings share one grammar. :func:`parse_duration_ms` is for short waits
(debounce): a bare number is milliseconds. :func:`parse_interval` is for
schedules (heartbeats, HEARTBEAT.md tasks): a unit is required except for
``0``, parts may be combined (``1h30m``), and days are allowed (``7d``).
"""

from __future__ import annotations

import re

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)?")
_INTERVAL_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_INTERVAL_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration_ms(text: str) -> int:
    """``1500``/``1500ms`` → 1500, ``2s`` → 2000, ``1.5m`` → 90000."""
    match = _DURATION.fullmatch(text.strip().lower())
    if not match:
        raise ValueError(f"not a duration: {text!r} (e.g. 500ms, 2s, 1m)")
    scale = {"ms": 1, None: 1, "s": 1000, "m": 60_000, "h": 3_600_000}[match[2]]
    return int(float(match[1]) * scale)


def parse_interval(text: str | int | float) -> float:
    """An interval in seconds: ``30m`` → 1800, ``1h30m`` → 5400, ``7d``, ``0`` → 0.

    A number other than 0 needs a unit (is ``30`` seconds or minutes?); the
    error says so. Raises ValueError naming what was given.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text == 0:
            return 0.0
        raise ValueError(f"{text!r} needs a unit: write e.g. \"{text}m\" or \"{text}s\" "
                         "(0 disables)")
    if not isinstance(text, str):
        raise ValueError(f"not an interval: {text!r} (e.g. 30m, 1h30m, 7d; 0 disables)")
    compact = "".join(text.lower().split())
    if compact and compact.replace(".", "", 1).isdigit():
        if float(compact) == 0:
            return 0.0
        raise ValueError(f"{text!r} needs a unit: write e.g. \"{compact}m\" or "
                         f"\"{compact}s\" (0 disables)")
    position, total = 0, 0.0
    for match in _INTERVAL_PART.finditer(compact):
        if match.start() != position:
            break
        total += float(match[1]) * _INTERVAL_SECONDS[match[2]]
        position = match.end()
    if not compact or position != len(compact):
        raise ValueError(f"not an interval: {text!r} (e.g. 30m, 1h30m, 7d; 0 disables)")
    return total


def format_interval(seconds: float) -> str:
    """The short form of an interval: 1800 → ``30m``, 5400 → ``1h30m``, 45 → ``45s``."""
    seconds = int(round(seconds))
    if seconds <= 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            count, seconds = divmod(seconds, size)
            parts.append(f"{count}{unit}")
    return "".join(parts)
