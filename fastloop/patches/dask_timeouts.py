"""A dask scheduler's idle and no-workers checks sleep while they have nothing to see.

The scheduler runs two checks every 250 ms, each a PeriodicCallback:
``check_idle`` (``"idle-timeout"``) keeps ``idle_since``, the time since
which no task has run or waited, and closes the scheduler once it has been
idle for ``distributed.scheduler.idle-timeout``; ``_check_no_workers``
(``"no-workers-timeout"``) fails tasks that waited longer than
``scheduler.no-workers-timeout`` for a worker that could run them.  With
neither timeout set (the defaults) an idle scheduler still wakes eight
times a second for them.

No-workers.  With ``no_workers_timeout`` None, stock's check returns at
once: a run that finds it None stretches the callback to ``LONGEST_S``,
and a run that finds it set puts the interval back.  A timeout set on a
running scheduler is checked from its next run, a ``LONGEST_S`` later at
most.

Idle.  Only a transition of a task (``transition_counter``) or a graph
being added (``_active_graph_updates``) ends the scheduler's idleness, and
both happen on its loop.  A check the callback runs that finds the
scheduler idle (``idle_since`` set, status running, no Jupyter server,
whose activity counts too) and nothing changed since the check before
stretches the callback to ``LONGEST_S`` and puts the scheduler on its
loop's listeners (``add_callback``'s per-loop ``_process_events``
wrapper).  From then on each loop iteration schedules a probe that runs as
the loop is about to wait (it queues itself again behind whatever else is
ready, for at most an interval): it compares the two counters with the
check's.  Any change wakes the check: stock's check runs there and then
(``idle_since`` turns None, as stock's next check, at most an interval
later, would make it) and the callback goes back to its interval, its next
run an interval later.  With an idle timeout set the callback sleeps only
while the deadline is more than a stretch away, so the scheduler closes on
stock's grid.

What it trades.  While the scheduler is idle, ``idle_since`` is the value
stock's check set when idleness began; a reader sees it turn None before
the loop next waits after the first transition, where stock's grid turns
it at most an interval later.  Where ``add_callback`` leaves the loop (not
installed there, uvloop), the idle check stays stock's.  ``uninstall()``
puts each stretched callback back to its interval (on its loop), and a
method bound before it acts as stock's from then on.
"""

from __future__ import annotations

import functools
import sys
from types import ModuleType
from typing import Any

from fastloop.patches import Patch, stretch_unsupported
from fastloop.patches.changes import Change, Flag, PerObject, Swap

#: The PeriodicCallbacks of ``Scheduler.periodic_callbacks`` this sleeps.
IDLE = "idle-timeout"
NO_WORKERS = "no-workers-timeout"

#: The longest a sleeping check's callback waits, in seconds.
LONGEST_S = 1.0


class Sleeper:
    """One scheduler check's callback while it sleeps: what it was, and
    the counters its last check read."""

    __slots__ = ("graphs", "pc", "stock_time", "transitions")

    def __init__(self, pc: Any, stock_time: float) -> None:
        self.pc = pc
        #: The callback's interval before it was stretched.
        self.stock_time = stock_time
        self.transitions = -1
        self.graphs = -1


class Probe:
    """One loop's sleeping idle checks, and its one pending probe (the
    listener on the loop's state while any check there sleeps)."""

    __slots__ = ("checks", "last", "pending", "schedulers", "state")

    def __init__(self, checks: Checks, state: Any) -> None:
        self.checks = checks
        self.state = state
        self.schedulers: list[Any] = []
        self.pending = False
        #: When the probe last looked (the loop's clock).
        self.last = 0.0

    def __call__(self, event_list: Any) -> None:
        """A loop iteration began: look once it is done."""
        if not self.schedulers or not self.checks.installed.on:
            self.state.unlisten(self)
            schedulers, self.schedulers = self.schedulers, []
            for scheduler in schedulers:
                self.checks.wake_idle(scheduler)
            return
        if not self.pending:
            self.pending = True
            self.schedulers[0].io_loop.asyncio_loop.call_soon(self.probe)

    def probe(self) -> None:
        if not self.schedulers:
            self.pending = False
            return
        ioloop = self.schedulers[0].io_loop
        interval = min(each._fastloop_idle_check.stock_time for each in self.schedulers)
        now = ioloop.time()
        if ioloop.asyncio_loop._ready and (now - self.last) * 1000 < interval:
            ioloop.asyncio_loop.call_soon(self.probe)
            return
        self.pending, self.last = False, now
        for scheduler in list(self.schedulers):
            if not self.checks.unchanged(scheduler):
                self.checks.wake_idle(scheduler)
                self.checks.stock_idle(scheduler)


