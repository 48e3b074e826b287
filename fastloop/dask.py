"""dask integration: a preload that installs fastloop, and cluster-wide stats.

    dask scheduler --preload fastloop.dask
    dask worker tcp://... --preload fastloop.dask
    # or dask config: distributed.scheduler.preload / distributed.worker.preload

    from fastloop.dask import cluster_stats
    cluster_stats(client)      # per process, and summed

Needs ``distributed`` only when used.  The preload installs every patch
that applies in that process (scheduler, worker or nanny) and logs what it
installed on dask's own ``distributed.preloading`` logger, at INFO, which
dask's default logging configuration shows; ``cluster_stats`` gathers
``fastloop.stats()`` from the scheduler and every worker with
``Client.run_on_scheduler`` / ``Client.run``, which reach every process of
the cluster without any handler of ours.

With ``prometheus_client`` installed the preload also registers
``fastloop.prometheus`` on the global registry, the one distributed's own
``/metrics`` endpoints serve: Prometheus sees fastloop with no new port.
"""

from __future__ import annotations

import logging
from typing import Any, TypeVar

from fastloop import _registry
from fastloop._snapshot import WatchdogStats, WriteStats
from fastloop._stats import stats
from fastloop.observers._gil_stats import GilStats, GilWaits, advice

T = TypeVar("T", WriteStats, WatchdogStats, GilWaits)

#: dask configures the ``distributed`` logger at INFO and shows it by
#: default; ``fastloop``'s own INFO lines would not appear in dask's logs.
log = logging.getLogger("distributed.preloading")


def dask_setup(server: object) -> None:
    """dask's preload hook: called once in each scheduler or worker process."""
    _registry.install()
    active = _registry.installed()
    verdicts = _registry.available()
    declined = [
        f"{n} ({why})" for n, why in verdicts.items() if why and n not in active
    ]
    log.info(
        "fastloop: preload in %s: patches %s active%s",
        type(server).__name__,
        ", ".join(sorted(active)) or "none",
        f"; declined: {'; '.join(declined)}" if declined else "",
    )
    _export_metrics()


def _export_metrics() -> None:
    """Add fastloop's metrics to the registry distributed's ``/metrics`` serves."""
    from fastloop import prometheus

    try:
        prometheus.register()
    except ImportError as exc:  # distributed serves no /metrics without it either
        log.info("fastloop: no Prometheus metrics: %s", exc)


def _snapshot() -> dict[str, Any]:
    return stats().to_dict()


#: How ``cluster_stats`` merges the keys of ``stats().to_dict()``, by name
#: (tests/test_report.py checks that every key that is not a count is named
#: here); a key named nowhere is a count, summed.
MAXIMA = frozenset({"max_ns", "max_blocked_ns", "max_lag_ns"})
HISTOGRAMS = frozenset({"histogram", "lag_histogram"})
FLAGS = frozenset({"watching", "probing"})  # true if true in any process
#: Recomputed from the merged counts, not merged.
DERIVED = frozenset(
    {
        *("p50_ns", "p90_ns", "p99_ns"),
        *("lag_p50_ns", "lag_p90_ns", "lag_p99_ns"),
        *("fraction", "advice"),
    }
)


def _add(total: dict[str, Any], part: dict[str, Any]) -> None:
    for key, value in part.items():
        if key == "installed":  # patch name -> processes it is active in
            counts = total.setdefault(key, {})
            for name in value:
                counts[name] = counts.get(name, 0) + 1
        elif isinstance(value, dict):
            _add(total.setdefault(key, {}), value)
        elif key in HISTOGRAMS:
            merged = dict(map(tuple, total.get(key, [])))
            for upper, count in value:
                merged[upper] = merged.get(upper, 0) + count
            total[key] = sorted([upper, count] for upper, count in merged.items())
        elif key in DERIVED:
            continue
        elif key in FLAGS:
            total[key] = total.get(key, False) or value
        elif key in MAXIMA:
            total[key] = max(total.get(key, 0), value)
        else:
            total[key] = total.get(key, 0) + value


def _rebuild(kind: type[T], data: dict[str, Any]) -> T:
    """The stats dataclass back from its merged ``to_dict()`` form."""
    known = kind.__dataclass_fields__
    fields = {k: v for k, v in data.items() if k in known}
    for key, value in fields.items():
        if key in HISTOGRAMS:
            fields[key] = tuple((upper, count) for upper, count in value)
    return kind(**fields)


def cluster_stats(client: Any) -> dict[str, Any]:
    """``{"scheduler": {...}, "workers": {address: {...}}, "total": {...}}``.

    Each snapshot is ``fastloop.stats().to_dict()`` of that process, whose
    ``installed`` lists the patches active there (a process without a patch
    counts nothing for it: not an idle zero).  The total counts processes,
    and per patch the processes it is active in; it sums counts and bytes,
    merges the histograms (its percentiles come from the merged one), and
    takes the maximum of maxima.
    """
    scheduler = client.run_on_scheduler(_snapshot)
    workers = client.run(_snapshot)
    parts = (scheduler, *workers.values())
    total: dict[str, Any] = {"processes": len(parts), "installed": {}}
    for part in parts:
        _add(total, part)
    writes, lags = total["write_to_fd"], total["watchdog"]
    merged_writes = _rebuild(WriteStats, writes)
    merged_lags = _rebuild(WatchdogStats, lags)
    writes.update(merged_writes.percentile_fields())
    for name, fraction in (("p50_ns", 0.50), ("p90_ns", 0.90), ("p99_ns", 0.99)):
        lags[f"lag_{name}"] = merged_lags.lag_percentile_ns(fraction)
    waits = {}
    for source in ("poll", "probe"):
        data = total["gil"][source]
        waits[source] = merged = _rebuild(GilWaits, data)
        data.update(merged.percentile_fields(), fraction=merged.fraction)
    everywhere = total["installed"].get("switchinterval", 0) == len(parts)
    total["gil"]["advice"] = advice(
        GilStats(total["gil"]["probing"], waits["poll"], waits["probe"]), everywhere
    )
    return {"scheduler": scheduler, "workers": dict(workers), "total": total}
