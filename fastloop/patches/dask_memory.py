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
thread but its loop's is parked where only another thread or another
process can wake it (``PARKED``, told by the thread's frames: dask's
executor threads on an empty queue, the pipes from the nanny and from the
parent process, dask's loop profiler, fastloop's own threads), the
process has no thread Python does not know of, no task is executing, the
worker is running (not paused), and its memory read below every
threshold.  A parked thread then runs only once the loop wakes it, or
another process does through a pipe that stops or ends the worker.

Sleep.  A check (stock's, run by the callback) that finds its worker
quiet stretches the callback to ``LONGEST_S``, which Tornado reads when it
schedules the next run, and puts the worker on its loop's listeners
(``add_callback``'s per-loop ``_process_events`` wrapper).  From then on
each loop iteration schedules a probe, which queues itself again behind
whatever else is ready until nothing is: it runs as the loop is about to
wait, after every callback its iteration led to.  The probe reads the
memory as stock's check does and looks again: still quiet, the worker
sleeps on; not (a thread left its park or started, a task executes, the
memory passed a threshold, the worker paused), the callback goes back to
its interval, its next run an interval later.  So while a worker is
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
plugin runs once a ``LONGEST_S`` while the worker sleeps.

A worker built before install keeps stock's callback.  ``uninstall()``
puts each stretched callback back to its interval (on its loop), and a
``memory_monitor`` bound before it acts as stock's from then on.  The
nanny's monitor stays stock's: it watches the worker's process from
outside, for when that process cannot be trusted to.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
import weakref
from collections.abc import Callable
from types import FrameType, ModuleType
from typing import Any

from fastloop.patches import Patch
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
        self.cpu: dict[int, int] = {}

    def parked(self) -> bool:
        frames = sys._current_frames()
        if threads_of_process() != len(frames):
            return False  # a thread Python does not know of
        here = threading.get_ident()
        cpu: dict[int, int] = {}
        try:
            return all(
                self.thread_parked(ident, frame, cpu)
                for ident, frame in frames.items()
                if ident != here
            )
        finally:
            self.cpu = cpu

    def thread_parked(self, ident: int, frame: FrameType, cpu: dict[int, int]) -> bool:
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
        if kind == "c-queue":
            now = thread_cpu_ns(ident)
            cpu[ident] = now
            return (
                now >= 0
                and self.cpu.get(ident) == now
                and chain[0].f_locals["work_queue"].empty()
            )
        return False


def threads_of_process() -> int:
    """The process's threads, as the kernel counts them (-1 if unknown)."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
        return int(fields[17])
    except (OSError, IndexError, ValueError):
        return -1


def thread_cpu_ns(ident: int) -> int:
    """CPU time a thread has run, in ns (-1 where the OS does not say)."""
    try:
        return time.clock_gettime_ns(time.pthread_getcpuclockid(ident))
    except (AttributeError, OSError):
        return -1


class Sleeper:
    """One worker's memory monitor: asleep or not, and its pending probe."""

    __slots__ = (
        "asleep",
        "last",
        "listener",
        "manager",
        "pc",
        "probing",
        "threads",
        "worker",
    )

    def __init__(self, manager: Any, worker: Any, pc: Any) -> None:
        self.manager = weakref.ref(manager)
        self.worker = weakref.ref(worker)
        self.pc = pc
        self.asleep = False
        self.probing = False
        #: When its memory was last read (the loop's clock).
        self.last = 0.0
        self.threads = Threads()
        #: What it put on its loop's listeners, while it is there.
        self.listener: Callable[[Any], None] | None = None


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

    def quiet(self, sleeper: Sleeper, manager: Any, worker: Any) -> bool:
        """Read the memory, as stock's check does, and say whether only the
        loop can change it before the loop wakes again."""
        memory = worker.monitor.get_process_memory()
        sleeper.last = sleeper.pc.io_loop.time()
        if worker.status != self.module.Status.running:
            return False
        limit = manager.memory_limit
        for fraction in (manager.memory_pause_fraction, manager.memory_spill_fraction):
            if fraction is not False and memory > fraction * limit:
                return False
        if worker.state.executing_count or worker.state.long_running:
            return False
        return sleeper.threads.parked()

    def after_check(self, manager: Any, worker: Any) -> None:
        """After stock's check: sleep if the worker is quiet, else wake."""
        pc = worker.periodic_callbacks.get(CALLBACK)
        if pc is None or not pc.is_running():
            return
        sleeper = self.states.setdefault(
            manager, functools.partial(Sleeper, worker=worker, pc=pc)
        )
        state = self.listened(pc.io_loop)
        if (
            state is None
            or sleeper.pc is not pc
            or not self.quiet(sleeper, manager, worker)
        ):
            self.wake(sleeper, restart=False)
            return
        sleeper.asleep = True
        if sleeper.listener not in state.listeners:
            sleeper.listener = functools.partial(self.iterated, sleeper, state)
            state.listen(sleeper.listener)
        # The running callback schedules its next run with this, as it returns.
        pc.callback_time = LONGEST_S * 1000

    def iterated(self, sleeper: Sleeper, state: Any, event_list: Any) -> None:
        """A loop iteration began (the listener): probe once it is done."""
        if not sleeper.asleep or not self.installed.on:
            if sleeper.listener is not None:
                state.unlisten(sleeper.listener)
                sleeper.listener = None
            return
        if not sleeper.probing:
            sleeper.probing = True
            sleeper.pc.io_loop.asyncio_loop.call_soon(self.probe, sleeper)

    def probe(self, sleeper: Sleeper) -> None:
        """Once nothing else is ready (or an interval after the last
        reading), read the memory and look again."""
        manager, worker = sleeper.manager(), sleeper.worker()
        if manager is None or worker is None or not sleeper.asleep:
            sleeper.probing = False
            return
        loop = sleeper.pc.io_loop
        interval = manager.memory_monitor_interval
        if loop.asyncio_loop._ready and loop.time() - sleeper.last < interval:
            loop.asyncio_loop.call_soon(self.probe, sleeper)
            return
        sleeper.probing = False
        if not self.installed.on or not self.quiet(sleeper, manager, worker):
            self.wake(sleeper, restart=True)

    def wake(self, sleeper: Sleeper, *, restart: bool) -> None:
        """The callback back to its interval: restarted (its next run an
        interval from now) unless it is the one running."""
        sleeper.asleep = False
        manager, worker, pc = sleeper.manager(), sleeper.worker(), sleeper.pc
        if manager is None or worker is None:
            return
        pc.callback_time = manager.memory_monitor_interval * 1000
        if (
            restart
            and worker.periodic_callbacks.get(CALLBACK) is pc
            and pc.is_running()
        ):
            pc.stop()
            pc.start()

    def detach(self, manager: Any) -> None:
        # uninstall() may run on any thread: the callback restarts on its loop.
        sleeper = getattr(manager, "_fastloop_memory", None)
        if sleeper is not None and sleeper.asleep:
            sleeper.pc.io_loop.add_callback(self.wake, sleeper, restart=True)


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
    from tornado.ioloop import PeriodicCallback

    update = getattr(PeriodicCallback.__dict__.get("_update_next"), "__code__", None)
    if update is None or "callback_time" not in update.co_names:
        return "PeriodicCallback no longer reads callback_time when it reschedules"
    return None


def apply(module: ModuleType) -> list[Change]:
    monitors = Monitors(module)
    installed = monitors.installed
    stock: Callable[..., Any] = monitors.stock

    async def memory_monitor(self: Any, worker: Any) -> None:
        await stock(self, worker)
        if installed.on:
            monitors.after_check(self, worker)

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
