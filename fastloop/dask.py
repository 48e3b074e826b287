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

Two dask settings gain more than a patch on an idle cluster, and fastloop
leaves both to the application: clients that call actors' workers
directly (``direct_to_workers``, which needs every worker reachable from
the client) and uvloop as distributed's event loop.  ``stats().dask``
counts what it sees of them in this process (``figures``): the actor calls
a scheduler here proxied, and servers on asyncio's loop while uvloop is
installed; ``report()`` then gives the measured gain, and the preload
logs it once.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
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
    _advise(server)


#: How often the scheduler's preload looks for proxied actor calls, until it
#: has said so once.
PROXY_CHECK_MS = 10_000


def _advise(server: Any) -> None:
    """Log each dask advice of ``stats().dask`` once: uvloop now, proxies when seen."""
    from fastloop.telemetry.schema import DaskStats

    said = DaskStats(**figures())
    if said.uvloop:
        log.info("fastloop: %s", said.uvloop)
    if type(server).__name__ != "Scheduler":
        return
    from tornado.ioloop import PeriodicCallback

    def look() -> None:
        advice = DaskStats(**figures()).direct_to_workers
        if advice:
            log.info("fastloop: %s", advice)
            watch.stop()

    watch = PeriodicCallback(look, PROXY_CHECK_MS)
    server.periodic_callbacks["fastloop-advice"] = watch


def proxied_actor_calls() -> int:
    """Actor calls the running dask schedulers of this process proxied to a worker.

    A client without ``direct_to_workers`` sends each actor call to the
    scheduler as a ``proxy`` operation (``distributed.actor.ProxyRPC``), the
    only sender of that operation; a scheduler counts every operation it
    receives (``Server.counters["op"]``, decayed across intervals that keep
    their sum).
    """
    module = sys.modules.get("distributed.scheduler")
    if module is None:
        return 0
    total = 0.0
    for scheduler in _running(getattr(module.Scheduler, "_instances", ())):
        counters = getattr(scheduler, "counters", None) or {}
        counter = counters.get("op")
        for interval in getattr(counter, "components", ()):
            total += interval.get("proxy", 0)
    return round(total)


def _running(servers: Any) -> list[Any]:
    """The servers of a ``_instances`` set that run now (closed ones linger)."""
    return [
        server
        for server in list(servers)
        if getattr(getattr(server, "status", None), "name", "") == "running"
    ]


def _uvloop_installed() -> bool:
    return importlib.util.find_spec("uvloop") is not None


def uvloop_unused() -> bool:
    """Does a dask server here run asyncio's loop while uvloop is installed?"""
    servers = [
        server
        for name, cls in (
            ("distributed.scheduler", "Scheduler"),
            ("distributed.worker", "Worker"),
            ("distributed.nanny", "Nanny"),
        )
        if name in sys.modules
        for server in _running(
            getattr(getattr(sys.modules[name], cls), "_instances", ())
        )
    ]
    loops = {type(getattr(server.loop, "asyncio_loop", None)) for server in servers}
    on_asyncio = any(not kind.__module__.startswith("uvloop") for kind in loops)
    return on_asyncio and _uvloop_installed()


def figures() -> dict[str, Any]:
    """``stats().dask``'s figures, read from this process's dask servers."""
    if "distributed" not in sys.modules:
        return {}
    return {
        "actor_calls_proxied": proxied_actor_calls(),
        "uvloop_unused": uvloop_unused(),
    }


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
