"""What fastloop tells a dask user beyond its patches: two settings that gain more.

Two dask settings gain more than a patch on an idle cluster, and fastloop
leaves both to the application: clients that call actors' workers
directly (``direct_to_workers``, which needs every worker reachable from
the client) and uvloop as distributed's event loop.  ``stats().dask``
counts what it sees of them in this process (``figures``): the actor calls
a scheduler here proxied, and servers on asyncio's loop while uvloop is
installed; ``report()`` then gives the measured gain, and the preload
logs it once (``advise``).
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from typing import Any

#: The preload's logger (``fastloop.dask.log``): dask shows it by default.
log = logging.getLogger("distributed.preloading")


def advise(server: Any) -> None:
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


#: How often the scheduler's preload looks for proxied actor calls, until it
#: has said so once.
PROXY_CHECK_MS = 10_000


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
