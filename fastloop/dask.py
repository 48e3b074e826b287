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
from functools import reduce
from typing import Any

import fastloop
from fastloop.patches import registry

#: dask configures the ``distributed`` logger at INFO and shows it by
#: default; ``fastloop``'s own INFO lines would not appear in dask's logs.
log = logging.getLogger("distributed.preloading")


def dask_setup(server: object) -> None:
    """dask's preload hook: called once in each scheduler or worker process."""
    registry.install()
    active = registry.installed()
    verdicts = registry.available()
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
    return fastloop.stats().to_dict()


def cluster_stats(client: Any) -> dict[str, Any]:
    """``{"scheduler": {...}, "workers": {address: {...}}, "total": {...}}``.

    Each snapshot is ``fastloop.stats().to_dict()`` of that process, whose
    ``installed`` lists the patches active there (a process without a patch
    counts nothing for it: not an idle zero).  The total is the snapshots
    merged (``Snapshot.merge``: counts and bytes summed, histograms merged
    and their percentiles read from the merged one, the maximum of maxima),
    with the number of processes and, per patch, the processes it is
    active in.
    """
    from fastloop.telemetry.schema import Snapshot

    scheduler = client.run_on_scheduler(_snapshot)
    workers = client.run(_snapshot)
    parts = (scheduler, *workers.values())
    merged = reduce(Snapshot.merge, (Snapshot.from_dict(part) for part in parts))
    counts: dict[str, int] = {}
    for part in parts:
        for name in part["installed"]:
            counts[name] = counts.get(name, 0) + 1
    total: dict[str, Any] = {"processes": len(parts), "installed": counts}
    total.update((k, v) for k, v in merged.to_dict().items() if k != "installed")
    return {"scheduler": scheduler, "workers": dict(workers), "total": total}
