"""A dask worker's memory monitor sleeps while only its loop can change its memory.

A worker's ``"memory_monitor"`` PeriodicCallback runs
``WorkerMemoryManager.memory_monitor`` every
``distributed.worker.memory.monitor-interval`` (100 ms): it reads the
process's memory (``worker.monitor.get_process_memory()``), pauses the
worker above ``memory.pause`` and resumes it below, and spills above
``memory.spill``.  On a running worker below both it does nothing more:
ten wake-ups a second to read one number.

Quiet.  While a loop waits for its next event, the process's memory can
change only by some other thread running.  A worker is quiet when every
thread but its loop's is parked where it takes no work until the loop
gives it some (``PARKED``, told by the thread's frames, read with the GIL
held from the frames to the last check: dask's executor threads on an
empty queue, which wake each second only to wait again; the pipes from
the nanny and from the parent process, which stop or end the worker;
dask's loop profiler and fastloop's own threads, which keep what they
hold bounded), the process has no thread Python does not know of, no task
is executing, the worker is running (not paused), and its memory read
below every threshold.

Sleep.  A check (stock's, run by the callback) that finds its worker
quiet stretches the callback to ``LONGEST_S`` at most (``stretch``: its
next run lands just after a timer the loop has anyway in the second half
of that, so that one wake-up serves both), which Tornado reads when it
schedules the next run, and puts the worker on its loop's listeners
(``add_callback``'s per-loop ``_process_events`` wrapper).  From then on
each loop iteration schedules a probe behind its handles and due timers
(``after_timers``), which waits for the next iteration's while any are
ready: it runs as the loop is about to wait, after every callback its
iteration led to, and costs no iteration of its own.  The probe reads the
memory as stock's check does and looks again: still quiet, the worker
sleeps on; not (a thread left its park or started, a task executes, the
memory passed a threshold, the worker paused), the callback goes back to
its interval, its next run an interval later, and past a threshold
stock's check runs at once.  One probe serves every sleeping worker of a
loop.  So while a worker is
quiet, each change of its memory is read before its loop waits again,
where stock reads it at most an interval later; once it is not, the grid
is stock's.  A loop that never runs out of ready callbacks is probed at
most an interval after its last reading, as stock's grid would.

What it trades.  Stock reads the memory ten times a second; a sleeping
worker reads it once per burst of its loop's work (a heartbeat, a timer),
a few times a second when idle, each reading no later than stock's.  A
thread of asyncio's default executor waits inside C, where its frames
cannot tell a thread that waits from one that has just taken a job: it
counts as parked only while its queue is empty and its CPU time has not
moved since the probe before.  Readings a sleeping worker takes are not
``memory_monitor`` calls: a ``memory_monitor`` wrapped by a test or a
plugin runs once a ``LONGEST_S`` while the worker sleeps, and its
callback's ``callback_time`` reads the stretch (a value set meanwhile,
other than the stretch, is the interval it goes back to).  A check that
the callback did not run (a direct ``await memory_monitor(...)``) reads as
stock's and never stretches the callback.

Where ``add_callback`` leaves the loop, no probe runs: a sleeping monitor
reads at its next run, a ``LONGEST_S`` at most later, and is stock's from
then on.  A worker built before install keeps stock's callback.  ``uninstall()``
puts each stretched callback back to its interval (on its loop), and a
``memory_monitor`` bound before it acts as stock's from then on.  The
nanny's monitor stays stock's: it watches the worker's process from
outside, for when that process cannot be trusted to.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
from collections.abc import Callable
from types import FrameType, ModuleType
from typing import Any

from fastloop.patches import (
    Patch,
    after_timers,
    rewind,
    stretch,
    stretch_unsupported,
)
from fastloop.patches.changes import Change, Flag, PerObject, Swap

#: The PeriodicCallback of ``Worker.periodic_callbacks`` that calls
#: ``memory_monitor``.
CALLBACK = "memory_monitor"

#: The longest a sleeping monitor's callback waits, in seconds: a reading
#: at least this often, whatever the probes see.
LONGEST_S = 1.0

#: Frames under every thread's body, innermost first.
BOOTSTRAP = ("threading:Thread.run", "threading:Thread._bootstrap_inner")

#: Parked threads, by their frames (``module:qualname``) from the innermost
#: to the thread's body, each with what else parks it: ``"pipe"`` (only
#: another process writes to it), ``"queue"`` (a ``queue.Queue`` the loop
#: feeds, empty) or ``"c-queue"`` (a C ``SimpleQueue``, empty, and the
#: thread's CPU time unmoved since the probe before).
PARKED: dict[tuple[str, ...], str] = {
    (
        "multiprocessing.connection:Connection._recv",
        "multiprocessing.connection:Connection._recv_bytes",
        "multiprocessing.connection:_ConnectionBase.recv",
        "distributed.process:AsyncProcess._immediate_exit_when_closed.<locals>"
        ".monitor_parent",
    ): "pipe",
    (
        "multiprocessing.connection:Connection._recv",
        "multiprocessing.connection:Connection._recv_bytes",
        "multiprocessing.connection:_ConnectionBase.recv_bytes",
        "multiprocessing.queues:Queue.get",
        "distributed.nanny:WorkerProcess._run.<locals>.watch_stop_q",
    ): "pipe",
    (
        "threading:Condition.wait",
        "queue:Queue.get",
        "distributed.threadpoolexecutor:_worker",
    ): "queue",
    ("concurrent.futures.thread:_worker",): "c-queue",
}

#: Thread bodies that run no code of the application's and hold what they
#: keep to a bounded size: dask's loop profiler (stock's body, or the one
#: ``dask_loop_profile`` gives it) and fastloop's own threads.
OWN_BODIES = ("distributed.profile:_watch",)
OWN_MODULES = ("fastloop.",)


def where(frame: FrameType) -> str:
    return f"{frame.f_globals.get('__name__')}:{frame.f_code.co_qualname}"


class Threads:
    """Whether every thread but the caller's is parked; the CPU times of the
    threads parked in C, kept from one look to the next."""

    __slots__ = ("cpu",)

    def __init__(self) -> None:
        #: Native thread id -> CPU ns, for the threads parked in C last time.
        self.cpu: dict[int, int] = {}

    def parked(self) -> bool:
        # First what may release the GIL (files, the threading lock); from
        # the frames on, nothing may: a thread could take a job meanwhile.
        counted = threads_of_process()
        natives = {thread.ident: thread.native_id for thread in threading.enumerate()}
        cpu = {native: thread_cpu_ns(native) for native in self.cpu}
        frames = sys._current_frames()
        if counted != len(frames):
            return False  # a thread Python does not know of
        here = threading.get_ident()
        seen: dict[int, int] = {}
        try:
            return all(
                self.thread_parked(frame, natives.get(ident), cpu, seen)
                for ident, frame in frames.items()
                if ident != here
            )
        finally:
            self.cpu = seen

    def thread_parked(
        self,
        frame: FrameType,
        native: int | None,
        cpu: dict[int, int],
        seen: dict[int, int],
    ) -> bool:
        """Whether the thread whose innermost frame this is is parked
        (``native``: its id in the kernel; ``cpu``: CPU times read just
        before the frames; ``seen``: where to note one parked in C)."""
        chain = []
        below: FrameType | None = frame
        while below is not None:
            chain.append(below)
            below = below.f_back
        names = [where(each) for each in chain]
        # The body: the frame under Thread.run, or the outermost one of a
        # thread started by _thread (auto mode's controller is one).
        at = len(names) - 1
        for under in range(len(names) - len(BOOTSTRAP)):
            if tuple(names[under + 1 : under + 1 + len(BOOTSTRAP)]) == BOOTSTRAP:
                at = under
                break
        body = names[at]
        if body in OWN_BODIES or body.startswith(OWN_MODULES):
            return True
        kind = PARKED.get(tuple(names[: at + 1]))
        if kind == "pipe":
            return True
        if kind == "queue":
            return not chain[1].f_locals["self"]._qsize()
        if kind == "c-queue" and native is not None:
            # Its CPU time the look before, and now (read before the frames).
            before, now = self.cpu.get(native, -1), cpu.get(native, -1)
            seen[native] = now
            if now < 0 or before != now:
                return False
            return bool(chain[0].f_locals["work_queue"].empty())
        return False


def threads_of_process() -> int:
    """The process's threads, as the kernel counts them (-1 if unknown)."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
        return int(fields[17])
    except (OSError, IndexError, ValueError):
        return -1


