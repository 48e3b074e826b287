"""Process-wide counters of what the patches did, immutable snapshots, a report.

The counters themselves live in ``_counters`` (cheap to import, bumped on
the hot paths); this module adds them up: ``write_to_fd`` totals are the
folded totals of collected streams plus the live streams' counters.
``reset_stats()`` records a baseline instead of swapping objects, so patched
code can bind counters once.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from typing import Any

from fastloop import _counters, _fork, _registry
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
)
from fastloop._histogram import BUCKETS
from fastloop._histogram import buckets as _buckets
from fastloop._histogram import percentile as _percentile
from fastloop.observers import gil
from fastloop.observers._gil_stats import GilStats, advice

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
class WriteStats:
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

    @property
    def p50_ns(self) -> int:
        return self.percentile_ns(0.50)

    @property
    def p90_ns(self) -> int:
        return self.percentile_ns(0.90)

    @property
    def p99_ns(self) -> int:
        return self.percentile_ns(0.99)


class WatchdogRecorder:
    """Blocked-loop episodes and loop lag, written by the watchdog threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.running = 0  # watchdog threads alive now
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.beats = self.episodes = 0
            self.blocked_ns = self.max_blocked_ns = self.max_lag_ns = self.lag_ns = 0
            self.histogram = [0] * BUCKETS

    def lag(self, lag_ns: int) -> None:
        """One heartbeat's lag: from posting it to the loop running it."""
        with self._lock:
            self.beats += 1
            self.histogram[lag_ns.bit_length()] += 1
            self.lag_ns += lag_ns
            self.max_lag_ns = max(self.max_lag_ns, lag_ns)

    def episode(self, blocked_ns: int) -> None:
        with self._lock:
            self.episodes += 1
            self.blocked_ns += blocked_ns
            self.max_blocked_ns = max(self.max_blocked_ns, blocked_ns)

    def after_fork(self) -> None:
        """In a forked child: no watchdog thread survived, and no lock holder."""
        self._lock = threading.Lock()
        self.running = 0

    def started(self, change: int) -> None:
        with self._lock:
            self.running += change

    def snapshot(self) -> WatchdogStats:
        with self._lock:
            return WatchdogStats(
                watching=self.running > 0,
                episodes=self.episodes,
                blocked_ns=self.blocked_ns,
                max_blocked_ns=self.max_blocked_ns,
                beats=self.beats,
                max_lag_ns=self.max_lag_ns,
                lag_histogram=_buckets(self.histogram),
                lag_ns=self.lag_ns,
            )


WATCHDOG = WatchdogRecorder()
_fork.in_child(WATCHDOG.after_fork)


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
        writes["p50_ns"] = self.write_to_fd.p50_ns
        writes["p90_ns"] = self.write_to_fd.p90_ns
        writes["p99_ns"] = self.write_to_fd.p99_ns
        lags = data["watchdog"]
        lags["lag_histogram"] = [list(pair) for pair in self.watchdog.lag_histogram]
        lags["lag_p50_ns"] = self.watchdog.lag_p50_ns
        lags["lag_p90_ns"] = self.watchdog.lag_p90_ns
        lags["lag_p99_ns"] = self.watchdog.lag_p99_ns
        for source in ("poll", "probe"):
            waits = getattr(self.gil, source)
            entry = data["gil"][source]
            entry["histogram"] = [list(pair) for pair in waits.histogram]
            entry["p50_ns"] = waits.p50_ns
            entry["p90_ns"] = waits.p90_ns
            entry["p99_ns"] = waits.p99_ns
            entry["fraction"] = waits.fraction
        data["gil"]["advice"] = advice(self.gil, "switchinterval" in self.installed)
        return data


_baseline_lock = threading.Lock()
_baseline_counters: dict[str, int] = dict.fromkeys(_COUNTERS, 0)
_baseline_writes: list[int] = [0] * (8 + BUCKETS)


