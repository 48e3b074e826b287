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
It gives dask's own monitor a GIL contention figure where gilknocker is
absent (``fastloop.dask.gil``), and the scheduler's dashboard a
``/fastloop`` page fed by the workers' heartbeats (``fastloop.dask.dashboard``).

Settings come from dask's config too (a ``fastloop:`` section) and from
the preload's arguments (``preload-argv`` in dask's config, or, on dask's
command line, ``--preload fastloop.dask.cli --block-ms 50``);
``fastloop.dask.settings`` states the precedence.  What fastloop advises
beyond its patches is in ``fastloop.dask.advice``.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from functools import reduce
from typing import Any, TypeVar

import fastloop
from fastloop import config
from fastloop.patches import registry

#: dask configures the ``distributed`` logger at INFO and shows it by
#: default; ``fastloop``'s own INFO lines would not appear in dask's logs.
log = logging.getLogger("distributed.preloading")

T = TypeVar("T")


def dask_setup(server: object) -> None:
    """dask's preload hook: once in each scheduler, worker or nanny process.

    Its arguments are the ones dask's config or API gives this preload
    (``preload-argv``, ``preload_argv=``); on dask's command line, preload
    ``fastloop.dask.cli`` to pass them.
    """
    setup(server, _own_arguments(server))


def _own_arguments(server: object) -> list[str]:
    """The arguments dask keeps for this module's entry among the server's preloads."""
    module = sys.modules[__name__]
    for preload in getattr(server, "preloads", None) or ():
        if getattr(preload, "module", None) is module:
            return [str(argument) for argument in getattr(preload, "argv", ())]
    return []


def setup(server: object, arguments: Sequence[str] = ()) -> None:
    """The preload's work, with its arguments (``dask_setup`` finds them)."""
    # Here, not at the top: stats() imports this package in every process
    # (for advice.figures), dask or not, at exit too.
    from fastloop.dask import advice, dashboard, gil, settings

    chosen = settings.choose(os.environ, arguments, settings.dask_section())
    for problem in chosen.problems:
        log.warning("%s", problem)
    _step("settings", _apply, chosen)
    registry.install(chosen.patches)
    active = registry.installed()
    verdicts = registry.available()
    declined = [
        f"{n} ({why})" for n, why in verdicts.items() if why and n not in active
    ]
    contention = _step("GIL contention", gil.supply, server)
    page = None
    if _is(server, "Worker"):
        _step("dashboard figures", dashboard.add_to_worker, server)
    elif _is(server, "Scheduler"):
        page = _step("dashboard page", dashboard.add_to_scheduler, server)
    chose = [
        f"{settings.key(name)}={value} ({chosen.sources[name]})"
        for name, value in chosen.values.items()
        if config.sources.get(name) == chosen.sources[name]
        and chosen.sources[name] != config.BY_NAME[name].variable
    ]
    log.info(
        "fastloop: preload in %s: patches %s active%s%s%s%s",
        type(server).__name__,
        ", ".join(sorted(active)) or "none",
        f"; declined: {'; '.join(declined)}" if declined else "",
        f"; settings: {', '.join(chose)}" if chose else "",
        f"; GIL contention from {contention}" if contention else "",
        f"; dashboard page {page}" if page else "",
    )
    _export_metrics()
    _step("advice", advice.advise, server)


#: Where a value came from when the application set it in code: the
#: preload leaves those alone, as it does the variables'.
IN_CODE = "fastloop.configure()"


def _apply(chosen: Any) -> None:
    """Set the settings ``chosen`` found, except those the application set in code."""
    from fastloop.runtime import bootstrap

    mine = {
        name: value
        for name, value in chosen.values.items()
        if config.sources.get(name) != IN_CODE
    }
    changed = {n: v for n, v in mine.items() if getattr(config.settings, n) != v}
    bootstrap.apply(changed, chosen.sources)
    for name in mine:  # unchanged ones too: their value now comes from here
        config.sources[name] = chosen.sources[name]


def _is(server: object, kind: str) -> bool:
    """Is ``server`` a dask ``kind`` (``Worker``, ``Scheduler``), a subclass too?"""
    return any(cls.__name__ == kind for cls in type(server).__mro__)


def _step(what: str, step: Callable[[Any], T], argument: Any) -> T | None:
    """One optional part of the preload: a failure is one line, and the rest goes on."""
    try:
        return step(argument)
    except Exception as exc:  # never stop the dask server for fastloop's extras
        log.warning("fastloop: preload: %s left out: %r", what, exc)
        return None


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
