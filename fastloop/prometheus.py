"""Prometheus metrics of ``fastloop.stats()``, read live on each scrape.

    from fastloop import prometheus
    prometheus.register()              # prometheus_client's global registry
    prometheus.register(my_registry)   # or your own; idempotent either way

The ``fastloop.dask`` preload calls ``register()``, so distributed's own
``/metrics`` endpoints (scheduler and workers) serve fastloop's metrics
with no new port.  A Tornado application serves them with
``prometheus_client.generate_latest()`` from a handler.

Needs ``prometheus_client`` (``pip install 'tornado-fastloop[prometheus]'``): only
``register()`` imports it, so this module imports without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from fastloop.telemetry.prometheus import StatsCollector

MISSING = (
    "fastloop.prometheus needs prometheus_client: "
    "pip install 'tornado-fastloop[prometheus]' (or prometheus_client)"
)


def register(registry: CollectorRegistry | None = None) -> StatsCollector:
    """Export fastloop's stats on ``registry`` (default: the global one).

    Registering twice on one registry returns the collector already there,
    so a preload and an application can both call it.  Raises ImportError
    naming the extra when ``prometheus_client`` is not installed.
    """
    try:
        from fastloop.telemetry import prometheus
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "prometheus_client":
            raise
        raise ImportError(MISSING, name="prometheus_client") from exc
    import fastloop
    from fastloop.patches import registry as patches

    return prometheus.register(registry, fastloop.stats, patches.known)
