"""Every figure fastloop counts, declared once: ``fastloop.stats()``'s sections.

Each field says its kind (``fields``: a count, a maximum, a flag, a log2
histogram, or a figure derived from others, which fixes how processes'
values merge), its help text, unit, Prometheus metric (or why it has none)
and its line in ``report()``.  ``stats()``, ``stream_stats()``,
``to_dict()``, ``report()``, the Prometheus collector and
``fastloop.dask.cluster_stats`` are all read from these declarations, and
``live`` makes the counters the hot paths bump from them.

Adding a figure to a section is its declaration here plus the line that
bumps it: ``live.WAKEUP.<figure>.increment()`` for a section of counts,
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


class PollStats(Section):
    """The ``poll`` patch's skipped polls."""

    skipped = Count(
        "Zero-timeout selector polls answered without a syscall (poll_us > 0)",
        label="polls skipped",
        when="skipped",
        metric="fastloop_polls_skipped",
    )


class GilWaits(Section):
    """Waits for the GIL from one source."""

    samples = Count(
        "Waits sampled", counted_by="histogram", label=None, metric=IN_HISTOGRAM
    )
    total_ns = Count(
        "The sampled waits added up", unit=NS, label=None, metric=IN_HISTOGRAM
    )
    max_ns = Maximum("The longest sampled wait")
    elapsed_ns = Count(
        "Probe only: the time the samples cover (0 for polls)",
        unit=NS,
        label=None,
        metric=Unexported("polls cover no time"),
    )
    histogram = Histogram(
        "Sampled waits for the GIL",
        sum="total_ns",
        maximum="max_ns",
        label=None,
        metric=Unexported("each source exports its own"),
    )
    p50_ns = Percentile("histogram", 0.50)
    p90_ns = Percentile("histogram", 0.90)
    p99_ns = Percentile("histogram", 0.99)
    fraction = Derived(
        lambda g: g.total_ns / g.elapsed_ns if g.elapsed_ns else 0.0,
        "Share of the probed time spent waiting (probe only; 0.0 for polls)",
    )


class PollWaits(GilWaits):
    """Loop threads, measured at real zero-timeout polls (``poll`` patch)."""

    histogram = GilWaits.histogram.but(
        help="Wall minus thread CPU time of sampled zero-timeout polls of the loops: "
        "the wait to get the GIL back",
        label="GIL wait at poll",
        when="samples",
        show=lambda g: (
            f"p50 <= {milliseconds(g.p50_ns)}, p99 <= {milliseconds(g.p99_ns)}, "
            f"max {milliseconds(g.max_ns)} ({g.samples:,} sampled polls)"
        ),
        metric="fastloop_gil_wait_at_poll_seconds",
    )


class ProbeWaits(GilWaits):
    """Any thread, measured by the probe's oversleep (``gil_probe_ms``)."""

    elapsed_ns = GilWaits.elapsed_ns.but(
        help="Time the GIL probe covered (rate of the wait sum over this: fraction)",
        metric="fastloop_gil_probe_seconds",
    )
    histogram = GilWaits.histogram.but(
        help="How late the GIL probe thread woke from each fixed sleep",
        label="GIL wait (probe)",
        when="samples",
        show=lambda g: (
            f"{g.fraction:>14.1%} of the time, p99 <= {milliseconds(g.p99_ns)}, "
            f"max {milliseconds(g.max_ns)} ({g.samples:,} samples)"
        ),
        metric="fastloop_gil_wait_probe_seconds",
    )


class GilStats(Section):
    """How long threads waited for the GIL (``fastloop.stats().gil``)."""

    probing = Flag(
        "1 while the GIL contention probe thread runs in this process",
        label=None,
        metric="fastloop_gil_probe_running",
    )
    poll = Part(PollWaits)
    probe = Part(ProbeWaits)


#: The rungs of auto mode's ladder (``patches._switch_policy.LADDER_US``),
#: each with its time-at figure below; a test keeps the two in step.
INTERVALS_US = (50, 100, 200, 500, 1000, 2000)


def _time_at(interval_us: int) -> Count:
    return Count(
        f"Time auto mode held a {interval_us} us switch interval",
        unit=NS,
        label=None,
        metric="fastloop_switch_interval_seconds",
        labels={"interval_us": str(interval_us)},
    )


def _held(s: SwitchIntervalStats) -> str:
    """Where auto mode's time went, longest first: "12.4 s at 100 us, ..."."""
    spent = [(getattr(s, f"at_{us}us_ns"), f"{us} us") for us in INTERVALS_US]
    spent.append((s.at_found_ns, "the interval it found"))
    ranked = sorted(spent, reverse=True)
    return ", ".join(f"{ns / 1e9:.1f} s at {where}" for ns, where in ranked if ns)


