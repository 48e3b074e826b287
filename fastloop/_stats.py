"""``fastloop.stats()`` and ``reset_stats()``: the counters, added up.

The counters themselves live in ``_counters`` (cheap to import, bumped on
the hot paths) and in the observers' recorders; this module adds them up:
``write_to_fd`` totals are the folded totals of collected streams plus the
live streams' counters.  ``reset_stats()`` records a baseline instead of
swapping objects, so patched code can bind counters once.
"""

from __future__ import annotations

import threading
from typing import Any

from fastloop import _counters, _registry
from fastloop._counters import (
    ONLOOP_BATCHES,
    ONLOOP_EXTRA,
    POLLS_SKIPPED,
    REMOTE_BATCHED,
    REMOTE_BATCHES,
    REMOTE_CALLBACKS,
    SLOW_WRITES,
    WAKEUPS_REQUESTED,
    WAKEUPS_WRITTEN,
    WRITE_COUNTS,
)
from fastloop._histogram import BUCKETS
from fastloop._histogram import buckets as _buckets
from fastloop._snapshot import (
    AddCallbackStats,
    PollStats,
    Snapshot,
    StreamStats,
    WakeupStats,
    WriteStats,
)
from fastloop.observers import gil
from fastloop.observers.watchdog import WATCHDOG

_COUNTERS = {
    "onloop_batches": ONLOOP_BATCHES,
    "onloop_extra": ONLOOP_EXTRA,
    "remote_callbacks": REMOTE_CALLBACKS,
    "remote_batches": REMOTE_BATCHES,
    "remote_batched": REMOTE_BATCHED,
    "wakeups_requested": WAKEUPS_REQUESTED,
    "wakeups_written": WAKEUPS_WRITTEN,
    "slow_writes": SLOW_WRITES,
    "polls_skipped": POLLS_SKIPPED,
}


def stream_stats(stream: object) -> StreamStats:
    """The write counters of one IOStream (zeros if it never wrote while patched)."""
    counters = getattr(stream, "_fastloop_writes", None)
    if counters is None:
        return StreamStats()
    return StreamStats(
        calls=counters.calls,
        bytes_offered=counters.written + counters.unwritten,
        bytes_written=counters.written,
        would_block=counters.would_block,
        errors=counters.errors,
        total_ns=counters.wall_ns,
        max_ns=max(counters.max_ns, counters.max_before),
    )


def _no_writes() -> dict[str, Any]:
    return {**dict.fromkeys(WRITE_COUNTS, 0), "histogram": [0] * BUCKETS}


_baseline_lock = threading.Lock()
_baseline_counters: dict[str, int] = dict.fromkeys(_COUNTERS, 0)
_baseline_writes: dict[str, Any] = _no_writes()


def _write_totals() -> tuple[dict[str, Any], int]:
    """Folded plus live streams' counters, and the maximum since the last reset."""
    with _counters.writes_lock():
        every = _counters.every_stream()
    sums = _no_writes()
    histogram = sums["histogram"]
    max_ns = 0
    for counters in every:
        totals = counters.totals()
        for name in WRITE_COUNTS:
            sums[name] += totals[name]
        for index, count in enumerate(totals["histogram"]):
            histogram[index] += count
        max_ns = max(max_ns, counters.max_ns)
    return sums, max_ns


def _since_baseline(sums: dict[str, Any]) -> dict[str, Any]:
    writes = {name: sums[name] - _baseline_writes[name] for name in WRITE_COUNTS}
    writes["histogram"] = [
        count - base
        for count, base in zip(
            sums["histogram"], _baseline_writes["histogram"], strict=True
        )
    ]
    return writes


def stats() -> Snapshot:
    """An immutable snapshot of every patch's counters."""
    with _baseline_lock:
        now = {n: c.value() - _baseline_counters[n] for n, c in _COUNTERS.items()}
        sums, max_ns = _write_totals()
        writes = _since_baseline(sums)
    calls, cpu_ns, cpu_calls = writes["calls"], writes["cpu_ns"], writes["cpu_calls"]
    return Snapshot(
        add_callback=AddCallbackStats(
            remote_callbacks=now["remote_callbacks"],
            batches=now["remote_batches"],
            batched=now["remote_batched"],
            onloop_batches=now["onloop_batches"],
            onloop_callbacks=now["onloop_batches"] + now["onloop_extra"],
        ),
        wakeup=WakeupStats(
            requested=now["wakeups_requested"], written=now["wakeups_written"]
        ),
        write_to_fd=WriteStats(
            calls=calls,
            bytes_offered=writes["offered"],
            bytes_written=writes["written"],
            would_block=writes["would_block"],
            errors=writes["errors"],
            total_ns=writes["wall_ns"],
            max_ns=max_ns if calls else 0,
            slow=now["slow_writes"],
            cpu_ns=cpu_ns,
            cpu_calls=cpu_calls,
            stalled_ns=max(0, _cpu_timed_wall(writes) - cpu_ns) if cpu_calls else 0,
            histogram=_buckets(writes["histogram"]),
        ),
        watchdog=WATCHDOG.snapshot(),
        poll=PollStats(skipped=now["polls_skipped"]),
        gil=gil.RECORDER.snapshot(),
        installed=tuple(sorted(_registry.installed())),
    )


def _cpu_timed_wall(writes: dict[str, Any]) -> int:
    # Wall time is only comparable with CPU time when every call was CPU-timed;
    # when the setting changed mid-run, scale to the CPU-timed share of calls.
    calls: int = writes["calls"]
    wall_ns: int = writes["wall_ns"]
    cpu_calls: int = writes["cpu_calls"]
    return wall_ns if cpu_calls >= calls else wall_ns * cpu_calls // max(calls, 1)


def reset_stats() -> None:
    """Start every counter from zero (the maximum too)."""
    with _baseline_lock:
        for name, counter in _COUNTERS.items():
            _baseline_counters[name] = counter.value()
        sums, _ = _write_totals()
        _baseline_writes.update(sums)
        with _counters.writes_lock():
            for counters in _counters.every_stream():
                counters.max_before = max(counters.max_before, counters.max_ns)
                counters.max_ns = 0
    WATCHDOG.reset()
    gil.RECORDER.reset()