def _write_totals() -> tuple[list[int], int]:
    """Folded plus live streams' counters, and the maximum since the last reset."""
    with _counters.writes_lock():
        every = _counters.every_stream()
    sums = [0] * (8 + BUCKETS)
    max_ns = 0
    for counters in every:
        for index, value in enumerate(counters.totals()):
            sums[index] += value
        max_ns = max(max_ns, counters.max_ns)
    return sums, max_ns


def stats() -> Snapshot:
    """An immutable snapshot of every patch's counters."""
    with _baseline_lock:
        now = {n: c.value() - _baseline_counters[n] for n, c in _COUNTERS.items()}
        sums, max_ns = _write_totals()
        writes = [
            value - base for value, base in zip(sums, _baseline_writes, strict=True)
        ]
    calls, offered, written, would_block, errors, wall_ns, cpu_ns, cpu_calls = writes[
        :8
    ]
    histogram = _buckets(writes[8:])
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
            bytes_offered=offered,
            bytes_written=written,
            would_block=would_block,
            errors=errors,
            total_ns=wall_ns,
            max_ns=max_ns if calls else 0,
            slow=now["slow_writes"],
            cpu_ns=cpu_ns,
            cpu_calls=cpu_calls,
            stalled_ns=max(0, _cpu_timed_wall(writes) - cpu_ns) if cpu_calls else 0,
            histogram=histogram,
        ),
        watchdog=WATCHDOG.snapshot(),
        poll=PollStats(skipped=now["polls_skipped"]),
        gil=gil.RECORDER.snapshot(),
        installed=tuple(sorted(_registry.installed())),
    )


def _cpu_timed_wall(writes: list[int]) -> int:
    # Wall time is only comparable with CPU time when every call was CPU-timed;
    # when the setting changed mid-run, scale to the CPU-timed share of calls.
    calls, wall_ns, cpu_calls = writes[0], writes[5], writes[7]
    return wall_ns if cpu_calls >= calls else wall_ns * cpu_calls // max(calls, 1)


def reset_stats() -> None:
    """Start every counter from zero (the maximum too)."""
    with _baseline_lock:
        for name, counter in _COUNTERS.items():
            _baseline_counters[name] = counter.value()
        sums, _ = _write_totals()
        _baseline_writes[:] = sums
        with _counters.writes_lock():
            for counters in _counters.every_stream():
                counters.max_before = max(counters.max_before, counters.max_ns)
                counters.max_ns = 0
    WATCHDOG.reset()
    gil.RECORDER.reset()


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f} ms" if ns >= 1_000_000 else f"{ns / 1e3:.1f} us"