class Checks:
    """What the replacements share: dask's module, the stock methods, the
    installed flag and the sleeping callbacks."""

    def __init__(self, module: ModuleType) -> None:
        from fastloop.patches.add_callback import listened

        self.module = module
        self.listened = listened
        self.stock_idle = module.Scheduler.__dict__["check_idle"]
        self.stock_no_workers = module.Scheduler.__dict__["_check_no_workers"]
        self.installed = Flag()
        self.idle = PerObject("_fastloop_idle_check", detach=self.detach_idle)
        self.no_workers = PerObject(
            "_fastloop_no_workers_check", detach=self.detach_no_workers
        )

    def running(self, scheduler: Any, name: str) -> Any:
        """The scheduler's callback ``name`` if it runs, else None."""
        pc = scheduler.periodic_callbacks.get(name)
        return pc if pc is not None and pc.is_running() else None

    def unchanged(self, scheduler: Any) -> bool:
        """Whether the scheduler is as idle as its sleeping check left it."""
        sleeper: Sleeper = scheduler._fastloop_idle_check
        return bool(
            scheduler.idle_since is not None
            and scheduler.status == self.module.Status.running
            and scheduler.transition_counter == sleeper.transitions
            and scheduler._active_graph_updates == sleeper.graphs
        )

    def after_idle(self, scheduler: Any) -> None:
        """After stock's idle check, run by its callback: sleep or wake."""
        pc = self.running(scheduler, IDLE)
        sleeper: Sleeper | None = getattr(scheduler, "_fastloop_idle_check", None)
        if pc is None or (sleeper is not None and sleeper.pc is not pc):
            self.wake_idle(scheduler, by_pc=True)
            return
        state = self.listened(pc.io_loop)
        deadline = (
            scheduler.idle_since + scheduler.idle_timeout
            if scheduler.idle_timeout and scheduler.idle_since is not None
            else None
        )
        if (
            state is None
            or scheduler.jupyter
            or scheduler.idle_since is None
            or scheduler._active_graph_updates
            or scheduler.status != self.module.Status.running
            or (deadline is not None and self.module.time() + LONGEST_S >= deadline)
        ):
            self.wake_idle(scheduler, by_pc=True)
            return
        if sleeper is None:
            sleeper = Sleeper(pc, pc.callback_time)
            if not self.idle.put(scheduler, _fastloop_idle_check=sleeper):
                return  # uninstalled meanwhile
            self.probe(state).schedulers.append(scheduler)
        elif pc.callback_time != LONGEST_S * 1000:
            sleeper.stock_time = pc.callback_time  # set meanwhile: the interval
        sleeper.transitions = scheduler.transition_counter
        sleeper.graphs = scheduler._active_graph_updates
        # Tornado schedules the next run with this as the callback returns.
        pc.callback_time = LONGEST_S * 1000

    def probe(self, state: Any) -> Probe:
        """The loop's ``Probe`` of this install, put on its listeners."""
        for each in state.listeners:
            if isinstance(each, Probe) and each.checks is self:
                return each
        probe = Probe(self, state)
        state.listen(probe)
        return probe

    def wake_idle(self, scheduler: Any, *, by_pc: bool = False) -> None:
        """The idle check's callback back to its interval, its next run an
        interval from now (``by_pc``: the callback's own run is in progress,
        and schedules it as it returns)."""
        sleeper: Sleeper | None = getattr(scheduler, "_fastloop_idle_check", None)
        if sleeper is None:
            return
        self.idle.put(scheduler, _fastloop_idle_check=None)
        state = self.listened(sleeper.pc.io_loop)
        probe = self.probe(state) if state is not None else None
        if probe is not None and scheduler in probe.schedulers:
            probe.schedulers.remove(scheduler)
        pc = sleeper.pc
        pc.callback_time = sleeper.stock_time
        if not by_pc and self.running(scheduler, IDLE) is pc:
            pc.stop()
            pc.start()

    def after_no_workers(self, scheduler: Any) -> None:
        """After stock's no-workers check, run by its callback."""
        pc = self.running(scheduler, NO_WORKERS)
        if pc is None:
            return
        stock_time: float | None = getattr(
            scheduler, "_fastloop_no_workers_check", None
        )
        if scheduler.no_workers_timeout is None:
            if stock_time is None or pc.callback_time != LONGEST_S * 1000:
                # The interval (a value set meanwhile replaces stock's).
                stock_time = pc.callback_time
            if self.no_workers.put(scheduler, _fastloop_no_workers_check=stock_time):
                pc.callback_time = LONGEST_S * 1000
        elif stock_time is not None:
            self.no_workers.put(scheduler, _fastloop_no_workers_check=None)
            pc.callback_time = stock_time

    def detach_idle(self, scheduler: Any) -> None:
        # uninstall() may run on any thread: the callback restarts on its loop.
        sleeper = getattr(scheduler, "_fastloop_idle_check", None)
        if sleeper is not None:
            sleeper.pc.io_loop.add_callback(
                self.restore, sleeper.pc, sleeper.stock_time
            )

    def detach_no_workers(self, scheduler: Any) -> None:
        stock_time = getattr(scheduler, "_fastloop_no_workers_check", None)
        pc = scheduler.periodic_callbacks.get(NO_WORKERS)
        if stock_time is not None and pc is not None:
            pc.io_loop.add_callback(self.restore, pc, stock_time)

    def restore(self, pc: Any, stock_time: float) -> None:
        pc.callback_time = stock_time
        if pc.is_running():
            pc.stop()
            pc.start()


