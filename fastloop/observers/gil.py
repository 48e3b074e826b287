"""How long threads wait for the GIL: the loss fastloop's `poll` patch fights.

Two cheap sources, both log2 histograms:

* ``poll``: every real zero-timeout selector poll that the ``poll`` patch
  lets through.  ``epoll_wait(0)`` returns at once, so its wall time minus
  the thread's CPU time is the time the loop thread waited to get the GIL
  (or a CPU) back.  Free of extra threads, sampled at most once per
  ``poll_us`` on a busy loop, and only where the patch is on.
* ``probe``: an optional daemon thread that sleeps a fixed interval and
  records how late it wakes (the idea behind dask's gilknocker-based
  ``gil_contention`` metric).  Waking needs the GIL, so the oversleep is the
  process's GIL contention as any thread sees it; its share of the probed
  time is the fraction of time a thread that wants the GIL waits for it.
  Timer slack (tens of microseconds on Linux) is included, so read the
  fraction at the percent level, not below.

The recorder is imported by the ``poll`` patch at start-up, so its
snapshot types (dataclasses, costly to define) live in ``_gil_stats``.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from fastloop import _fork
from fastloop._histogram import BUCKETS, buckets
from fastloop.config import positive_ms
from fastloop.observers._ticker import Ticker

if TYPE_CHECKING:
    from fastloop.observers._gil_stats import GilStats, GilWaits


class _Source:
    """One histogram of waits; written from any thread, under a lock."""

    __slots__ = ("elapsed_ns", "histogram", "max_ns", "total_ns")

    def __init__(self) -> None:
        self.total_ns = self.max_ns = self.elapsed_ns = 0
        self.histogram = [0] * BUCKETS

    def add(self, wait_ns: int, elapsed_ns: int) -> None:
        wait_ns = max(wait_ns, 0)
        self.histogram[wait_ns.bit_length()] += 1
        self.total_ns += wait_ns
        self.elapsed_ns += elapsed_ns
        if wait_ns > self.max_ns:
            self.max_ns = wait_ns

    def snapshot(self) -> GilWaits:
        from fastloop.observers._gil_stats import GilWaits

        return GilWaits(
            samples=sum(self.histogram),
            total_ns=self.total_ns,
            max_ns=self.max_ns,
            elapsed_ns=self.elapsed_ns,
            histogram=buckets(self.histogram),
        )


class GilRecorder:
    """Process-wide GIL waits from both sources."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.probing = 0  # probe threads alive now
        self.reset()
        _fork.track(self)

    def reset(self) -> None:
        with self._lock:
            self._poll = _Source()
            self._probe = _Source()

    def poll_wait(self, wait_ns: int) -> None:
        """A real zero-timeout poll: wall minus thread CPU time."""
        with self._lock:
            self._poll.add(wait_ns, 0)

    def probe_wait(self, wait_ns: int, elapsed_ns: int) -> None:
        """A probe wake-up ``wait_ns`` late, out of ``elapsed_ns`` probed."""
        with self._lock:
            self._probe.add(wait_ns, elapsed_ns)

    def started(self, change: int) -> None:
        with self._lock:
            self.probing += change

    def reset_after_fork(self) -> None:
        """A forked child has no probe thread, and no lock holder."""
        self._lock = threading.Lock()
        self.probing = 0

    def snapshot(self) -> GilStats:
        from fastloop.observers._gil_stats import GilStats

        with self._lock:
            return GilStats(
                probing=self.probing > 0,
                poll=self._poll.snapshot(),
                probe=self._probe.snapshot(),
            )


RECORDER = GilRecorder()


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
            on_exit=lambda: RECORDER.started(-1),
        )
        RECORDER.started(+1)
        self._last = time.perf_counter_ns()
        self._ticker.start()

    def _tick(self) -> bool:
        now = time.perf_counter_ns()
        elapsed = now - self._last
        self._last = now
        RECORDER.probe_wait(elapsed - self._period_ns, elapsed)
        return True

    @property
    def running(self) -> bool:
        return self._ticker.running

    def stop(self) -> None:
        self._ticker.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<fastloop GIL probe every {self.interval_ms:g} ms, {state}>"


_process_probe: list[Probe] = []


def follow_setting(interval_ms: float | None) -> None:
    """Start, restart or stop the process-wide probe as ``gil_probe_ms`` says."""
    current = _process_probe[0] if _process_probe else None
    if current is not None and current.running and current.interval_ms == interval_ms:
        return
    if current is not None:
        current.stop()
        _process_probe.clear()
    if interval_ms is not None:
        _process_probe.append(Probe(interval_ms))
