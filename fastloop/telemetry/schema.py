"""Every figure fastloop counts, declared once: ``fastloop.stats()``'s sections.

Each field says its kind (``fields``: a count, a maximum, a flag, a log2
histogram, or a figure derived from others, which fixes how processes'
values merge), its help text, unit, Prometheus metric (or why it has none)
and its line in ``report()``.  ``stats()``, ``stream_stats()``,
``to_dict()``, ``report()``, the Prometheus collector and
``fastloop.dask.cluster_stats`` are all read from these declarations, and
``live`` makes the counters the hot paths bump from them.  A new section
is its class here and its ``Part`` in ``Snapshot``; a section of counts
needs nothing more (its patch asks ``live.counts`` for its source).

Adding a figure to a section is its declaration here plus the line that
bumps it: ``<source>.<figure>.increment()`` on the section's
``live.counters("<Section>")`` for a section of counts,
``tally.<figure> += n`` on a stream's tally (``live.WRITE_TO_FD``) or, under
the lock, on a recorder's (``live.WATCHDOG``, ``live.GIL``).
"""

from __future__ import annotations

from fastloop.telemetry.fields import (
    BYTES,
    IN_HISTOGRAM,
    NS,
    Count,
    Derived,
    Flag,
    Gauge,
    Heading,
    Histogram,
    Line,
    Maximum,
    Names,
    Part,
    Percentile,
    Section,
    Unexported,
    milliseconds,
)
from fastloop.telemetry.schema_gil import GilStats, SwitchIntervalStats, advice


class WriteStats(Section):
    """``write_to_fd`` calls across every stream of the process."""

    heading = Heading(
        "write_to_fd (every tornado.iostream stream)",
        patch="write_to_fd",
        counted="calls",
    )
    calls = Count(
        "write_to_fd calls, every one counted", metric="fastloop_write_to_fd_calls"
    )
    bytes_offered = Count(
        "Bytes passed to write_to_fd",
        unit=BYTES,
        beyond="bytes_written",
        metric="fastloop_write_to_fd_offered_bytes",
    )
    bytes_written = Count(
        "Bytes write_to_fd wrote to the socket or pipe",
        unit=BYTES,
        metric="fastloop_write_to_fd_written_bytes",
    )
    would_block = Count(
        "write_to_fd calls that wrote nothing (0 returned or BlockingIOError)",
        metric="fastloop_write_to_fd_would_block",
    )
    errors = Count(
        "write_to_fd calls that raised an error other than would-block",
        metric="fastloop_write_to_fd_errors",
    )
    timed_calls = Count(
        "write_to_fd calls timed: 1 in N by default (FASTLOOP_WRITE_TIMING), "
        "every one when asked for; the durations below come from these",
        label="timed",
        when="calls",
        show=lambda w: (
            f"{timing_of(w)}; the times below are estimates"
            if estimated(w)
            else timing_of(w)
        ),
        metric="fastloop_write_to_fd_timed_calls",
    )
    histogram = Histogram(
        "Wall time of the timed write_to_fd calls, each counted for the calls it "
        "stands for (N when 1 in N is timed): _count and _sum estimate every call's",
        sum="total_ns",
        maximum="max_ns",
        label="time per call",
        when="timed_calls",
        show=lambda w: times_line(w),
        metric="fastloop_write_to_fd_seconds",
    )
    total_ns = Count(
        "Wall time of the write_to_fd calls (estimated from the timed ones unless "
        "every call is timed)",
        unit=NS,
        label="total time",
        when="timed_calls",
        show=lambda w: (
            f"{milliseconds(w.total_ns)} (estimated)"
            if estimated(w)
            else milliseconds(w.total_ns)
        ),
        metric=IN_HISTOGRAM,
    )
    max_ns = Maximum("The longest write_to_fd call timed")
    timing = Derived(
        lambda w: timing_of(w),
        "Which calls were timed: 'every call timed', or '1 in N calls timed' "
        "(calls over timed_calls), and then percentiles and times are estimates",
    )
    slow = Count(
        "write_to_fd calls slower than FASTLOOP_SLOW_WRITE_MS",
        label="slow calls",
        metric="fastloop_write_to_fd_slow",
    )
    cpu_ns = Count(
        "Thread CPU time in write_to_fd calls, counted with FASTLOOP_WRITE_CPU=1",
        unit=NS,
        label=None,
        metric="fastloop_write_to_fd_cpu_seconds",
    )
    cpu_calls = Count(
        "write_to_fd calls timed for thread CPU too (FASTLOOP_WRITE_CPU=1)",
        label=None,
        metric=Unexported(
            "with calls, the share of calls CPU-timed: no rate of its own"
        ),
    )
    stalled_ns = Derived(
        lambda w: max(0, cpu_timed_wall(w) - w.cpu_ns) if w.cpu_calls else 0,
        "Wall minus CPU time of the CPU-timed calls: waiting on the kernel or the GIL",
        unit=NS,
        label="stalled",
        when="cpu_calls",
        show=lambda w: (
            f"{milliseconds(w.stalled_ns)} of wall time "
            f"({w.stalled_ns / max(w.stalled_ns + w.cpu_ns, 1):.0%}), "
            f"CPU {milliseconds(w.cpu_ns)}"
        ),
    )
    p50_ns = Percentile("histogram", 0.50)
    p90_ns = Percentile("histogram", 0.90)
    p99_ns = Percentile("histogram", 0.99)


