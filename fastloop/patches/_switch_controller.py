"""Auto mode's thread: it samples each tick, asks the policy, and sets the interval.

One tick: sleep ``Policy.tick_ns()`` on an event, note how late the wake-up
came (the GIL wait any waking thread pays, a loop woken by I/O too), read
each thread's CPU clock, smooth each one's share of the time over ticks,
and count the threads beside the event loops that compete for the GIL
(``_switch_policy.competing``); then set the interval the policy
answers.  A tick costs ~10-30 us of one thread's time plus, under
contention, one wait for the GIL: 50 ticks a second while watching or
while the interval moves, 10 while calm and once it has settled, none
while it sleeps.

It sleeps, with no timeout, once ``DORMANT_TICKS`` ticks in a row had
nothing to decide (not engaged; calm, or no loop running) and something
would wake it: every open Tornado loop reports its iterations (the
``add_callback`` patch's wrapper; not a loop of uvloop's, nor any loop
with that patch off or declined: then it never sleeps), and the process
has another thread.  What wakes it (``fastloop.runtime.dormancy``; the
``wakes_*`` counts of ``stats().switchinterval``):

* a loop iteration, of any loop, that finds the other threads used
  ``COMPUTE_SHARE`` of the time since that loop last looked (it looks at
  most once a fast tick).  So a task thread that starts computing wakes it
  at the loop's first or second look after, and its first tick, a fast
  one, sees it wait: beside a loop that iterates at least every fast tick,
  as a dask worker's does while a task runs (its 10 ms profile trigger),
  within about three fast ticks, where
  the calm controller's next slow tick came up to a slow tick later.  A
  thread that computes while every loop waits in its selector is seen
  when a loop next iterates: until then no loop waits for the GIL.
* a Python thread that starts (the ``Thread.start`` hook), and an IOLoop
  that is made (the ``IOLoop.initialize`` hook), which may be a loop that
  does not report;
* a loop iteration that finds the process back to one thread (the thread
  then ends, as below), and the ``add_callback`` patch's uninstall;
* ``stop()``: uninstall, ``configure()`` to a fixed interval, a fork.

Its first tick after a wake is a fast one.  Beside a thread busy in C code
that releases the GIL (CPU used, nobody waiting) it sleeps and is woken
again about every ``DORMANT_TICKS`` ticks, as often as it ticked awake.

A low-level thread (``_thread``), not a ``threading.Thread``: it must not
show in ``threading.enumerate()``, where applications' leak checks (dask's
``check_thread_leak``) and shutdown code that joins every thread would
count it.  For the same reason it never calls ``threading.current_thread()``
(neither directly nor through ``logging``, which names the thread of each
record): that would register a dummy thread.  It runs only while the
process has another Python thread: a process of one thread has nobody to
wait for the GIL, and on Linux the first extra thread of any kind makes
every fd syscall slower (``fdget`` skips the file table's reference count
only while it is unshared: +2.3% on ``onloop-chain``, bench/observe_overhead.py).
It ends once the process is back to one thread and the switchinterval
patch's ``threading.Thread.start`` hook starts it again with the next one
(asleep when the last other thread ends, it ends too if a loop iterates;
with no loop iterating it stays, asleep).  On Linux its OS thread is named
``THREAD_NAME``, for ``top -H`` and bench/dask_idle.py.

It sets the interval only while it is still the one it set: an
application that sets its own is never fought (``SwitchInterval.held_s``;
asleep, it holds the interval found and sees theirs at its next tick).
"""

from __future__ import annotations

import _thread
import math
import os
import threading
import time
from collections.abc import Callable

from fastloop.config import settings
from fastloop.observers import ioloops
from fastloop.patches import _switch_policy
from fastloop.runtime import dormancy, fork
from fastloop.runtime.dormancy import IDLE
from fastloop.telemetry import live

#: A thread that ran this share of the time counts as a compute thread.
COMPUTE_SHARE = 0.1
#: The controller's thread as the OS names it (at most 15 characters).
THREAD_NAME = "fastloop-auto"
#: The weight of the newest 20 ms tick in each thread's smoothed share (a
#: longer tick weighs as the 20 ms ticks it spans, so shares decay at one
#: rate in time whatever the tick length: ``compute_shares``); one tick's
#: shares are too uneven to count competitors by
#: (docs/design.md#smoothing-the-shares).
SMOOTHING = 0.2
#: Other processes' use of this process's CPUs past which one counts as
#: theirs: a load generator or a cron job beside a worker uses less, a
#: neighbour that computes more; in doubt, fewer CPUs (the budget's side).
TAKEN_SHARE = 0.25
#: Ticks of a process back to one thread before the controller ends.
ALONE_TICKS = 10


