"""Auto mode's decisions: which switch interval to hold, from what was sampled.

Pure and deterministic: ``Policy.step`` is fed one ``Sample`` per tick of the
controller thread (``_switch_controller``) and answers the interval to
hold.  Tests drive it with made-up samples and clocks; timing belongs in
the benchmarks.

What the interval buys.  A thread that wants the GIL while another runs
Python waits until the holder drops it, and a holder running pure Python
drops it only when a waiter has waited one switch interval.  A loop thread
asks for the GIL after every syscall that released it (the selector poll,
``send``, the self-pipe read), so beside one compute thread each of those
costs up to the interval: CPython's 5 ms makes "1 ms actor calls take
5 ms" (dask/distributed#6325) and the bpo-7946 convoy.  A shorter interval
bounds each wait; nothing else in pure Python can (the loop's waits after a
blocking poll are read when the poll returns, so only the interval in
force then counts, and nothing can change it on the waiting thread's
behalf).

What it costs.  Hand-overs between threads that all want the GIL without
pause: every interval a waiter forces the holder out, and the hand-over
itself (waking the next thread, warming its caches) is compute nobody
does.  With one compute thread the hand-overs are set by the loop's own
requests, not by the interval (a loop that only waits is nobody to hand
over to), so a short interval is free; with two or more compute threads
each interval is one more forced hand-over between them.  A fixed cost per
hand-over would make the loss fall as 1/interval; measured, it falls as
about 1/sqrt(interval) (docs/design.md#how-the-loss-falls-with-the-interval).
Hence ``cost()``: the share lost at 100 us,
``SHARE_AT_100US_FIT`` while the compute threads fit the CPUs and
``SHARE_AT_100US_OVER`` beyond them (the thread handed to must first get a
CPU), times sqrt(100 us / interval); zero with fewer than two compute
threads, where a thread that ran less than half the busiest one's time
is none (``competing()``: it computes in bursts, and measured, hand-overs
to it are free).  The CPUs counted are the ones the process gets now: its
affinity, its quota, and of those what other processes leave it (a
neighbour spinning on one of two cores leaves one), each rounded down, so
where the count is in doubt the price is the higher one and the interval
the longer (pricing one CPU at zero broke the budget in a fresh worker:
docs/gil.md#one-cpu-and-a-busy-neighbour).
``choose()`` takes the shortest interval of the ladder whose cost is
within the budget (``FASTLOOP_SWITCH_BUDGET``).  (A 1/interval
model with 10 us a hand-over chose 200 us for 4 threads and cost 8%, 500 us
with 15 us and cost 6.6%, against a 5% budget.)

When to act.  Nothing changes until waits say a thread is held back: the
controller's own wake-ups, late by the GIL wait any waking thread pays (a
loop woken by I/O pays the same), must be ``ENGAGE_WAIT_NS`` late for
``ENGAGE_TICKS`` ticks in a row while an event loop runs beside at least
one compute thread.  Then the interval follows the compute threads: a
longer interval at once when more of them make hand-overs cost more (a
thread that starts computing beside a busy one counts once its smoothed
share reaches half of that one's, a few ticks later), a
shorter one only after ``SHORTEN_TICKS`` ticks that agree (a thread that
computes on and off, dask's actor thread, should not make it flap).  It
lets go, back to the application's interval (the one found at install),
when no compute thread is left for ``RELEASE_TICKS`` ticks, or when a
periodic check at ``VALIDATE_US`` finds that nothing holds the GIL any more
(threads busy in C code that releases it, hashing or numpy, use CPU without
making anyone wait).

How often to look.  Every ``FAST_TICK_NS`` while waits are watched or the
interval moves; every ``SLOW_TICK_NS`` while calm, and once ``SETTLE_TICKS``
ticks in a row changed nothing: a tick beside a compute thread costs it a
hand-over of the GIL and back, and at 50 us that is most of what auto
costs against the same interval held fixed.  A settled controller counts
a thread that starts computing a slow tick or two later (a new thread's
share needs two readings; a long tick's shares weigh as the fast ticks it
spans), and any tick that is not steady brings the fast ticks back.

When not to look.  After ``DORMANT_TICKS`` ticks in a row with nothing to
decide (not engaged, and calm or no loop running), each where something
would wake the controller (``Sample.wakeable``), ``tick_ns()`` answers
None: the controller sleeps until woken (``fastloop.runtime.dormancy``
says by what), and its first tick after (``woke()``) is a fast one, from
calm.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

#: The intervals auto mode holds, in microseconds, shortest first.
LADDER_US = (50, 100, 200, 500, 1000, 2000)
#: The share of compute throughput lost at a 100 us interval while the
#: compute threads fit the CPUs, and beyond them: the rounded-up loss
#: measured on this machine (docs/design.md#the-share-lost-at-100-us).
SHARE_AT_100US_FIT = 0.14
SHARE_AT_100US_OVER = 0.16
#: A compute thread that ran less than this part of the busiest one's time
#: is not counted: it computes in bursts between waits, as dask's actor
#: thread does, and hand-overs to it measured free
#: (docs/design.md#which-threads-compete).
COMPETING_PART = 0.5
#: A wake-up this late, at CPython's interval, means a thread holds the GIL
#: (docs/design.md#when-to-engage).
ENGAGE_WAIT_NS = 1_000_000
ENGAGE_TICKS = 3
#: Ticks without a compute thread before letting go, and of agreement
#: before moving to a shorter interval.
RELEASE_TICKS = 5
SHORTEN_TICKS = 5
#: While engaged, this often, the waits are checked at a longer interval:
#: for this many ticks, at least at this interval; a median wake-up less
#: than half of it late means nothing holds the GIL any more.
VALIDATE_EVERY_NS = 10_000_000_000
VALIDATE_US = 1000
VALIDATE_TICKS = 3
#: Tick lengths: while waits are seen or the interval moves, and while calm
#: or settled (engaged, and ``SETTLE_TICKS`` ticks in a row that changed
#: nothing: no move, none pending, a compute thread seen in each).
#: A tick beside a compute thread costs it a hand-over of the GIL and back,
#: hence the slow ticks once settled (docs/design.md#tick-lengths).
FAST_TICK_NS = 20_000_000
SLOW_TICK_NS = 100_000_000
SETTLE_TICKS = 10
#: Ticks in a row with nothing to decide, each where something would wake
#: the controller, before it sleeps until woken: an idle process's wake-ups
#: buy nothing, and a wake costs this many ticks before the next sleep.
DORMANT_TICKS = 10


class Sample(NamedTuple):
    """What the controller saw in one tick."""

    now_ns: int
    wait_ns: int
    """How late the controller woke: wake-up latency plus its GIL wait."""
    competitors: int
    """Threads beside the loops that compete for the GIL (``competing()`` of
    their smoothed shares); -1 unknown."""
    loops: int
    """Event loops running in the process."""
    cpus: int
    """The CPUs the process's threads can use at once: affinity, quota, and
    what other processes leave of them."""
    wakeable: bool = False
    """Whether something would wake the controller were it to sleep: every
    open loop reports its iterations (``fastloop.runtime.dormancy``), the
    process has another thread, and nothing woke it during the tick."""


def competing(shares: Sequence[float]) -> int:
    """How many compute threads compete for the GIL, from their CPU shares.

    Threads that all want the GIL all the time split it about evenly.  One
    that ran less than ``COMPETING_PART`` of the busiest's time wanted it
    only now and then: it computes in bursts between waits, as dask's actor
    thread does serving calls, and hand-overs to it measured free.  The
    busiest is taken among the threads that can have shared one GIL (their
    shares, smallest first, add up to at most 1): a thread busy in C code
    that releases it (numpy, hashing) runs up to a whole CPU beside them,
    and measuring the others against it would make competitors of none.
    """
    ordered = sorted(share for share in shares if share > 0)
    if not ordered:
        return 0
    busiest, together = ordered[0], 0.0
    for share in ordered:
        together += share
        if together > 1.0:
            break
        busiest = share
    return sum(1 for share in ordered if share >= COMPETING_PART * busiest)


def cost(interval_us: float, competitors: int, cpus: int) -> float:
    """The share of compute throughput hand-overs cost at this interval."""
    if competitors < 2:
        return 0.0
    share = SHARE_AT_100US_FIT if competitors <= cpus else SHARE_AT_100US_OVER
    return share * math.sqrt(100.0 / interval_us)


def choose(competitors: int, cpus: int, budget: float) -> float:
    """The shortest interval of the ladder whose cost is within ``budget``."""
    for interval in LADDER_US:
        if cost(interval, competitors, cpus) <= budget:
            return interval
    return LADDER_US[-1]


CALM, WATCHING, ENGAGED, VALIDATING = "calm", "watching", "engaged", "validating"


class Policy:
    """The state of auto mode between ticks; ``step`` is its only input."""

    def __init__(self, application_us: float, budget: float) -> None:
        self.application_us = application_us
        self.budget = budget
        self.state = CALM
        self.interval_us = application_us
        self.engagements = 0
        self.competitors = 0
        self.cpus = 1
        #: Why the interval is what it is, for ``report()``.
        self.why = "no thread waits for the GIL"
        #: Ticks in a row: whose wake-up came ``ENGAGE_WAIT_NS`` late (calm or
        #: watching); engaged without a loop or a compute thread; that wanted
        #: a shorter interval than held; that changed nothing.
        self._late_ticks = 0
        self._idle_ticks = 0
        self._shorter_ticks = 0
        self._unchanged_ticks = 0
        #: Ticks in a row with nothing to decide, each wakeable; and whether
        #: the controller was just woken (its next tick is a fast one).
        self._quiet_ticks = 0
        self._woken = False
        self._validate_at = 0
        self._checks: list[int] = []

    @property
    def engaged(self) -> bool:
        return self.state in (ENGAGED, VALIDATING)

    @property
    def cost(self) -> float:
        if not self.engaged:
            return 0.0
        return cost(self.interval_us, self.competitors, self.cpus)

    def tick_ns(self) -> int | None:
        """How long the next tick sleeps; None: until something wakes the
        controller."""
        if self._quiet_ticks >= DORMANT_TICKS:
            return None
        settled = self.state == ENGAGED and self._unchanged_ticks >= SETTLE_TICKS
        slow = (settled or self.state == CALM) and not self._woken
        return SLOW_TICK_NS if slow else FAST_TICK_NS

    def woke(self) -> None:
        """The controller was woken from its sleep: look again soon, from calm
        (the ticks in a row it counted span the sleep)."""
        self.state, self._late_ticks, self._quiet_ticks = CALM, 0, 0
        self._woken = True

    def wants_competitors(self) -> bool:
        """Whether the next sample needs the threads' CPU shares (not when calm)."""
        return self.state != CALM

    def step(self, sample: Sample) -> float:
        """The interval to hold from now, in microseconds."""
        self.cpus = sample.cpus
        if sample.competitors >= 0:
            self.competitors = sample.competitors
        if self.state in (CALM, WATCHING):
            self._watch(sample)
        elif self.state == VALIDATING:
            self._validate(sample)
        else:
            self._follow(sample)
        quiet = not self.engaged and (self.state == CALM or not sample.loops)
        self._woken = False
        self._quiet_ticks = self._quiet_ticks + 1 if quiet and sample.wakeable else 0
        return self.interval_us

    def _watch(self, sample: Sample) -> None:
        if sample.wait_ns < ENGAGE_WAIT_NS:
            self.state, self._late_ticks = CALM, 0
            return
        self.state = WATCHING
        self._late_ticks += 1
        if self._late_ticks < ENGAGE_TICKS:
            return
        if sample.loops and sample.competitors > 0:
            self.state = ENGAGED
            self.engagements += 1
            self._idle_ticks = self._shorter_ticks = self._unchanged_ticks = 0
            self._validate_at = sample.now_ns + VALIDATE_EVERY_NS
            self.interval_us = self._target()
        elif sample.competitors == 0 or not sample.loops:
            # Waits, but no loop to serve or no thread to blame: nothing to gain.
            self.why = (
                "threads wait for the GIL, but no event loop runs"
                if not sample.loops
                else "threads wait for the GIL, but none computes for long"
            )

    def _target(self) -> float:
        chosen = choose(self.competitors, self.cpus, self.budget)
        beyond = self.competitors > self.cpus
        self.why = (
            f"{self.competitors} compute thread{'s' if self.competitors != 1 else ''} "
            "beside the loops"
            + (
                f", more than the {self.cpus} CPU{'s' * (self.cpus > 1)} free"
                if beyond
                else ""
            )
        )
        return chosen

    def _follow(self, sample: Sample) -> None:
        steady, self._unchanged_ticks = self._unchanged_ticks, 0
        if not sample.loops or sample.competitors == 0:
            self._idle_ticks += 1
            if self._idle_ticks >= RELEASE_TICKS:
                self._release(
                    "no event loop runs" if not sample.loops else "the compute stopped"
                )
            return
        self._idle_ticks = 0
        if sample.now_ns >= self._validate_at:
            self.state, self._checks = VALIDATING, []
            self.interval_us = max(self.interval_us, VALIDATE_US)
            return
        wanted = self._target()
        if wanted > self.interval_us:
            self.interval_us, self._shorter_ticks = wanted, 0
        elif wanted < self.interval_us:
            self._shorter_ticks += 1
            if self._shorter_ticks >= SHORTEN_TICKS:
                self.interval_us, self._shorter_ticks = wanted, 0
        else:
            self._shorter_ticks, self._unchanged_ticks = 0, steady + 1

    def _validate(self, sample: Sample) -> None:
        self._checks.append(sample.wait_ns)
        if len(self._checks) < VALIDATE_TICKS:
            return
        waits = sorted(self._checks)
        self._validate_at = sample.now_ns + VALIDATE_EVERY_NS
        if waits[len(waits) // 2] * 2 < self.interval_us * 1000:
            self._release("nothing held the GIL at the last check")
            return
        self.state = ENGAGED
        self.interval_us = self._target()

    def _release(self, why: str) -> None:
        self.state, self._late_ticks = CALM, 0
        self.interval_us = self.application_us
        self.why = why