def thread_cpu_ns(native: int) -> int:
    """CPU time a thread of this process has run, in ns, from the kernel's
    scheduler statistics (-1 where it does not say, or the thread is gone)."""
    try:
        with open(f"/proc/self/task/{native}/schedstat", "rb") as stat:
            return int(stat.read().split()[0])
    except (OSError, IndexError, ValueError):
        return -1


class Sleeper:
    """One worker's memory monitor: asleep or not, and how its callback ran."""

    __slots__ = (
        "asleep",
        "by_pc",
        "last",
        "manager",
        "pc",
        "stock_time",
        "stretched",
        "worker",
    )

    def __init__(self, manager: Any, worker: Any, pc: Any) -> None:
        # Strong: its callback holds them anyway (a partial of the manager's
        # method and the worker); a closed worker's probe wakes it, which
        # takes it off its loop's ``Probes``.
        self.manager = manager
        self.worker = worker
        self.pc = pc
        self.asleep = False
        #: The callback's own runs of ``memory_monitor`` in progress: its
        #: ``_run`` schedules the next one as each returns.
        self.by_pc = 0
        #: When its memory was last read (the loop's clock).
        self.last = 0.0
        #: The callback's interval before it was stretched, and the
        #: ``callback_time`` the stretch set (another is a user's).
        self.stock_time = 0.0
        self.stretched = 0.0


