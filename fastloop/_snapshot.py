"""The frozen snapshots ``fastloop.stats()`` returns: what was counted.

Plain frozen dataclasses, apart from the code that fills them (``_stats``)
and the counters behind them (``_counters``, the observers' recorders), so
that the recorders can build a snapshot without importing the rest.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from fastloop._histogram import Percentiles
from fastloop._histogram import percentile as _percentile
from fastloop.observers._gil_stats import GilStats, advice


@dataclass(frozen=True)
class StreamStats:
    """One stream's ``write_to_fd`` counters (``fastloop.stream_stats``)."""

    calls: int = 0
    bytes_offered: int = 0
    bytes_written: int = 0
    would_block: int = 0
    errors: int = 0
    total_ns: int = 0
    max_ns: int = 0


@dataclass(frozen=True)
class AddCallbackStats:
    remote_callbacks: int
    """Callbacks queued by threads other than the loop's."""
    batches: int
    """Cross-thread batches the loops ran (each one ready-queue entry)."""
    batched: int
    """Callbacks run by those batches."""
    onloop_batches: int = 0
    """On-loop batches: one ready-queue entry each, however many callbacks."""
    onloop_callbacks: int = 0
    """Callbacks added on the loop thread and run by those batches."""


@dataclass(frozen=True)
class WakeupStats:
    requested: int
    """Self-pipe wake-ups asked for (every call_soon_threadsafe)."""
    written: int
    """Bytes actually written to a self-pipe; the rest were coalesced."""


@dataclass(frozen=True)
class WriteStats(Percentiles):
    """``write_to_fd`` calls across every stream of the process."""

    calls: int
    bytes_offered: int
    bytes_written: int
    would_block: int
    """Calls that wrote nothing: 0 returned, or BlockingIOError."""
    errors: int
    """Calls that raised anything else."""
    total_ns: int
    max_ns: int
    slow: int
    """Calls slower than the slow-write threshold."""
    cpu_ns: int
    """Thread CPU time in calls timed with ``write_cpu`` (0 when off)."""
    cpu_calls: int
    stalled_ns: int
    """Wall minus CPU time of those calls: waiting on the kernel or the GIL."""
    histogram: tuple[tuple[int, int], ...] = field(default=())
    """(upper bound in ns, calls) per non-empty log2 bucket."""

    def percentile_ns(self, fraction: float) -> int:
        """Upper bound of the bucket holding that fraction of calls (0 if none)."""
        return _percentile(self.histogram, self.calls, self.max_ns, fraction)


@dataclass(frozen=True)
class WatchdogStats:
    """What the blocked-loop watchdogs saw (``fastloop.watch``)."""

    watching: bool
    """Whether a watchdog runs now."""
    episodes: int
    """Times a loop stayed away from its selector longer than the threshold."""
    blocked_ns: int
    """Total time of those episodes."""
    max_blocked_ns: int
    beats: int
    """Heartbeats the loops ran; each is one lag sample."""
    max_lag_ns: int
    lag_histogram: tuple[tuple[int, int], ...] = field(default=())
    """(upper bound in ns, heartbeats) per non-empty log2 bucket of lag."""
    lag_ns: int = 0
    """Total lag of those heartbeats (the sum of a Prometheus histogram)."""

    def lag_percentile_ns(self, fraction: float) -> int:
        return _percentile(self.lag_histogram, self.beats, self.max_lag_ns, fraction)

    @property
    def lag_p50_ns(self) -> int:
        return self.lag_percentile_ns(0.50)

    @property
    def lag_p90_ns(self) -> int:
        return self.lag_percentile_ns(0.90)

    @property
    def lag_p99_ns(self) -> int:
        return self.lag_percentile_ns(0.99)


@dataclass(frozen=True)
class PollStats:
    skipped: int
    """Zero-timeout polls answered "no events" without a syscall (``poll_us``)."""


@dataclass(frozen=True)
class Snapshot:
    """What the patches did since start-up or the last ``reset_stats()``."""

    add_callback: AddCallbackStats
    wakeup: WakeupStats
    write_to_fd: WriteStats
    watchdog: WatchdogStats
    poll: PollStats
    gil: GilStats
    installed: tuple[str, ...] = ()
    """Patches active in this process when the snapshot was taken."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data (percentiles included)."""
        data = asdict(self)
        data["installed"] = list(self.installed)
        writes = data["write_to_fd"]
        writes["histogram"] = [list(pair) for pair in self.write_to_fd.histogram]
        writes.update(self.write_to_fd.percentile_fields())
        lags = data["watchdog"]
        lags["lag_histogram"] = [list(pair) for pair in self.watchdog.lag_histogram]
        lags["lag_p50_ns"] = self.watchdog.lag_p50_ns
        lags["lag_p90_ns"] = self.watchdog.lag_p90_ns
        lags["lag_p99_ns"] = self.watchdog.lag_p99_ns
        for source in ("poll", "probe"):
            waits = getattr(self.gil, source)
            entry = data["gil"][source]
            entry["histogram"] = [list(pair) for pair in waits.histogram]
            entry.update(waits.percentile_fields(), fraction=waits.fraction)
        data["gil"]["advice"] = advice(self.gil, "switchinterval" in self.installed)
        return data
