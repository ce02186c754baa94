"""A guard against slow tests: after pytest's ``--durations``, a section naming each test
that took more than :data:`SLOW_SECONDS` (setup, call and teardown together) and is not
marked ``slow``, so a test that newly became slow shows in the output the day it does, and
the quick subset (``-m "not slow"``) stays quick. It never fails the run: a loaded machine
is slower, and timings are no pass/fail criterion. The repository's conftest.py registers
it with :func:`register`.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

#: A test taking longer than this, in seconds, belongs in the slow set (docs/testing.md).
SLOW_SECONDS = 3.0


class SlowTestGuard:
    """Adds up each test's phases as their reports arrive (from the xdist workers too)
    and names, in the terminal summary, those over the bound that are not marked slow."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.marked_slow: set[str] = set()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration
        if "slow" in report.keywords:
            self.marked_slow.add(report.nodeid)

    def unmarked(self) -> list[tuple[str, float]]:
        """(node id, seconds) of the tests over the bound not marked slow, slowest first."""
        over = [(nodeid, seconds) for nodeid, seconds in self.seconds.items()
                if seconds > SLOW_SECONDS and nodeid not in self.marked_slow]
        return sorted(over, key=lambda item: -item[1])

    def pytest_terminal_summary(self, terminalreporter) -> None:
        unmarked = self.unmarked()
        if not unmarked:
            return
        terminalreporter.section(f"tests over {SLOW_SECONDS:g} s not marked slow", sep="=",
                                 yellow=True)
        for nodeid, seconds in unmarked:
            terminalreporter.write_line(f"{seconds:6.2f}s {nodeid}")
        terminalreporter.write_line(
            "Make them faster (a ManualClock, an event, shared fixtures) or mark them "
            "@pytest.mark.slow; the quick subset leaves slow tests out (docs/testing.md).")


def register(config: pytest.Config) -> None:
    """Register the guard, once: on xdist's controller (which gets every worker's reports)
    or in a serial run, never in a worker."""
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(SlowTestGuard(), "chatkernel-slow-test-guard")
