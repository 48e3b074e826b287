"""The Prometheus collector behind ``fastloop.prometheus`` (imports prometheus_client).

It reads the public ``stats().to_dict()`` on each scrape (no thread, no
state of its own), so a new stats section only needs an entry in
``SECTIONS``: which of its keys become which metric.  ``NOT_EXPORTED`` names
the keys left out on purpose; a test fails on any key in neither, so a
new counter cannot go missing silently.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry

from fastloop._registry import installed, known
from fastloop._stats import stats

NS = 1e-9

#: Histogram bucket bounds: powers of two of nanoseconds, 2**10 (1.02 us) to
#: 2**34 (17.2 s).  fastloop's log2 bucket i counts durations below 2**i ns,
#: so each bound is exact; a fixed set keeps the same series on every scrape.
BOUND_BITS = range(10, 35)


@dataclass(frozen=True)
class Counter:
    """A monotonic count (``_total`` is appended); ``scale`` converts units."""

    name: str
    help: str
    key: str
    scale: float = 1.0

    def reads(self) -> tuple[str, ...]:
        """The section keys it exports (each spec class has this method)."""
        return (self.key,)

    def family(self, data: Mapping[str, Any]) -> Metric:
        return CounterMetricFamily(
            self.name, self.help, value=data[self.key] * self.scale
        )


@dataclass(frozen=True)
class Gauge:
    """A value that goes up and down (booleans export as 0/1)."""

    name: str
    help: str
    key: str

    def reads(self) -> tuple[str, ...]:
        return (self.key,)

    def family(self, data: Mapping[str, Any]) -> Metric:
        return GaugeMetricFamily(self.name, self.help, value=float(data[self.key]))


@dataclass(frozen=True)
class Histogram:
    """A log2 histogram of nanoseconds as a Prometheus histogram of seconds.

    ``key`` holds ``[[upper_ns, count], ...]``, ``count_key`` the number of
    observations, ``sum_key`` their total in ns.
    """

    name: str
    help: str
    key: str
    count_key: str
    sum_key: str

    def reads(self) -> tuple[str, ...]:
        return (self.key, self.count_key, self.sum_key)

    def family(self, data: Mapping[str, Any]) -> Metric:
        return HistogramMetricFamily(
            self.name,
            self.help,
            buckets=cumulative_buckets(data[self.key], data[self.count_key]),
            sum_value=data[self.sum_key] * NS,
        )


def cumulative_buckets(
    histogram: Sequence[Sequence[int]], count: int
) -> list[tuple[str, float]]:
    """``(le, observations <= le)`` for every bound, then ``+Inf``."""
    per_bits = [0] * (BOUND_BITS.stop + 1)
    for upper_ns, observations in histogram:
        # fastloop's bucket i has upper bound 2**i - 1 ns: bit_length() is i.
        per_bits[min(upper_ns.bit_length(), BOUND_BITS.stop)] += observations
    buckets = []
    seen = sum(per_bits[: BOUND_BITS.start])
    for bits in BOUND_BITS:
        seen += per_bits[bits]
        buckets.append((repr((1 << bits) / 1e9), float(seen)))
    buckets.append(("+Inf", float(count)))
    return buckets


Spec = Counter | Gauge | Histogram

#: ``stats().to_dict()`` section -> its metrics.  Add a section here.
SECTIONS: dict[str, tuple[Spec, ...]] = {
    "write_to_fd": (
        Histogram(
            "fastloop_write_to_fd_seconds",
            "Wall time of each write_to_fd call of every tornado.iostream stream "
            "(_count is the number of calls)",
            key="histogram",
            count_key="calls",
            sum_key="total_ns",
        ),
        Counter(
            "fastloop_write_to_fd_offered_bytes",
            "Bytes passed to write_to_fd",
            "bytes_offered",
        ),
        Counter(
            "fastloop_write_to_fd_written_bytes",
            "Bytes write_to_fd wrote to the socket or pipe",
            "bytes_written",
        ),
        Counter(
            "fastloop_write_to_fd_would_block",
            "write_to_fd calls that wrote nothing (0 returned or BlockingIOError)",
            "would_block",
        ),
        Counter(
            "fastloop_write_to_fd_errors",
            "write_to_fd calls that raised an error other than would-block",
            "errors",
        ),
        Counter(
            "fastloop_write_to_fd_slow",
            "write_to_fd calls slower than FASTLOOP_SLOW_WRITE_MS",
            "slow",
        ),
        Counter(
            "fastloop_write_to_fd_cpu_seconds",
            "Thread CPU time in write_to_fd calls, counted with FASTLOOP_WRITE_CPU=1",
            "cpu_ns",
            scale=NS,
        ),
    ),
    "add_callback": (
        Counter(
            "fastloop_onloop_callbacks",
            "Callbacks added on the loop thread and run by fastloop batches",
            "onloop_callbacks",
        ),
        Counter(
            "fastloop_onloop_batches",
            "Batches of on-loop callbacks the loops ran (one ready-queue entry each)",
            "onloop_batches",
        ),
        Counter(
            "fastloop_xthread_callbacks",
            "IOLoop.add_callback calls from threads other than the loop's",
            "remote_callbacks",
        ),
        Counter(
            "fastloop_xthread_batches",
            "Batches of cross-thread callbacks the loops ran (one wake-up each)",
            "batches",
        ),
        Counter(
            "fastloop_xthread_batched_callbacks",
            "Callbacks run by those batches",
            "batched",
        ),
    ),
    "wakeup": (
        Counter(
            "fastloop_wakeups_requested",
            "Self-pipe wake-ups asked for (every call_soon_threadsafe)",
            "requested",
        ),
        Counter(
            "fastloop_wakeups_written",
            "Bytes written to a self-pipe; the other requests were coalesced",
            "written",
        ),
    ),
    "watchdog": (
        Gauge(
            "fastloop_watchdog_running",
            "1 while a blocked-loop watchdog runs in this process",
            "watching",
        ),
        Counter(
            "fastloop_watchdog_blocked_episodes",
            "Times a loop stayed away from its selector longer than the threshold",
            "episodes",
        ),
        Counter(
            "fastloop_watchdog_blocked_seconds",
            "Total time of those blocked episodes",
            "blocked_ns",
            scale=NS,
        ),
        Histogram(
            "fastloop_loop_lag_seconds",
            "Lag of each watchdog heartbeat: from posting it to the loop running it",
            key="lag_histogram",
            count_key="beats",
            sum_key="lag_ns",
        ),
    ),
    "poll": (
        Counter(
            "fastloop_polls_skipped",
            "Zero-timeout selector polls answered without a syscall (poll_us > 0)",
            "skipped",
        ),
    ),
    "gil": (
        Gauge(
            "fastloop_gil_probe_running",
            "1 while the GIL contention probe thread runs in this process",
            "probing",
        ),
    ),
    "gil.poll": (
        Histogram(
            "fastloop_gil_wait_at_poll_seconds",
            "Wall minus thread CPU time of sampled zero-timeout polls of the loops: "
            "the wait to get the GIL back",
            key="histogram",
            count_key="samples",
            sum_key="total_ns",
        ),
    ),
    "gil.probe": (
        Histogram(
            "fastloop_gil_wait_probe_seconds",
            "How late the GIL probe thread woke from each fixed sleep",
            key="histogram",
            count_key="samples",
            sum_key="total_ns",
        ),
        Counter(
            "fastloop_gil_probe_seconds",
            "Time the GIL probe covered (rate of the wait sum over this: fraction)",
            "elapsed_ns",
            scale=NS,
        ),
    ),
}

#: Keys of those sections left out on purpose: maxima and percentiles since
#: start-up or ``reset_stats()`` (histogram_quantile over the histograms
#: answers per time window), and values derived from exported ones.
NOT_EXPORTED: dict[str, frozenset[str]] = {
    "write_to_fd": frozenset(
        {"max_ns", "p50_ns", "p90_ns", "p99_ns", "cpu_calls", "stalled_ns"}
    ),
    "watchdog": frozenset(
        {"max_blocked_ns", "max_lag_ns", "lag_p50_ns", "lag_p90_ns", "lag_p99_ns"}
    ),
    "gil": frozenset({"advice"}),
    "gil.poll": frozenset(
        {"max_ns", "elapsed_ns", "p50_ns", "p90_ns", "p99_ns", "fraction"}
    ),
    "gil.probe": frozenset({"max_ns", "p50_ns", "p90_ns", "p99_ns", "fraction"}),
}


def sections(
    snapshot: Mapping[str, Any], prefix: str = ""
) -> dict[str, dict[str, Any]]:
    """Every dict of ``stats().to_dict()`` by dotted name, with its plain keys."""
    found: dict[str, dict[str, Any]] = {}
    for key, value in snapshot.items():
        if isinstance(value, dict):
            name = prefix + key
            found[name] = {k: v for k, v in value.items() if not isinstance(v, dict)}
            found.update(sections(value, name + "."))
    return found


class StatsCollector(Collector):
    """Exports ``fastloop.stats()`` as read at scrape time."""

    def collect(self) -> Iterator[Metric]:
        found = sections(stats().to_dict())
        for section, specs in SECTIONS.items():
            for spec in specs:
                yield spec.family(found[section])
        patches = GaugeMetricFamily(
            "fastloop_patch_installed",
            "1 for each fastloop patch active in this process",
            labels=["patch"],
        )
        active = installed()
        for name in known():
            patches.add_metric([name], float(name in active))
        yield patches


_lock = threading.Lock()
_collectors: weakref.WeakKeyDictionary[CollectorRegistry, StatsCollector] = (
    weakref.WeakKeyDictionary()
)


def register(registry: CollectorRegistry | None = None) -> StatsCollector:
    """See ``fastloop.prometheus.register``."""
    target = REGISTRY if registry is None else registry
    with _lock:
        collector = _collectors.get(target)
        if collector is None:
            collector = StatsCollector()
            target.register(collector)
            _collectors[target] = collector
        return collector
