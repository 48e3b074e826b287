"""The Prometheus collector behind ``fastloop.prometheus`` (imports prometheus_client).

Each scrape reads a snapshot (no thread, no state of its own) and exports
every figure the schema gives a metric: a count as a ``_total`` counter (in
seconds when its unit is ns), a flag as a 0/1 gauge, a histogram as a
Prometheus histogram of seconds whose ``_sum`` is the figure it names, and
the patches installed as ``fastloop_patch_installed{patch}``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry

from fastloop.telemetry.fields import (
    NS,
    Count,
    Flag,
    Gauge,
    Histogram,
    Names,
    Part,
    Section,
)
from fastloop.telemetry.schema import Snapshot

#: Histogram bucket bounds: powers of two of nanoseconds, 2**10 (1.02 us) to
#: 2**34 (17.2 s).  fastloop's log2 bucket i counts durations below 2**i ns,
#: so each bound is exact; a fixed set keeps the same series on every scrape.
BOUND_BITS = range(10, 35)


def cumulative_buckets(counts: Sequence[int]) -> list[tuple[str, float]]:
    """``(le, observations <= le)`` for every bound, then ``+Inf``."""
    seen = sum(counts[: BOUND_BITS.start])
    buckets = []
    for bits in BOUND_BITS:
        seen += counts[bits]  # bucket ``bits`` holds durations below 2**bits
        buckets.append((repr((1 << bits) / 1e9), float(seen)))
    buckets.append(("+Inf", float(sum(counts))))
    return buckets


def families(section: Section, known: Sequence[str]) -> Iterator[Metric]:
    """Every metric the schema declares in ``section`` and its parts."""
    labelled: dict[str, CounterMetricFamily] = {}
    for field in type(section).fields:
        value: Any = getattr(section, field.name)
        if isinstance(field, Part):
            yield from families(value, known)
            continue
        if not isinstance(field.metric, str):
            continue
        scale = 1e-9 if field.unit == NS else 1.0
        if isinstance(field, Count) and field.labels:
            family = labelled.get(field.metric)
            if family is None:  # the first series declared gives the help
                family = labelled[field.metric] = CounterMetricFamily(
                    field.metric, field.help, labels=list(field.labels)
                )
            family.add_metric(list(field.labels.values()), value * scale)
        elif isinstance(field, Count):
            yield CounterMetricFamily(field.metric, field.help, value=value * scale)
        elif isinstance(field, Flag | Gauge):
            yield GaugeMetricFamily(field.metric, field.help, value=float(value))
        elif isinstance(field, Histogram):
            yield HistogramMetricFamily(
                field.metric,
                field.help,
                buckets=cumulative_buckets(value.counts),
                sum_value=getattr(section, field.sum) * scale,
            )
        elif isinstance(field, Names):
            names = GaugeMetricFamily(field.metric, field.help, labels=["patch"])
            for name in known:
                names.add_metric([name], float(name in value))
            yield names
        else:
            raise TypeError(f"no Prometheus family for {type(field).__name__}")
    yield from labelled.values()


class StatsCollector(Collector):
    """Exports a snapshot as read at scrape time."""

    def __init__(
        self, snapshot: Callable[[], Snapshot], known: Callable[[], Sequence[str]]
    ) -> None:
        self._snapshot = snapshot
        self._known = known

    def collect(self) -> Iterator[Metric]:
        yield from families(self._snapshot(), self._known())


_lock = threading.Lock()
_collectors: weakref.WeakKeyDictionary[CollectorRegistry, StatsCollector] = (
    weakref.WeakKeyDictionary()
)


def register(
    registry: CollectorRegistry | None,
    snapshot: Callable[[], Snapshot],
    known: Callable[[], Sequence[str]],
) -> StatsCollector:
    """See ``fastloop.prometheus.register``."""
    target = REGISTRY if registry is None else registry
    with _lock:
        collector = _collectors.get(target)
        if collector is None:
            collector = StatsCollector(snapshot, known)
            target.register(collector)
            _collectors[target] = collector
        return collector