class StreamStats(WriteStats):
    """One stream's ``write_to_fd`` figures over its life (``stream_stats()``)."""


def estimated(w: WriteStats) -> bool:
    """Were some calls not timed?  Then the times are estimates from a sample."""
    return w.timed_calls < w.calls


def timing_of(w: WriteStats) -> str:
    """Which calls the times come from, in words ("1 in 256 calls timed")."""
    if not estimated(w):
        return "every call timed"
    if not w.timed_calls:
        return f"none of {w.calls:,} calls timed"
    share = f"{w.timed_calls:,} of {w.calls:,}"
    if 2 * w.calls < 3 * w.timed_calls:  # "1 in 1": mostly streams' first calls
        return f"{share} calls timed"
    return f"1 in {w.calls / w.timed_calls:.0f} calls timed ({share})"


def times_line(w: WriteStats) -> str:
    """The percentiles, marked as estimates from a sample; the maximum is one seen."""
    if not estimated(w):
        return WriteStats.histogram.text(w)
    marks = ", ".join(
        f"p{p} <= {milliseconds(ns)}"
        for p, ns in ((50, w.p50_ns), (90, w.p90_ns), (99, w.p99_ns))
    )
    return f"{marks} (estimated), max seen {milliseconds(w.max_ns)}"


def cpu_timed_wall(w: WriteStats) -> int:
    # Wall time is only comparable with CPU time when every call was CPU-timed;
    # when the setting changed mid-run, scale to the CPU-timed share of calls.
    if w.cpu_calls >= w.calls:
        return w.total_ns
    return w.total_ns * w.cpu_calls // max(w.calls, 1)


def per_batch(callbacks: int, batches: int) -> str:
    return f"{callbacks / batches:>14.1f}"


class AddCallbackStats(Section):
    """``IOLoop.add_callback``, batched: on the loop thread and from other threads."""

    on_loop = Heading(
        "add_callback on the loop thread",
        patch="add_callback",
        counted="onloop_batches",
    )
    onloop_callbacks = Count(
        "Callbacks added on the loop thread and run by fastloop batches",
        beyond="onloop_batches",
        label="callbacks run",
        metric="fastloop_onloop_callbacks",
    )
    onloop_batches = Count(
        "Batches of on-loop callbacks the loops ran (one ready-queue entry each)",
        label="batches run",
        metric="fastloop_onloop_batches",
    )
    onloop_per_batch = Line(
        "per batch",
        lambda a: per_batch(a.onloop_callbacks, a.onloop_batches),
        when="onloop_batches",
    )
    other_threads = Heading(
        "add_callback from other threads",
        patch="add_callback",
        counted="remote_callbacks",
    )
    remote_callbacks = Count(
        "IOLoop.add_callback calls from threads other than the loop's",
        label="callbacks queued",
        metric="fastloop_xthread_callbacks",
    )
    batches = Count(
        "Batches of cross-thread callbacks the loops ran (one wake-up each)",
        label="batches run",
        metric="fastloop_xthread_batches",
    )
    batched = Count(
        "Callbacks run by those batches",
        label=None,
        metric="fastloop_xthread_batched_callbacks",
    )
    remote_per_batch = Line(
        "per batch", lambda a: per_batch(a.batched, a.batches), when="batches"
    )


