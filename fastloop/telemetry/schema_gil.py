"""The GIL's figures: the loops' measured waits and the adaptive switch interval.

Sections of ``fastloop.stats()`` declared as in ``schema`` (which holds them
in its ``Snapshot``), kept apart with the advice read from them.
"""

from __future__ import annotations

from fastloop.telemetry.fields import (
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
    Part,
    Percentile,
    Section,
    Unexported,
    milliseconds,
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


#: What wakes auto mode's sleeping controller (``fastloop.runtime.dormancy``),
#: each with its count below.
WAKE_SOURCES = {
    "compute": "a loop iteration found the other threads computing",
    "thread": "a Python thread started",
    "ioloop": "an IOLoop was made",
    "alone": "a loop iteration found the process back to one thread",
    "uninstall": "the add_callback patch, whose loops report their iterations, "
    "was uninstalled",
}


def _woken_by(source: str) -> Count:
    return Count(
        f"Times auto mode's sleeping controller woke because {WAKE_SOURCES[source]}",
        label=None,
        metric="fastloop_switch_interval_wakes",
        labels={"source": source},
    )


def _sleep_line(s: SwitchIntervalStats) -> str:
    """Whether the controller sleeps now, and what woke it so far."""
    woken = [(getattr(s, f"wakes_{source}"), source) for source in WAKE_SOURCES]
    counts = ", ".join(f"{source} {n:,}" for n, source in woken if n)
    now = "asleep now: nothing to decide" if s.dormant else "not asleep"
    return f"{now}; woken by {counts}" if counts else now


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
    dormant = Flag(
        "1 while auto mode's controller sleeps with nothing to decide, until a "
        "thread computes beside a loop, a thread starts or an IOLoop is made",
        label=None,
        metric="fastloop_switch_interval_dormant",
    )
    wakes_compute = _woken_by("compute")
    wakes_thread = _woken_by("thread")
    wakes_ioloop = _woken_by("ioloop")
    wakes_alone = _woken_by("alone")
    wakes_uninstall = _woken_by("uninstall")
    controller = Line("controller", _sleep_line, when="auto")
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
        "FASTLOOP=1) shortens the switch interval while they do (docs/gil.md)"
    )