def allowed_cpus() -> int:
    """The CPUs the OS lets this process run on (its affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def cpus(allowed: int) -> int:
    """The CPUs this process gets: the ``allowed`` ones, and no more than its
    CPU quota buys (a container's limit, which the affinity does not show: a
    container of 2 CPUs on a 64-core host may run on all 64)."""
    quota = quota_cpus()
    if quota is None:
        return allowed
    # Rounded down: 1.5 CPUs of quota do not let two threads run at once all
    # the time, and pricing them as beyond the CPUs errs on the budget's side.
    return max(1, min(allowed, math.floor(quota)))


def quota_cpus(
    cgroups: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup"
) -> float | None:
    """The CPUs a second this process's cgroups allow (the tightest of the
    group and its ancestors), or None where no quota is set or none can be
    read.  cgroup v2's ``cpu.max``; v1's ``cpu.cfs_quota_us`` over
    ``cpu.cfs_period_us``."""
    try:
        with open(cgroups, encoding="ascii") as lines:
            entries = [line.rstrip("\n").split(":", 2) for line in lines]
    except OSError:
        return None
    limits = []
    for entry in entries:
        if len(entry) != 3:
            continue
        _, controllers, path = entry
        if controllers == "":  # cgroup v2
            for base in (root, os.path.join(root, "unified")):
                limits += _limits(base, path, _v2_limit)
        elif "cpu" in controllers.split(","):
            # "cpu,cpuacct" is mounted under that name, often linked as "cpu"
            # too: one of them, read once.
            bases = {os.path.realpath(os.path.join(root, name)): None
                     for name in (controllers, "cpu")}  # fmt: skip
            for base in bases:
                limits += _limits(base, path, _v1_limit)
    return min(limits) if limits else None


def _limits(base: str, path: str, limit: Callable[[str], float | None]) -> list[float]:
    """The quota of ``path`` and of each of its ancestors under ``base``."""
    found = []
    parts = [part for part in path.split("/") if part]
    for depth in range(len(parts), -1, -1):
        quota = limit(os.path.join(base, *parts[:depth]))
        if quota is not None:
            found.append(quota)
    return found


def _v2_limit(group: str) -> float | None:
    try:
        with open(os.path.join(group, "cpu.max"), encoding="ascii") as limit:
            quota, _, period = limit.read().partition(" ")
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError, ZeroDivisionError):
        return None


def _v1_limit(group: str) -> float | None:
    try:
        with open(os.path.join(group, "cpu.cfs_quota_us"), encoding="ascii") as q:
            quota = int(q.read())
        with open(os.path.join(group, "cpu.cfs_period_us"), encoding="ascii") as p:
            period = int(p.read())
        return None if quota <= 0 else quota / period
    except (OSError, ValueError, ZeroDivisionError):
        return None


class OthersUse:
    """How many of this process's CPUs other processes keep busy, smoothed
    over ticks as the threads' shares are.

    ``/proc/stat`` gives each CPU's busy time (all but idle and I/O wait,
    steal included: a hypervisor's share is not ours either); the CPUs of
    the affinity, less this process's own CPU time, are what others used.
    None where it cannot be read (not Linux).
    """

    def __init__(self, stat: str = "/proc/stat") -> None:
        self._stat = stat
        try:
            self._mine = {f"cpu{n}" for n in os.sched_getaffinity(0)}
            self._tick_ns = 1e9 / os.sysconf("SC_CLK_TCK")
        except (AttributeError, OSError, ValueError):
            self._mine = set()
        self._last: tuple[int, float, int] | None = None
        self._used: float | None = None

    def _busy_ns(self) -> float | None:
        try:
            with open(self._stat, encoding="ascii") as lines:
                busy = 0
                for line in lines:
                    name, _, fields = line.partition(" ")
                    if name in self._mine:
                        # user nice system idle iowait irq softirq steal ...
                        ticks = [int(field) for field in fields.split()[:8]]
                        busy += sum(ticks) - ticks[3] - ticks[4]
        except (OSError, ValueError, IndexError):
            return None
        return busy * self._tick_ns

    def read(self, now_ns: int) -> float | None:
        """The CPUs others used since the last reading, smoothed; None at first."""
        if not self._mine:
            return None
        busy = self._busy_ns()
        if busy is None:
            return None
        mine = time.process_time_ns()
        last, self._last = self._last, (now_ns, busy, mine)
        if last is None or now_ns <= last[0]:
            return self._used
        wall = now_ns - last[0]
        used = max(0.0, (busy - last[1] - (mine - last[2])) / wall)
        weight = 1.0 - (1.0 - SMOOTHING) ** (wall / _switch_policy.FAST_TICK_NS)
        before = self._used
        self._used = used if before is None else weight * used + (1 - weight) * before
        return self._used


def cpus_left(count: int, others: float | None) -> int:
    """Of ``count`` CPUs, those other processes leave, at least one: their
    use beyond ``TAKEN_SHARE`` takes a CPU, and each whole CPU more another."""
    if others is None:
        return count
    taken = max(0, math.ceil(others - TAKEN_SHARE))
    return max(1, count - taken)


class ThreadShares:
    """How much of the time every thread ran, from the threads' CPU clocks,
    smoothed over ticks (``SMOOTHING``).

    ``time.pthread_getcpuclockid`` gives another thread's CPU clock; reading
    it costs ~1 us (a thread that ended is simply left out).
    """

    def __init__(self) -> None:
        self._clocks: dict[int, int] = {}
        self._cpu: dict[int, int] = {}
        self._shares: dict[int, float] = {}
        self._at = 0

    def forget(self) -> None:
        """The next reading starts afresh (shares need two readings)."""
        self._cpu.clear()
        self._shares.clear()

    def compute_shares(self, loops: set[int], now_ns: int) -> list[float] | None:
        """The smoothed shares of the threads beside ``loops`` that ran at
        least ``COMPUTE_SHARE`` of the time; None when there is no last
        reading."""
        wall = now_ns - self._at
        weight = 1.0 - (1.0 - SMOOTHING) ** (wall / _switch_policy.FAST_TICK_NS)
        known = bool(self._cpu)
        self._at = now_ns
        busy: list[float] = []
        seen: dict[int, int] = {}
        for thread in threading.enumerate():
            ident = thread.ident
            if ident is None:
                continue
            try:
                clock = self._clocks.get(ident)
                if clock is None:
                    clock = self._clocks[ident] = time.pthread_getcpuclockid(ident)
                seen[ident] = cpu = time.clock_gettime_ns(clock)
            except OSError:  # ended since enumerate()
                continue
            before = self._cpu.get(ident)
            if ident in loops:
                self._shares.pop(ident, None)  # a loop's, and not for later
            elif before is not None and wall > 0:
                share = (cpu - before) / wall
                last = self._shares.get(ident)
                if last is not None:
                    share = weight * share + (1.0 - weight) * last
                self._shares[ident] = share
                if share >= COMPUTE_SHARE:
                    busy.append(share)
        for gone in set(self._clocks) - set(seen):
            del self._clocks[gone]
            self._shares.pop(gone, None)
        self._cpu = seen
        return busy if known else None


def loops_report() -> bool:
    """Whether every open Tornado loop reports its iterations: only then can
    a loop wake the controller when a thread beside it starts to compute."""
    return all(
        dormancy.reports(loop) or loop.is_closed() for loop in ioloops.tornado_loops()
    )


def name_thread() -> None:
    """Give the calling thread the OS name ``THREAD_NAME`` (Linux only)."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
            comm.write(THREAD_NAME)
    except OSError:
        pass


