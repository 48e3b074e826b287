"""How long threads wait for the GIL: the loss fastloop's `poll` patch fights.

Two cheap sources, both log2 histograms of ``stats().gil`` (counted in
``fastloop.telemetry.live.GIL``):

* ``poll``: real zero-timeout selector polls that the ``poll`` patch times
  on purpose, one every 2 ms (one a second while polls keep the GIL).
  ``epoll_wait(0)`` returns at once, so its wall time minus the thread's
  CPU time is the time the loop thread waited to get the GIL (or a CPU)
  back.  Free of extra threads, and only where the patch is on.
* ``probe``: an optional daemon thread that sleeps a fixed interval and
  records how late it wakes (the idea behind dask's gilknocker-based
  ``gil_contention`` metric).  Waking needs the GIL, so the oversleep is the
  process's GIL contention as any thread sees it; its share of the probed
  time is the fraction of time a thread that wants the GIL waits for it.
  Timer slack (tens of microseconds on Linux) is included, so read the
  fraction at the percent level, not below.
"""

from __future__ import annotations

import time

from fastloop.config import positive_ms
from fastloop.observers._ticker import Ticker
from fastloop.telemetry import live


class Probe:
    """A daemon thread that sleeps ``interval_ms`` and records its oversleep."""

    def __init__(self, interval_ms: float = 5.0) -> None:
        interval_ms = positive_ms("gil probe interval_ms", interval_ms)
        self.interval_ms = interval_ms
        self._period_ns = int(interval_ms * 1e6)
        self._last = 0
        self._ticker = Ticker(
            "fastloop-gil-probe",
            interval_ms / 1e3,
            self._tick,
            on_exit=lambda: live.GIL.running("probing", -1),
        )
        live.GIL.running("probing", +1)
        self._last = time.perf_counter_ns()
        self._ticker.start()

    def _tick(self) -> bool:
        now = time.perf_counter_ns()
        elapsed = now - self._last
        self._last = now
        live.GIL.observe(
            "histogram", elapsed - self._period_ns, part="probe", elapsed_ns=elapsed
        )
        return True

    @property
    def running(self) -> bool:
        return self._ticker.running

    def stop(self) -> None:
        self._ticker.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<fastloop GIL probe every {self.interval_ms:g} ms, {state}>"


_process_probe: Probe | None = None


def follow_setting(interval_ms: float | None) -> None:
    """Start, restart or stop the process-wide probe as ``gil_probe_ms`` says."""
    global _process_probe
    current = _process_probe
    if current is not None and current.running and current.interval_ms == interval_ms:
        return
    if current is not None:
        current.stop()
    _process_probe = None if interval_ms is None else Probe(interval_ms)
