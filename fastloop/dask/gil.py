"""GIL contention for dask's own dashboard and ``/metrics``, without a probe thread.

dask fills ``SystemMonitor.quantities["gil_contention"]`` (its dashboard's
GIL plots, ``dask_*_gil_contention_seconds_total`` and the workers' heartbeat
metrics) from gilknocker, a Rust thread that wakes every
``distributed.admin.system-monitor.gil.interval`` (1 ms) to take the GIL;
its ``contention_metric`` is the share of time that thread spent waiting.
Without gilknocker installed all of that stays empty.

Where the preload runs and dask has no gilknocker, ``supply`` gives the
monitor ``TickContention`` instead, which reads what auto mode's
controller (the ``switchinterval`` patch) already measures each tick: how
late its thread woke, the GIL wait any waking thread pays.  From the mean
wait per wake-up ``w`` over the monitor's interval it reports
``w / (p + w)``, the share of time a thread that wakes every ``p`` (dask's
configured gilknocker interval) would spend waiting: gilknocker's metric,
from a thread that wakes 10-50 times a second instead of 1,000.

Which one wins: gilknocker, where dask started it (installed, and
``gil.enabled``): the application asked for that probe, and fastloop does
not stop it.  ``gil.enabled: false`` means no GIL metric at all, so
fastloop supplies none then either.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

from fastloop.patches import registry
from fastloop.telemetry import live
from fastloop.telemetry.schema_gil import SwitchIntervalStats

#: The preload's logger: dask shows it by default.
log = logging.getLogger("distributed.preloading")

#: dask's config keys for its GIL metric.
ENABLED = "distributed.admin.system-monitor.gil.enabled"
INTERVAL = "distributed.admin.system-monitor.gil.interval"


#: The weight of the latest calm interval in the wake-up latency learned.
CALM_WEIGHT = 0.2


def _timer_slack_ns() -> float:
    """Linux's timer slack for this process's threads: the least a timed sleep
    oversleeps (50 us by default), so the latency to assume before any calm
    interval has been seen."""
    try:
        with open("/proc/self/timerslack_ns", encoding="ascii") as slack:
            return float(slack.read())
    except (OSError, ValueError):
        return 0.0


class TickContention:
    """What dask's ``SystemMonitor`` uses of gilknocker's ``KnockKnock``, from
    auto mode's ticks: ``contention_metric``, ``reset_contention_metric()``
    and ``stop()``.

    A tick's lateness is the GIL wait plus the OS's wake-up latency (timer
    slack and scheduling), which gilknocker does not count: it times only
    the taking of the GIL.  So the latency is learned from the intervals
    where auto mode saw no thread competing for the GIL (their mean
    lateness, smoothed), and subtracted.  dask's monitor calls these on its
    loop every update: a failure here would stop every series it keeps, so
    none escapes (the figure reads 0 and one line is logged).
    """

    def __init__(self, interval_s: float) -> None:
        #: The wake-up period the metric is stated for (gilknocker's).
        self.interval_ns = max(interval_s * 1e9, 1.0)
        #: The wake-up latency: the timer slack until the first calm interval,
        #: then learned from calm intervals.
        self.latency_ns = _timer_slack_ns()
        self._calm_intervals = 0
        self._start = self._read()
        self._last: tuple[int, int, float] | None = None
        self._failed = False

    @staticmethod
    def _read() -> tuple[int, int, float]:
        ticks = live.SWITCHINTERVAL.read()
        assert isinstance(ticks, SwitchIntervalStats)
        return ticks.wait_samples, ticks.wait_total_ns, ticks.competitors

    def _mean_wait_ns(self, now: tuple[int, int, float]) -> float | None:
        """The ticks' mean lateness since the last reset; None without a tick."""
        ticks, waited = now[0] - self._start[0], now[1] - self._start[1]
        if ticks < 0 or waited < 0:  # reset_stats() since the last reading
            ticks, waited = now[0], now[1]
        return waited / ticks if ticks > 0 else None

    @property
    def contention_metric(self) -> float:
        """The share of time a thread waking every ``interval_ns`` would wait."""
        try:
            self._last = now = self._read()
            mean_ns = self._mean_wait_ns(now)
            if mean_ns is None:
                return 0.0
            wait_ns = max(mean_ns - self.latency_ns, 0.0)
            return wait_ns / (self.interval_ns + wait_ns)
        except Exception as exc:
            self._log_once(exc)
            return 0.0

    def reset_contention_metric(self) -> None:
        """Start the next interval where the last reading ended (no tick lost)."""
        try:
            now = self._last or self._read()
            self._last = None
            mean_ns = self._mean_wait_ns(now)
            if mean_ns is not None and now[2] == 0:  # calm: nothing competed
                weight = CALM_WEIGHT if self._calm_intervals else 1.0
                self.latency_ns += weight * (mean_ns - self.latency_ns)
                self._calm_intervals += 1
            self._start = now
        except Exception as exc:
            self._log_once(exc)

    def _log_once(self, exc: Exception) -> None:
        if not self._failed:
            self._failed = True
            log.warning("fastloop: GIL contention for dask reads 0: %r", exc)

    def stop(self) -> None:
        """Nothing to stop: the ticks are auto mode's."""


def supply(server: Any) -> str | None:
    """Give ``server``'s ``SystemMonitor`` fastloop's GIL contention where dask
    has none; returns where the monitor's metric now comes from, for the log
    (None for a server without a monitor)."""
    from fastloop.config import AUTO, settings

    monitor = getattr(server, "monitor", None)
    if monitor is None:
        return None
    import dask.config
    import dask.utils

    if not _known(monitor):
        return "none (this server's SystemMonitor is not one fastloop knows)"
    if monitor.monitor_gil_contention:
        return "gilknocker (dask's own probe runs)"
    if not dask.config.get(ENABLED, default=False):
        return f"none ({ENABLED} is false)"
    if (
        "switchinterval" not in registry.installed()
        or settings.switch_interval_us != AUTO
    ):
        return (
            "none (fastloop's measure is auto mode's: the switchinterval patch, auto)"
        )
    interval = dask.config.get(INTERVAL, default="1ms")
    try:
        seconds = dask.utils.parse_timedelta(interval, default="ms")
    except (TypeError, ValueError):
        return f"none ({INTERVAL}={interval!r} is not a duration)"
    monitor._gilknocker = TickContention(seconds)
    # One reading now, as SystemMonitor.__init__ takes one of everything:
    # recent() reads the last item of every quantity.
    monitor.quantities["gil_contention"] = deque([0.0], maxlen=monitor.maxlen)
    monitor.cumulative_gil_contention = 0.0
    monitor._last_gil_contention = 0.0
    monitor.monitor_gil_contention = True
    return fastloop_source(interval)


def _known(monitor: Any) -> bool:
    """Is this the ``SystemMonitor`` whose gilknocker use ``supply`` stands in for?"""
    update = getattr(type(monitor), "update", None)
    names = getattr(getattr(update, "__code__", None), "co_names", ())
    return all(hasattr(monitor, n) for n in ("quantities", "maxlen")) and all(
        n in names
        for n in ("monitor_gil_contention", "_gilknocker", "contention_metric",
                  "reset_contention_metric", "cumulative_gil_contention")
    )  # fmt: skip


def fastloop_source(interval: str) -> str:
    """How the preload's log line names fastloop's figure."""
    return f"fastloop (auto mode's ticks, stated for a {interval} probe)"