class Probes:
    """One loop's sleeping monitors, and its one pending probe (the
    listener on the loop's state while any monitor there sleeps)."""

    __slots__ = ("monitors", "probing", "sleepers", "state", "threads")

    def __init__(self, monitors: Monitors, state: Any) -> None:
        self.monitors = monitors
        self.state = state
        self.sleepers: list[Sleeper] = []
        self.probing = False
        self.threads = Threads()

    def __call__(self, event_list: Any) -> None:
        """A loop iteration began: probe once it is done."""
        self.sleepers = [each for each in self.sleepers if each.asleep]
        if not self.sleepers or not self.monitors.installed.on:
            self.state.unlisten(self)
            for sleeper in self.sleepers:
                self.monitors.wake(sleeper)
            self.sleepers = []
            return
        if not self.probing:
            self.probing = True
            after_timers(self.sleepers[0].pc.io_loop.asyncio_loop, self.probe)

    def probe(self) -> None:
        """Once nothing else is ready (or an interval after a reading),
        read each sleeping worker's memory and look again."""
        sleepers = [each for each in self.sleepers if each.asleep]
        if not sleepers:
            self.probing = False
            return
        loop = sleepers[0].pc.io_loop
        interval = min(each.manager.memory_monitor_interval for each in sleepers)
        oldest = min(each.last for each in sleepers)
        if loop.asyncio_loop._ready and loop.time() - oldest < interval:
            after_timers(loop.asyncio_loop, self.probe)
            return
        self.probing = False
        for sleeper in sleepers:
            self.monitors.look(sleeper, self.threads)


class Monitors:
    """What the replacement shares: dask's module, the stock method, the
    installed flag and the managers' ``Sleeper`` states."""

    def __init__(self, module: ModuleType) -> None:
        from fastloop.patches.add_callback import listened

        self.module = module
        self.listened = listened
        self.stock = module.WorkerMemoryManager.__dict__["memory_monitor"]
        self.installed = Flag()
        self.states = PerObject("_fastloop_memory", detach=self.detach)

    def quiet(self, sleeper: Sleeper, threads: Threads) -> bool | None:
        """Read the memory, as stock's check does: True if only the loop can
        change it before the loop wakes again, None if it passed a
        threshold (or the worker is paused), False otherwise."""
        manager, worker = sleeper.manager, sleeper.worker
        memory = worker.monitor.get_process_memory()
        sleeper.last = sleeper.pc.io_loop.time()
        if worker.status != self.module.Status.running:
            return None
        limit = manager.memory_limit
        for fraction in (manager.memory_pause_fraction, manager.memory_spill_fraction):
            if fraction is not False and memory > fraction * limit:
                return None
        if self.busy(worker):
            return False
        return threads.parked()

    def busy(self, worker: Any) -> bool:
        """A task runs, or the worker is not running: no sleep, whatever the
        memory reads."""
        state = worker.state
        return bool(
            state.executing_count
            or state.long_running
            or worker.status != self.module.Status.running
        )

    def probes(self, state: Any) -> Probes:
        """The loop's ``Probes`` of this install, put on its listeners."""
        for each in state.listeners:
            if isinstance(each, Probes) and each.monitors is self:
                return each
        probes = Probes(self, state)
        state.listen(probes)
        return probes

    def after_check(self, manager: Any, worker: Any, *, by_pc: bool) -> None:
        """After stock's check: sleep if the worker is quiet, else wake."""
        pc = worker.periodic_callbacks.get(CALLBACK)
        if pc is None or not pc.is_running():
            return
        sleeper = self.states.setdefault(
            manager, functools.partial(Sleeper, worker=worker, pc=pc)
        )
        state = self.listened(pc.io_loop)
        if state is None or sleeper.pc is not pc:
            self.wake(sleeper)
            return
        probes = self.probes(state)
        # Stock's check has just read the memory: no second reading for a
        # worker that could not sleep whatever it reads.
        if self.busy(worker) or self.quiet(sleeper, probes.threads) is not True:
            self.wake(sleeper)
            return
        if not sleeper.asleep:
            sleeper.asleep = True
            sleeper.stock_time = pc.callback_time
            probes.sleepers.append(sleeper)
        elif pc.callback_time != sleeper.stretched:
            sleeper.stock_time = pc.callback_time  # set meanwhile: the interval
        # The callback's own run schedules its next one with this as it
        # returns; a check run otherwise leaves the next run where it was.
        if by_pc:
            sleeper.stretched = stretch(pc, LONGEST_S, sleeper.stock_time / 1000)

    def look(self, sleeper: Sleeper, threads: Threads) -> None:
        """A probe's look at a sleeping worker."""
        if not self.installed.on:
            self.wake(sleeper)
            return
        quiet = self.quiet(sleeper, threads)
        if quiet is True:
            return
        self.wake(sleeper)
        if quiet is None and not sleeper.by_pc:
            # Past a threshold: stock's check now, not an interval later.
            manager, worker = sleeper.manager, sleeper.worker
            sleeper.pc.io_loop.add_callback(manager.memory_monitor, worker)

    def wake(self, sleeper: Sleeper) -> None:
        """The callback back to its interval, its next run an interval from
        now (the callback's own run in progress schedules it as it returns)."""
        if not sleeper.asleep:
            return
        sleeper.asleep = False
        pc, worker = sleeper.pc, sleeper.worker
        if pc.callback_time != sleeper.stretched:
            return  # set meanwhile: the user's
        if not sleeper.by_pc and worker.periodic_callbacks.get(CALLBACK) is pc:
            rewind(pc, sleeper.stock_time)
        else:
            pc.callback_time = sleeper.stock_time

    def detach(self, manager: Any) -> None:
        # uninstall() may run on any thread: the callback restarts on its loop.
        sleeper = getattr(manager, "_fastloop_memory", None)
        if sleeper is not None and sleeper.asleep:
            sleeper.pc.io_loop.add_callback(self.wake, sleeper)