def _interval_line(s: SwitchIntervalStats) -> str:
    """The interval's one line: fixed, the application's, or what auto did and why."""
    if not s.auto:
        return f"{s.interval_us:g} us, fixed (FASTLOOP_SWITCH_INTERVAL_US)"
    if s.overridden:
        return f"{s.interval_us:g} us, set by the application: auto mode stopped"
    if s.engaged:
        plural = "" if s.competitors == 1 else "s"
        now = (
            f"{s.interval_us:g} us now: {s.competitors:g} compute thread{plural} "
            f"beside the loops, estimated cost {s.cost:.1%} of their throughput"
        )
    else:
        now = f"{s.interval_us:g} us now, the interval it found: no thread waits"
    times = "once" if s.engagements == 1 else f"{s.engagements:,} times"
    held = _held(s)
    return f"auto, {now}; engaged {times}" + (f"; {held}" if held else "")


class SwitchIntervalStats(Section):
    """The ``switchinterval`` patch: the interval it holds, and why."""

    heading = Heading("switch interval", patch="switchinterval", counted="engagements")
    auto = Flag(
        "1 while the switch interval is adaptive (FASTLOOP_SWITCH_INTERVAL_US=auto)",
        label=None,
        metric="fastloop_switch_interval_auto",
    )
    interval_us = Gauge(
        "The interpreter switch interval now, in microseconds",
        label=None,
        metric="fastloop_switch_interval_us",
    )
    engaged = Flag(
        "1 while auto mode holds a shorter interval because threads wait for the GIL",
        label=None,
        metric="fastloop_switch_interval_engaged",
    )
    engagements = Count(
        "Times auto mode shortened the interval after seeing threads wait for the GIL",
        label=None,
        metric="fastloop_switch_interval_engagements",
    )
    competitors = Gauge(
        "Threads beside the event loops that compete for the GIL: each ran at least "
        "10% of the time and half the busiest one's CPU time, smoothed (auto mode)",
        label=None,
        metric="fastloop_switch_interval_compute_threads",
    )
    cost = Gauge(
        "Auto mode's estimate of the compute throughput its interval costs now "
        "(a share: hand-overs between compute threads)",
        label=None,
        metric="fastloop_switch_interval_cost_estimate",
    )
    overridden = Flag(
        "1 once the application set its own interval: auto mode stopped",
        label=None,
        metric="fastloop_switch_interval_overridden",
    )
    interval = Line("interval", _interval_line)
    at_50us_ns = _time_at(50)
    at_100us_ns = _time_at(100)
    at_200us_ns = _time_at(200)
    at_500us_ns = _time_at(500)
    at_1000us_ns = _time_at(1000)
    at_2000us_ns = _time_at(2000)
    at_found_ns = Count(
        "Time auto mode held the interval it found at install (CPython's 5 ms)",
        unit=NS,
        label=None,
        metric="fastloop_switch_interval_seconds",
        labels={"interval_us": "found"},
    )
    wait_samples = Count(
        "Wake-ups of auto mode's controller thread (one a tick)",
        counted_by="waits",
        label=None,
        metric=IN_HISTOGRAM,
    )
    wait_total_ns = Count(
        "How late those wake-ups were, added up",
        unit=NS,
        label=None,
        metric=IN_HISTOGRAM,
    )
    wait_max_ns = Maximum("The latest wake-up of the controller thread")
    waits = Histogram(
        "How late auto mode's controller thread woke from each tick: the GIL wait "
        "(and wake-up latency) any waking thread pays, a loop woken by I/O too",
        sum="wait_total_ns",
        maximum="wait_max_ns",
        label="wake-up waits",
        when="wait_samples",
        of="ticks",
        metric="fastloop_switch_interval_wakeup_wait_seconds",
    )
    wait_p50_ns = Percentile("waits", 0.50)
    wait_p90_ns = Percentile("waits", 0.90)
    wait_p99_ns = Percentile("waits", 0.99)


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


#: A loop that waits this long for the GIL at one in ten sampled polls (or a
#: probe that waits this long at one wake-up in ten) is contended.
CONTENDED_P90_NS = 1_000_000
#: ... or a probe that waits this share of the time.
CONTENDED_FRACTION = 0.05


def advice(gil: GilStats, switchinterval_active: bool) -> str | None:
    """What to do about a contended GIL, if the waits show one."""
    if switchinterval_active:
        return None
    poll, probe = gil.poll, gil.probe
    if poll.samples >= 10 and poll.p90_ns >= CONTENDED_P90_NS:
        seen = f"p90 {poll.p90_ns / 1e6:.1f} ms at sampled polls of the loop"
    elif probe.samples >= 10 and (
        probe.p90_ns >= CONTENDED_P90_NS or probe.fraction >= CONTENDED_FRACTION
    ):
        seen = f"{probe.fraction:.0%} of the time, p90 {probe.p90_ns / 1e6:.1f} ms"
    else:
        return None
    return (
        f"threads wait for the GIL ({seen}): the switchinterval patch (in "
        "FASTLOOP=1) shortens the switch interval while they do (README, 'The GIL')"
    )


class Snapshot(Section):
    """What the patches and observers counted since start-up or ``reset_stats()``.

    Merged with another process's (``merge``), the patches ``installed`` are
    those active in both, and the rest adds up kind by kind.
    """

    write_to_fd = Part(WriteStats)
    add_callback = Part(AddCallbackStats)
    wakeup = Part(WakeupStats)
    read_interest = Part(ReadInterestStats)
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
    installed = Names(
        "1 for each fastloop patch active in this process",
        label=None,
        metric="fastloop_patch_installed",
    )