def check(module: ModuleType) -> str | None:
    scheduler = getattr(module, "Scheduler", None)
    if scheduler is None:
        return "distributed.scheduler.Scheduler is missing"
    for name in ("check_idle", "_check_no_workers"):
        if getattr(scheduler.__dict__.get(name), "__code__", None) is None:
            return f"distributed.scheduler.Scheduler.{name} is missing"
    names = set(scheduler.__dict__["check_idle"].__code__.co_names)
    needs = {"transition_counter", "_active_graph_updates", "idle_since", "jupyter"}
    if not needs <= names:
        return "Scheduler.check_idle no longer reads what it did"
    if (
        "no_workers_timeout"
        not in scheduler.__dict__["_check_no_workers"].__code__.co_names
    ):
        return "Scheduler._check_no_workers no longer reads no_workers_timeout"
    if getattr(getattr(module, "Status", None), "running", None) is None:
        return "distributed.scheduler.Status is missing"
    if not callable(getattr(module, "time", None)):
        return "distributed.scheduler.time is missing"
    return stretch_unsupported()


def apply(module: ModuleType) -> list[Change]:
    from tornado.ioloop import PeriodicCallback

    # Both checks are plain functions: the callback's _run calls them
    # directly (and, from Tornado 6.3, awaits nothing they return).
    run_code = PeriodicCallback.__dict__["_run"].__code__
    checks = Checks(module)
    installed = checks.installed
    stock_idle, stock_no_workers = checks.stock_idle, checks.stock_no_workers

    def check_idle(self: Any) -> float | None:
        result: float | None = stock_idle(self)
        if installed.on and sys._getframe(1).f_code is run_code:
            checks.after_idle(self)
        return result

    def _check_no_workers(self: Any) -> None:
        stock_no_workers(self)
        if installed.on and sys._getframe(1).f_code is run_code:
            checks.after_no_workers(self)

    functools.update_wrapper(check_idle, stock_idle)
    functools.update_wrapper(_check_no_workers, stock_no_workers)
    return [
        checks.idle,
        checks.no_workers,
        installed,
        Swap(module.Scheduler, "check_idle", check_idle),
        Swap(module.Scheduler, "_check_no_workers", _check_no_workers),
    ]


PATCH = Patch(
    name="dask_timeouts",
    target="distributed.scheduler",
    summary="dask scheduler: the 250 ms idle and no-workers checks sleep while "
    "the scheduler stays idle and no timeout needs them",
    replaces="`distributed.scheduler.Scheduler.check_idle` and "
    "`Scheduler._check_no_workers` (stock's check, then the decision to "
    "sleep); a listener on `add_callback`'s per-loop state",
    relies_on='the `"idle-timeout"` and `"no-workers-timeout"` PeriodicCallbacks '
    "in `Scheduler.periodic_callbacks`; `idle_since`, `idle_timeout`, "
    "`jupyter`, `transition_counter`, `_active_graph_updates`, "
    "`no_workers_timeout`; asyncio's `_ready`; Tornado's `PeriodicCallback` "
    "reading `callback_time` as it reschedules",
    verifies=(
        "distributed.scheduler:Scheduler.check_idle",
        "distributed.scheduler:Scheduler._check_no_workers",
        "distributed.scheduler:SchedulerState._transition",
    ),
    check=check,
    apply=apply,
)