def report(snapshot: Snapshot | None = None) -> str:
    """A readable table of ``stats()``."""
    s = snapshot or stats()
    w, a, k = s.write_to_fd, s.add_callback, s.wakeup
    lines = ["fastloop report", ""]
    if s.installed:
        lines.append(f"patches active     {', '.join(s.installed)}")
    else:
        lines.append(
            "patches active     none: no patch is installed in this process "
            "(set FASTLOOP=1 or call fastloop.install()), so no patch counter "
            "can move"
        )
    lines.append("")
    mark = len(lines)
    lines.append("write_to_fd (every tornado.iostream stream)")
    lines.append(f"  calls            {w.calls:>14,}")
    lines.append(f"  bytes offered    {w.bytes_offered:>14,}")
    lines.append(f"  bytes written    {w.bytes_written:>14,}")
    lines.append(f"  would block      {w.would_block:>14,}")
    lines.append(f"  errors           {w.errors:>14,}")
    if w.calls:
        lines.append(
            f"  time per call    p50 <= {_ms(w.p50_ns)}, p90 <= {_ms(w.p90_ns)}, "
            f"p99 <= {_ms(w.p99_ns)}, max {_ms(w.max_ns)}"
        )
        lines.append(f"  total time       {_ms(w.total_ns)}")
    lines.append(f"  slow calls       {w.slow:>14,}")
    if w.cpu_calls:
        share = w.stalled_ns / max(w.stalled_ns + w.cpu_ns, 1)
        lines.append(
            f"  stalled          {_ms(w.stalled_ns)} of wall time ({share:.0%}), "
            f"CPU {_ms(w.cpu_ns)}"
        )
    _unless_installed(lines, mark, "write_to_fd", s, w.calls)
    lines.append("")
    mark = len(lines)
    lines.append("add_callback on the loop thread")
    lines.append(f"  callbacks run    {a.onloop_callbacks:>14,}")
    lines.append(f"  batches run      {a.onloop_batches:>14,}")
    if a.onloop_batches:
        per_batch = a.onloop_callbacks / a.onloop_batches
        lines.append(f"  per batch        {per_batch:>14.1f}")
    _unless_installed(lines, mark, "add_callback", s, a.onloop_batches)
    lines.append("")
    mark = len(lines)
    lines.append("add_callback from other threads")
    lines.append(f"  callbacks queued {a.remote_callbacks:>14,}")
    lines.append(f"  batches run      {a.batches:>14,}")
    if a.batches:
        lines.append(f"  per batch        {a.batched / a.batches:>14.1f}")
    _unless_installed(lines, mark, "add_callback", s, a.remote_callbacks)
    lines.append("")
    mark = len(lines)
    lines.append("self-pipe wake-ups")
    lines.append(f"  requested        {k.requested:>14,}")
    lines.append(f"  written          {k.written:>14,}")
    _unless_installed(lines, mark, "wakeup", s, k.requested)
    lines.extend(_gil_report(s))
    d = s.watchdog
    if d.watching or d.beats:
        lines.append("")
        lines.append(f"blocked-loop watchdog ({'on' if d.watching else 'off'})")
        lines.append(f"  blocked episodes {d.episodes:>14,}")
        if d.episodes:
            lines.append(
                f"  blocked time     {_ms(d.blocked_ns)} in all, "
                f"longest {_ms(d.max_blocked_ns)}"
            )
        if d.beats:
            lines.append(
                f"  loop lag         p50 <= {_ms(d.lag_p50_ns)}, "
                f"p90 <= {_ms(d.lag_p90_ns)}, p99 <= {_ms(d.lag_p99_ns)}, "
                f"max {_ms(d.max_lag_ns)} ({d.beats:,} heartbeats)"
            )
    return "\n".join(lines)


def _gil_report(s: Snapshot) -> list[str]:
    poll, probe = s.gil.poll, s.gil.probe
    if not (s.poll.skipped or poll.samples or probe.samples):
        return []
    lines = ["", "selector polls and the GIL"]
    if s.poll.skipped:
        lines.append(f"  polls skipped    {s.poll.skipped:>14,}")
    if poll.samples:
        lines.append(
            f"  GIL wait at poll p50 <= {_ms(poll.p50_ns)}, p99 <= {_ms(poll.p99_ns)}, "
            f"max {_ms(poll.max_ns)} ({poll.samples:,} sampled polls)"
        )
    if probe.samples:
        lines.append(
            f"  GIL wait (probe) {probe.fraction:>14.1%} of the time, "
            f"p99 <= {_ms(probe.p99_ns)}, max {_ms(probe.max_ns)} "
            f"({probe.samples:,} samples)"
        )
    hint = advice(s.gil, "switchinterval" in s.installed)
    if hint:
        lines.append(f"  advice: {hint}")
    return lines


def _unless_installed(
    lines: list[str], title: int, patch: str, s: Snapshot, counted: int
) -> None:
    """Mark a section whose patch is off: a patch not installed is not an idle zero."""
    if patch in s.installed:
        return
    if counted:
        lines[title] += " (not active now; counted while it was)"
    else:
        del lines[title + 1 :]
        lines.append(f"  {patch} is not active in this process: nothing counted")
