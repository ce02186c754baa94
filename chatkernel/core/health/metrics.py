"""Prometheus metrics of one kernel (its own registry, so tests can run many kernels)."""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics
from prometheus_client.core import HistogramMetricFamily


class Metrics:
    """The counters every part of the kernel reports to."""

    def __init__(self) -> None:
        # No *_created series: a start time per label set, doubling every scrape for
        # nothing a dashboard uses. (prometheus_client's switch is process-wide.)
        disable_created_metrics()
        self.registry = CollectorRegistry()
        labels = ("channel", "account")
        self.messages_in = Counter("chatkernel_messages_in", "Inbound messages journaled",
                                   labels, registry=self.registry)
        self.duplicates = Counter("chatkernel_duplicates", "Redelivered inbound messages ignored",
                                  labels, registry=self.registry)
        self.rejected = Counter("chatkernel_rejected", "Inbound messages refused by policy",
                                labels, registry=self.registry)
        self.inbound_failures = Counter(
            "chatkernel_inbound_failures", "Inbound messages whose processing failed"
            " unexpectedly (their chat got a notice)", labels, registry=self.registry)
        self.messages_out = Counter("chatkernel_messages_out", "Payloads sent", labels,
                                    registry=self.registry)
        self.send_failures = Counter("chatkernel_send_failures", "Payloads that failed to send",
                                     labels, registry=self.registry)
        self.undelivered = Counter(
            "chatkernel_undelivered", "Payloads that did not arrive, by outcome: failed (the"
            " platform refused it or could not be reached), blocked (send policy), unknown"
            " (no answer, or in flight when the gateway stopped), skipped (an earlier part"
            " of its reply failed)", (*labels, "outcome"), registry=self.registry)
        self.store_commit_failures = Counter(
            "chatkernel_store_commit_failures", "Commits of the state database that failed",
            registry=self.registry)
        self.delivery_statuses = Counter(
            "chatkernel_delivery_statuses", "Delivery statuses the platform reported for sent"
            " messages (sent, delivered, read, failed)", (*labels, "status"),
            registry=self.registry)
        self.retries = Counter("chatkernel_send_retries", "Send requests repeated", labels,
                               registry=self.registry)
        self.throttled = Counter("chatkernel_throttled", "429 answers from a platform", labels,
                                 registry=self.registry)
        self.backlogged = Counter(
            "chatkernel_webhook_backlogged", "Webhook requests answered 503 because the accept"
            " backlog stayed full (the platform sends them again)", labels,
            registry=self.registry)
        self.dropped = Counter("chatkernel_queue_dropped", "Queued messages dropped or refused",
                               ("reason",), registry=self.registry)
        self.turns = Counter("chatkernel_turns", "Agent turns run", ("outcome",),
                             registry=self.registry)
        self.turn_seconds = TallyHistogram(
            "chatkernel_turn_seconds", "Agent turn latency",
            buckets=(.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120), registry=self.registry)
        self.queue_depth = Gauge("chatkernel_queue_depth", "Messages waiting in session lanes",
                                 registry=self.registry)
        self.store_round_trips = Gauge(
            "chatkernel_store_round_trips", "Requests this process made to a store it shares "
            "with other processes (Redis) since it started", registry=self.registry)
        self.heartbeats = Counter("chatkernel_heartbeats", "Heartbeat turns run, by outcome"
                                  " (ok, alert, error, preempted)", ("outcome",),
                                  registry=self.registry)
        self.heartbeat_skips = Counter(
            "chatkernel_heartbeat_skips", "Heartbeat runs or sends skipped, by reason"
            " (alerts-disabled, quiet-hours, empty-heartbeat-file, no-tasks-due, dm-blocked,"
            " no-target, alerts-hidden)", ("reason",), registry=self.registry)
        self.restarts = Counter("chatkernel_account_restarts",
                                "Receive loops restarted (after a crash or by the monitor)",
                                labels, registry=self.registry)
        self.monitor_restarts = Counter("chatkernel_monitor_restarts",
                                        "Receive loops the health monitor restarted", labels,
                                        registry=self.registry)
        self.probe_ok = Gauge("chatkernel_probe_ok", "1 when the account's last probe passed",
                              labels, registry=self.registry)
        self.probe_failures = Counter("chatkernel_probe_failures",
                                      "Health probes that failed or timed out", labels,
                                      registry=self.registry)

        self._children: dict[tuple[int, tuple[str, ...]], object] = {}
        self._tallies: dict[tuple[int, tuple[str, ...]], Tally] = {}

    def child(self, metric, *labels: str):
        """``metric.labels(*labels)``, memoized: the hot path counts every message."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def tally(self, metric: Counter, *labels: str) -> "Tally":
        """A :class:`Tally` of ``metric.labels(*labels)``, for counts made per message."""
        key = (id(metric), labels)
        found = self._tallies.get(key)
        if found is None:
            found = self._tallies[key] = Tally(self.child(metric, *labels))
        return found

    def count(self, metric: Counter, *labels: str) -> None:
        """Add one to ``metric.labels(*labels)`` through its :class:`Tally` (one call a
        message where ``tally(...).inc()`` made two)."""
        found = self._tallies.get((id(metric), labels))
        if found is None:
            found = self.tally(metric, *labels)
        found.pending += 1

    def sync(self) -> None:
        """Add the tallies' counts to their Prometheus counters."""
        for tally in self._tallies.values():
            tally.sync()

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        self.sync()
        return generate_latest(self.registry)


class Tally:
    """A counter for the hot path: a plain number, added to its Prometheus counter
    by :meth:`Metrics.sync` (which :meth:`Metrics.render` calls).

    A Prometheus counter takes a lock and checks itself on every ``inc``, several
    times the cost of this; the kernel runs on one thread, so a plain ``+=`` is safe.
    """

    __slots__ = ("_counter", "pending")

    def __init__(self, counter: Any) -> None:
        self._counter = counter
        self.pending: float = 0

    def inc(self, amount: float = 1) -> None:
        self.pending += amount

    def sync(self) -> None:
        if self.pending:
            pending, self.pending = self.pending, 0
            self._counter.inc(pending)


class TallyHistogram:
    """A histogram for the hot path (one observation per turn): plain counts per
    bucket, read by the registry when ``/metrics`` renders.

    A Prometheus ``Histogram.observe`` takes a lock and walks its buckets; this
    is a bisect and two additions (one thread, as for :class:`Tally`).
    """

    def __init__(self, name: str, documentation: str, *, buckets: Sequence[float],
                 registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = tuple(float(bound) for bound in buckets)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one: above every bound
        self.sum = 0.0
        registry.register(self)

    def observe(self, value: float) -> None:
        # bisect_left: a value equal to a bound counts in that bound's bucket (le).
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def describe(self) -> list[HistogramMetricFamily]:
        return [HistogramMetricFamily(self.name, self.documentation)]

    def collect(self) -> Iterator[HistogramMetricFamily]:
        cumulative, buckets = 0, []
        for bound, count in zip((*self.bounds, float("inf")), self.counts):
            cumulative += count
            buckets.append((_bucket_label(bound), cumulative))
        family = HistogramMetricFamily(self.name, self.documentation)
        family.add_metric([], buckets, self.sum)
        yield family


def _bucket_label(bound: float) -> str:
    """A bucket's ``le`` label as Prometheus clients write it (``0.05``, ``1.0``, ``+Inf``)."""
    return "+Inf" if bound == float("inf") else repr(bound)
