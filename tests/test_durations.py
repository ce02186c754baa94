"""Spans of time in config and commands: debounce durations and schedule intervals."""

from __future__ import annotations

import pytest

from chatkernel.core.durations import format_interval, parse_duration_ms, parse_interval


def test_parse_interval():
    assert parse_interval("30m") == 1800
    assert parse_interval("1h30m") == 5400
    assert parse_interval("1.5h") == 5400
    assert parse_interval("7d") == 7 * 86400
    assert parse_interval("90s") == 90
    assert parse_interval("0") == parse_interval(0) == 0
    for bad in ("30", "soon", "", "1h x", "-5m", True):
        with pytest.raises(ValueError):
            parse_interval(bad)


def test_format_interval_and_short_durations():
    assert [format_interval(s) for s in (45, 1800, 5400, 86400 + 60)] == \
        ["45s", "30m", "1h30m", "1d1m"]
    assert parse_duration_ms("2s") == 2000  # still the debounce reading: bare number = ms
    assert parse_duration_ms("250") == 250