class WakeupStats(Section):
    """Self-pipe wake-ups of asyncio's selector loops."""

    heading = Heading("self-pipe wake-ups", patch="wakeup", counted="requested")
    requested = Count(
        "Self-pipe wake-ups asked for (every call_soon_threadsafe)",
        metric="fastloop_wakeups_requested",
    )
    written = Count(
        "Bytes written to a self-pipe; the other requests were coalesced",
        metric="fastloop_wakeups_written",
    )


class ReadInterestStats(Section):
    """Read interest kept registered while streams paused (``read_interest``)."""

    heading = Heading("read interest", patch="read_interest", counted="muted")
    muted = Count(
        "Read interest dropped with the reader left registered, muted",
        metric="fastloop_read_interest_muted",
    )
    resumed = Count(
        "Read interest back while muted: a remove_reader and an add_reader saved",
        metric="fastloop_read_interest_resumed",
    )
    dropped = Count(
        "Readable while muted: the reader removed then, as stock had at the drop",
        metric="fastloop_read_interest_dropped",
    )


class ReadBufferStats(Section):
    """Stream reads into a buffer kept per thread (``read_buffer``)."""

    heading = Heading("read buffer", patch="read_buffer", counted="reused")
    reused = Count(
        "Stream reads into the thread's kept buffer: a zeroed chunk not allocated",
        metric="fastloop_read_buffer_reused",
    )


class WriteCallbackStats(Section):
    """Stream writes done at once, without a done-callback (``write_callback``)."""

    heading = Heading("write callbacks", patch="write_callback", counted="skipped")
    skipped = Count(
        "Stream writes complete before write() returned: no callback handle scheduled",
        metric="fastloop_write_callback_skipped",
    )


def _direct_advice(s: DaskStats) -> str | None:
    if not s.actor_calls_proxied:
        return None
    from fastloop import _measured

    return (
        f"{int(s.actor_calls_proxied):,} actor calls went through the scheduler's "
        "proxy: clients made with Client(direct_to_workers=True) (dask config "
        "distributed.client.direct-to-workers: true) call the actor's worker "
        f"themselves, {_measured.DIRECT_TO_WORKERS}. fastloop does not set it: "
        "the client must be able to connect to every worker"
    )


def _uvloop_advice(s: DaskStats) -> str | None:
    if not s.uvloop_unused:
        return None
    from fastloop import _measured

    return (
        "dask runs on asyncio's loop here and uvloop is installed: dask config "
        "distributed.admin.event-loop: uvloop (DASK_DISTRIBUTED__ADMIN__EVENT_LOOP"
        f"=uvloop) runs it on uvloop, {_measured.UVLOOP}. fastloop leaves the "
        "choice of loop to the application"
    )


class DaskStats(Section):
    """dask settings fastloop does not change itself, seen in this process."""

    heading = Heading("dask", shown=lambda s: s.actor_calls_proxied or s.uvloop_unused)
    actor_calls_proxied = Gauge(
        "Actor calls the running dask schedulers of this process proxied to a "
        "worker, since each started (from clients without direct_to_workers)",
        label=None,
        metric="fastloop_dask_actor_calls_proxied",
    )
    uvloop_unused = Flag(
        "1 while a dask server here runs asyncio's loop and uvloop is installed",
        label=None,
        metric="fastloop_dask_uvloop_unused",
    )
    direct_to_workers = Derived(
        _direct_advice,
        "What direct_to_workers would give this process's proxied actor calls",
        line=lambda s: (
            f"  advice: {s.direct_to_workers}" if s.direct_to_workers else None
        ),
    )
    uvloop = Derived(
        _uvloop_advice,
        "What uvloop would give this process's dask servers",
        line=lambda s: f"  advice: {s.uvloop}" if s.uvloop else None,
    )