def check(module: ModuleType) -> str | None:
    manager = getattr(module, "WorkerMemoryManager", None)
    if manager is None:
        return "distributed.worker_memory.WorkerMemoryManager is missing"
    monitor = manager.__dict__.get("memory_monitor")
    if getattr(monitor, "__wrapped__", monitor) is None:
        return "WorkerMemoryManager.memory_monitor is missing"
    if getattr(getattr(module, "Status", None), "running", None) is None:
        return "distributed.worker_memory.Status is missing"
    if not callable(getattr(sys, "_current_frames", None)):
        return "sys._current_frames is missing"
    return stretch_unsupported()


def apply(module: ModuleType) -> list[Change]:
    from tornado.ioloop import PeriodicCallback

    run = PeriodicCallback.__dict__["_run"]
    PC_RUN = run.__code__ if inspect.iscoroutinefunction(run) else None
    monitors = Monitors(module)
    installed = monitors.installed
    stock: Callable[..., Any] = monitors.stock

    async def memory_monitor(self: Any, worker: Any) -> None:
        # Run by the callback: its _run awaits this coroutine (Tornado 6.3+;
        # 6.2's schedules the next run before the coroutine starts).
        by_pc = sys._getframe(1).f_code is PC_RUN
        sleeper = getattr(self, "_fastloop_memory", None)
        if sleeper is not None and by_pc:
            sleeper.by_pc += 1
        try:
            await stock(self, worker)
        finally:
            if sleeper is not None and by_pc:
                sleeper.by_pc -= 1
        if installed.on:
            monitors.after_check(self, worker, by_pc=by_pc)

    functools.update_wrapper(memory_monitor, stock)
    return [
        monitors.states,
        installed,
        Swap(module.WorkerMemoryManager, "memory_monitor", memory_monitor),
    ]


PATCH = Patch(
    name="dask_memory",
    target="distributed.worker_memory",
    summary="dask worker: the 100 ms memory monitor sleeps while only its "
    "loop can change the memory, which it then reads after each iteration",
    replaces="`distributed.worker_memory.WorkerMemoryManager.memory_monitor` "
    "(stock's check, then the decision to sleep); a listener on "
    "`add_callback`'s per-loop state",
    relies_on='the `"memory_monitor"` PeriodicCallback in '
    "`Worker.periodic_callbacks`; `memory_limit`, `memory_pause_fraction`, "
    "`memory_spill_fraction`, `memory_monitor_interval`; "
    "`worker.monitor.get_process_memory`, `worker.state.executing_count` and "
    "`long_running`; asyncio's `_ready`; Tornado's `PeriodicCallback` reading "
    "`callback_time` as it reschedules",
    verifies=(
        "distributed.worker_memory:WorkerMemoryManager.__init__",
        "distributed.worker_memory:WorkerMemoryManager.memory_monitor",
        "distributed.worker_memory:WorkerMemoryManager._maybe_pause_or_unpause",
        "distributed.worker_memory:WorkerMemoryManager._maybe_spill",
        "distributed.threadpoolexecutor:_worker",
    ),
    check=check,
    apply=apply,
)
