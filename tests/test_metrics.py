"""Metrics: hot-path tallies reach the Prometheus exposition."""

from chatkernel.core.health.metrics import Metrics


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


def test_count_adds_one_to_the_labels_tally_made_on_first_use():
    metrics = Metrics()
    metrics.count(metrics.messages_in, "memory", "main")
    metrics.count(metrics.messages_in, "memory", "main")
    metrics.count(metrics.messages_in, "memory", "other")
    assert metrics.tally(metrics.messages_in, "memory", "main").pending == 2
    prefix = 'chatkernel_messages_in_total{account="other",channel="memory"}'
    assert _line(metrics.render().decode(), prefix) == f"{prefix} 1.0"


def test_turn_seconds_renders_cumulative_buckets_count_and_sum():
    metrics = Metrics()
    for seconds in (0.01, 0.05, 0.3, 7.0, 500.0):
        metrics.turn_seconds.observe(seconds)
    text = metrics.render().decode()
    bucket = 'chatkernel_turn_seconds_bucket{le="%s"}'
    assert _line(text, bucket % "0.05") == f'{bucket % "0.05"} 2.0'  # le: 0.05 itself counts
    assert _line(text, bucket % "0.1") == f'{bucket % "0.1"} 2.0'
    assert _line(text, bucket % "0.5") == f'{bucket % "0.5"} 3.0'
    assert _line(text, bucket % "10.0") == f'{bucket % "10.0"} 4.0'
    assert _line(text, bucket % "120.0") == f'{bucket % "120.0"} 4.0'
    assert _line(text, bucket % "+Inf") == f'{bucket % "+Inf"} 5.0'
    assert _line(text, "chatkernel_turn_seconds_count ") == "chatkernel_turn_seconds_count 5.0"
    assert _line(text, "chatkernel_turn_seconds_sum ") == "chatkernel_turn_seconds_sum 507.36"
    assert "# TYPE chatkernel_turn_seconds histogram" in text


def test_no_created_series_are_exposed():
    metrics = Metrics()
    metrics.child(metrics.messages_in, "memory", "main").inc()
    metrics.child(metrics.undelivered, "memory", "main", "failed").inc()
    metrics.child(metrics.turns, "ok").inc()
    metrics.turn_seconds.observe(0.2)
    text = metrics.render().decode()
    assert 'chatkernel_messages_in_total{account="main",channel="memory"} 1.0' in text
    assert "_created" not in text
