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

Settings come from dask's config too (a ``fastloop:`` section) and from
the preload's arguments (``--preload-argv`` or, on dask's command line,
after the preload: ``dask worker ... --preload fastloop.dask --block-ms
50``); ``fastloop.dask.settings`` states the precedence.  Taking
arguments makes ``dask_setup`` a click command, and dask's command line
allows one such preload per process.  What fastloop advises beyond its
patches is in ``fastloop.dask.advice``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from functools import reduce
from typing import Any

import fastloop
from fastloop import config
from fastloop.patches import registry

#: dask configures the ``distributed`` logger at INFO and shows it by
#: default; ``fastloop``'s own INFO lines would not appear in dask's logs.
log = logging.getLogger("distributed.preloading")


def setup(server: object, arguments: Sequence[str] = ()) -> None:
    """The preload's work, once in each scheduler, worker or nanny process."""
    # Here, not at the top: stats() imports this package in every process
    # (for advice.figures), dask or not, at exit too.
    from fastloop.dask import advice, dashboard, gil, settings
    from fastloop.runtime import bootstrap

    chosen = settings.choose(os.environ, arguments, settings.dask_section())
    for problem in chosen.problems:
        log.warning("%s", problem)
    changed = {
        name: value
        for name, value in chosen.values.items()
        if getattr(config.settings, name) != value
    }
    bootstrap.apply(changed, chosen.sources)
    for name in chosen.values:  # unchanged ones too: they are now from here
        config.sources.setdefault(name, chosen.sources[name])
    registry.install(chosen.patches)
    active = registry.installed()
    verdicts = registry.available()
    declined = [
        f"{n} ({why})" for n, why in verdicts.items() if why and n not in active
    ]
    contention = gil.supply(server)
    page = None
    if type(server).__name__ == "Worker":
        dashboard.add_to_worker(server)
    elif type(server).__name__ == "Scheduler":
        page = dashboard.add_to_scheduler(server)
    chose = [
        f"{settings.key(name)}={value} ({chosen.sources[name]})"
        for name, value in chosen.values.items()
        if chosen.sources[name] != config.BY_NAME[name].variable
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
    advice.advise(server)


def _click_command() -> Any:
    """``setup`` as the click command dask hands the preload's arguments to.

    One catch-all argument: the options are ours to check, so that a bad one
    is one log line (``settings.choose``) instead of a preload that fails.
    """
    import click

    @click.command(
        context_settings={"ignore_unknown_options": True}, add_help_option=False
    )
    @click.argument("arguments", nargs=-1, type=click.UNPROCESSED)
    def dask_setup(server: object, arguments: tuple[str, ...]) -> None:
        setup(server, arguments)

    # dask's command line checks the arguments with a bare click.Context,
    # which reads this attribute rather than context_settings.
    dask_setup.ignore_unknown_options = True
    return dask_setup


def __getattr__(name: str) -> Any:
    """``dask_setup``, dask's preload hook, made when dask first asks for it.

    Made late so that importing this package never imports click; without
    click (which distributed depends on) there is no dask server to preload
    into, and ``setup`` itself is the hook.
    """
    if name != "dask_setup":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        hook = _click_command()
    except ImportError:
        hook = setup
    globals()["dask_setup"] = hook
    return hook


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
