"""Metrics: hot-path tallies reach the Prometheus exposition."""

from chatkernel.core.metrics import Metrics


def _line(text: str, prefix: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(prefix))


def test_tallies_are_added_to_their_counters_when_rendered():
    metrics = Metrics()
    tally = metrics.tally(metrics.messages_in, "memory", "main")
    assert metrics.tally(metrics.messages_in, "memory", "main") is tally  # memoized
    tally.inc()
    tally.inc(2)
    prefix = 'chatkernel_messages_in_total{account="main",channel="memory"}'
    assert _line(metrics.render().decode(), prefix) == f"{prefix} 3.0"
    tally.inc()
    # Each render adds only what was counted since the last one.
    assert _line(metrics.render().decode(), prefix) == f"{prefix} 4.0"
    assert _line(metrics.render().decode(), prefix) == f"{prefix} 4.0"


def test_tallies_and_direct_counts_of_one_counter_add_up():
    metrics = Metrics()
    metrics.tally(metrics.turns, "ok").inc()
    metrics.child(metrics.turns, "ok").inc()
    metrics.sync()
    assert metrics.child(metrics.turns, "ok")._value.get() == 2