class _Run:
    """One run of the controller's thread: the event that wakes it, whether
    it must end, and the lock held until it has."""

    __slots__ = ("bell", "done", "ending")

    def __init__(self) -> None:
        self.bell = threading.Event()
        self.done = _thread.allocate_lock()
        self.done.acquire()
        self.ending = False

    def wait(self, timeout_s: float | None) -> bool:
        """Until rung or ``timeout_s`` passed (None: until rung); True: end."""
        if self.bell.wait(timeout_s):
            self.bell.clear()  # stop() sets ending before it rings
        return self.ending


def running_loops() -> tuple[int, set[int]]:
    """How many of the process's Tornado loops run now, and the threads of
    those that say (uvloop keeps its thread private: such a loop counts, and
    its thread may then count as a compute thread, or as the busiest one
    the others are measured against)."""
    running = 0
    threads = set()
    for loop in ioloops.tornado_loops():
        if ioloops.is_running(loop):
            running += 1
            ident = ioloops.running_thread(loop)
            if ident is not None:
                threads.add(ident)
    return running, threads


class Controller:
    """The thread of auto mode; ``apply(us)`` sets the interval (False: not ours)."""

    def __init__(self, application_us: float, apply: Callable[[float], bool]) -> None:
        self.application_us = application_us
        self._apply = apply
        #: Guards starting and stopping.  Reentrant: an allocation under it
        #: can run a finalizer that starts a thread on the same thread, whose
        #: ``Thread.start`` hook calls ``start``: a plain Lock would deadlock.
        self._lock = threading.RLock()
        self._run: _Run | None = None
        self._ident: int | None = None
        self._native_id: int | None = None
        self.policy = _switch_policy.Policy(application_us, settings.switch_budget)
        fork.across(self)

    @property
    def running(self) -> bool:
        run = self._run
        return run is not None and run.done.locked()

    def start(self) -> None:
        """Start the thread unless it runs (idempotent; from any thread)."""
        with self._lock:
            if self.running:
                return
            run = _Run()
            if self.running:  # a nested start (a finalizer) started one: only
                return  # one thread, the one stop() ends
            self._run = run
            _thread.start_new_thread(self._main, (run,))

    def stop(self) -> None:
        """Ask the thread to end, and wait for it (at most a second)."""
        with self._lock:
            run = self._run
            if run is None or not run.done.locked():
                return
            run.ending = True
            run.bell.set()
        if run.done.acquire(timeout=1.0):
            run.done.release()

    def pause_for_fork(self) -> bool:
        if not self.running or threading.get_ident() == self._ident:
            return False
        self.stop()
        fork.wait_gone(self._native_id)
        return True

    def resume_after_fork(self) -> None:
        self.start()

    def forget_thread(self) -> None:
        """In a forked child: no thread runs there, whatever the locks say."""
        self._lock = threading.RLock()
        self._run = None
        self.policy = _switch_policy.Policy(self.application_us, settings.switch_budget)

    def _main(self, run: _Run) -> None:
        self._ident, self._native_id = threading.get_ident(), threading.get_native_id()
        try:
            name_thread()
            self._ticks(run)
        finally:
            run.done.release()

    def _sleep(self, run: _Run) -> bool:
        """Sleep until something wakes the controller; False: end the thread."""
        if not IDLE.sleep(run.bell.set, _switch_policy.FAST_TICK_NS, COMPUTE_SHARE):
            self.policy.woke()  # woken since the tick: look again
            return True
        live.SWITCHINTERVAL.set(dormant=1)
        ending = run.wait(None)
        source = IDLE.awake()
        live.SWITCHINTERVAL.set(dormant=0)
        if source is not None:
            live.SWITCHINTERVAL.add(**{f"wakes_{source}": 1})
        self.policy.woke()
        return not ending

    def _ticks(self, run: _Run) -> None:
        policy = self.policy
        shares = ThreadShares()
        others = OthersUse()
        count = cpus(allowed_cpus())
        clock = time.perf_counter_ns
        last = clock()
        alone = 0
        while True:
            tick = policy.tick_ns()
            if tick is None:
                if not self._sleep(run):
                    return
                continue
            began = clock()
            if run.wait(tick / 1e9):
                return
            now = clock()
            loops, loop_threads = running_loops()
            competitors = -1
            free = count
            if policy.wants_competitors():
                ran = shares.compute_shares(loop_threads, now)
                if ran is not None:
                    competitors = _switch_policy.competing(ran)
                free = cpus_left(count, others.read(now))
            else:
                shares.forget()
            policy.budget = settings.switch_budget
            held, engagements = policy.interval_us, policy.engagements
            alone = alone + 1 if threading.active_count() <= 1 else 0
            wakeable = not alone and not IDLE.poked() and loops_report()
            wanted = policy.step(
                _switch_policy.Sample(
                    now, now - began - tick, competitors, loops, free, wakeable
                )
            )
            self._record(held, now - last, now - began - tick)
            if policy.engagements > engagements:
                live.SWITCHINTERVAL.add(engagements=1)
            last = now
            # Every tick, not only on a change: an application that set its
            # own interval meanwhile is seen at once, and left alone.
            if not self._apply(wanted):
                live.SWITCHINTERVAL.set(overridden=1, engaged=0)
                return
            if alone >= ALONE_TICKS and not policy.engaged:
                return

    def _record(self, held_us: float, elapsed_ns: int, wait_ns: int) -> None:
        """The tick's wait, where its time went, and the readings after it."""
        policy = self.policy
        rung = (
            f"at_{held_us:g}us_ns"
            if held_us in _switch_policy.LADDER_US
            else "at_found_ns"
        )
        live.SWITCHINTERVAL.observe("waits", wait_ns)
        live.SWITCHINTERVAL.add(**{rung: elapsed_ns})
        live.SWITCHINTERVAL.set(
            interval_us=policy.interval_us,
            engaged=int(policy.engaged),
            competitors=max(policy.competitors, 0),
            cost=policy.cost,
        )