class PollStats(Section):
    """The ``poll`` patch's skipped polls."""

    skipped = Count(
        "Zero-timeout selector polls answered without a syscall (poll_us > 0)",
        label="polls skipped",
        when="skipped",
        metric="fastloop_polls_skipped",
    )


class WatchdogStats(Section):
    """What the blocked-loop watchdogs saw (``fastloop.watch``)."""

    heading = Heading(
        lambda d: f"blocked-loop watchdog ({'on' if d.watching else 'off'})",
        shown=lambda d: d.watching or d.beats,
    )
    watching = Flag(
        "1 while a blocked-loop watchdog runs in this process",
        label=None,
        metric="fastloop_watchdog_running",
    )
    episodes = Count(
        "Times a loop stayed away from its selector longer than the threshold",
        label="blocked episodes",
        metric="fastloop_watchdog_blocked_episodes",
    )
    blocked_ns = Count(
        "Total time of those blocked episodes",
        unit=NS,
        label="blocked time",
        when="episodes",
        show=lambda d: (
            f"{milliseconds(d.blocked_ns)} in all, "
            f"longest {milliseconds(d.max_blocked_ns)}"
        ),
        metric="fastloop_watchdog_blocked_seconds",
    )
    max_blocked_ns = Maximum("The longest blocked episode")
    beats = Count(
        "Heartbeats the loops ran; each is one lag sample",
        counted_by="lag_histogram",
        label=None,
        metric=IN_HISTOGRAM,
    )
    max_lag_ns = Maximum("The longest heartbeat lag")
    lag_histogram = Histogram(
        "Lag of each watchdog heartbeat: from posting it to the loop running it",
        sum="lag_ns",
        maximum="max_lag_ns",
        label="loop lag",
        when="beats",
        of="heartbeats",
        metric="fastloop_loop_lag_seconds",
    )
    lag_ns = Count(
        "Total lag of those heartbeats (the sum of a Prometheus histogram)",
        unit=NS,
        label=None,
        metric=IN_HISTOGRAM,
    )
    lag_p50_ns = Percentile("lag_histogram", 0.50)
    lag_p90_ns = Percentile("lag_histogram", 0.90)
    lag_p99_ns = Percentile("lag_histogram", 0.99)


class Snapshot(Section):
    """What the patches and observers counted since start-up or ``reset_stats()``.

    Merged with another process's (``merge``), the patches ``installed`` are
    those active in both, and the rest adds up kind by kind.
    """

    write_to_fd = Part(WriteStats)
    add_callback = Part(AddCallbackStats)
    wakeup = Part(WakeupStats)
    read_interest = Part(ReadInterestStats)
    read_buffer = Part(ReadBufferStats)
    write_callback = Part(WriteCallbackStats)
    gil_block = Heading(
        "selector polls and the GIL",
        shown=lambda s: s.poll.skipped or s.gil.poll.samples or s.gil.probe.samples,
    )
    poll = Part(PollStats)
    gil = Part(GilStats)
    advice = Derived(
        lambda s: advice(s.gil, "switchinterval" in s.installed),
        "What to do about a contended GIL, if the waits show one",
        in_dict_of="gil",
        line=lambda s: f"  advice: {s.advice}" if s.advice else None,
    )
    switchinterval = Part(SwitchIntervalStats)
    watchdog = Part(WatchdogStats)
    dask = Part(DaskStats)
    installed = Names(
        "1 for each fastloop patch active in this process",
        label=None,
        metric="fastloop_patch_installed",
    )
