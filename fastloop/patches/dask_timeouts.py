"""A dask scheduler's idle and no-workers checks sleep while they have nothing to see.

The scheduler runs two checks every 250 ms, each a PeriodicCallback:
``check_idle`` (``"idle-timeout"``) keeps ``idle_since``, the time since
which no task has run or waited, and closes the scheduler once it has been
idle for ``distributed.scheduler.idle-timeout``; ``_check_no_workers``
(``"no-workers-timeout"``) fails tasks that waited longer than
``scheduler.no-workers-timeout`` for a worker that could run them.  With
neither timeout set (the defaults) an idle scheduler still wakes eight
times a second for them.

Sleep.  A check the callback runs that finds nothing to see stretches
the callback to ``LONGEST_S`` at most (``stretch``: its next run lands
just after a timer the loop has anyway in the second half of that, so
that one wake-up serves both), which Tornado reads when it schedules the
next run.  Nothing to see: for the no-workers check, ``no_workers_timeout``
unset (stock's check then returns at once); for the idle check, the
scheduler idle (``idle_since`` set, running, no graph being added, no
Jupyter server, whose activity counts too) and its idle timeout, if any,
more than a stretch away, so that it closes on stock's grid.

Wake.  Only a transition of a task (``transition_counter``) or a graph
being added (``_active_graph_updates``) ends the scheduler's idleness.
Those two, both timeouts and ``status`` are ``Watched`` on ``Scheduler``:
each set of one, on a scheduler with a check asleep, queues one look on
its loop (``add_callback``, so a set from any thread counts).  The look
compares what the checks read with what is there now; a change wakes that
check: the callback goes back to its interval, its next run an interval
later (``rewind``), and stock's check runs there and then.  So
``idle_since`` turns None an iteration after the first transition, where
stock's next check would turn it at most an interval later, and a timeout
set on a running scheduler counts from then.  While no check sleeps a set
costs a dictionary lookup; no loop iteration pays anything.

What it trades.  While the scheduler stays idle, ``idle_since`` is the
value stock's check set when idleness began, as stock's.  A
``callback_time`` set while a check sleeps is kept when it wakes (one
equal to the stretch reads as the stretch).  On uvloop, whose timers
``stretch`` cannot see, a sleeping check wakes on its own rather than
beside another timer.  ``uninstall()`` wakes every
sleeping check (on its loop), and a method bound before it acts as
stock's from then on.
"""

from __future__ import annotations

import functools
import sys
from types import ModuleType
from typing import Any

from fastloop.patches import Patch, rewind, stretch, stretch_unsupported
from fastloop.patches.changes import Change, Flag, PerObject, Swap

#: The PeriodicCallbacks of ``Scheduler.periodic_callbacks`` this sleeps.
IDLE = "idle-timeout"
NO_WORKERS = "no-workers-timeout"

#: The longest a sleeping check's callback waits, in seconds.
LONGEST_S = 1.0


class Asleep:
    """One sleeping check: its callback, the interval it goes back to, and
    the ``callback_time`` the stretch set (another is a user's)."""

    __slots__ = ("pc", "stock_time", "stretched")

    def __init__(self, pc: Any) -> None:
        self.pc = pc
        self.stock_time: float = pc.callback_time
        self.stretched = 0.0


class Sleeper:
    """A scheduler's sleeping checks, and what its idle check last read."""

    __slots__ = (
        "graphs",
        "idle",
        "idle_timeout",
        "looking",
        "no_workers",
        "scheduler",
        "transitions",
    )

    def __init__(self, scheduler: Any) -> None:
        # Strong: its callbacks hold the scheduler anyway.
        self.scheduler = scheduler
        self.idle: Asleep | None = None
        self.no_workers: Asleep | None = None
        self.transitions = -1
        self.graphs = -1
        self.idle_timeout: Any = None
        #: A look is queued on the loop.
        self.looking = False

    def asleep(self) -> bool:
        return self.idle is not None or self.no_workers is not None


#: The Scheduler attributes whose sets can give a sleeping check something
#: to see.
WATCHED = (
    "transition_counter",
    "_active_graph_updates",
    "idle_timeout",
    "no_workers_timeout",
    "status",
)


class Watched:
    """A Scheduler attribute whose sets queue a look while a check sleeps.

    It keeps the value where stock does: through the data descriptor the
    class had under that name (``transition_counter``, a slot of
    ``SchedulerState``; ``status``, a property of ``Server``), else in the
    instance's ``__dict__``, so that after ``uninstall()`` every value reads
    as it was set."""

    __slots__ = ("checks", "inner", "name")

    def __init__(self, checks: Checks, name: str, inner: Any) -> None:
        self.checks = checks
        self.name = name
        self.inner = inner if hasattr(type(inner), "__set__") else None

    def __get__(self, scheduler: Any, owner: type | None = None) -> Any:
        if scheduler is None:
            return self
        if self.inner is not None:
            return self.inner.__get__(scheduler, owner)
        try:
            return scheduler.__dict__[self.name]
        except KeyError:
            raise AttributeError(self.name) from None

    def __set__(self, scheduler: Any, value: Any) -> None:
        if self.inner is not None:
            self.inner.__set__(scheduler, value)
        else:
            scheduler.__dict__[self.name] = value
        sleeper = scheduler.__dict__.get("_fastloop_timeouts")
        if sleeper is not None and not sleeper.looking and sleeper.asleep():
            sleeper.looking = True
            scheduler.io_loop.add_callback(self.checks.look, sleeper)

    def __delete__(self, scheduler: Any) -> None:
        if self.inner is not None:
            self.inner.__delete__(scheduler)
        else:
            try:
                del scheduler.__dict__[self.name]
            except KeyError:
                raise AttributeError(self.name) from None


class Checks:
    """What the replacements share: dask's module, the stock methods, the
    installed flag and the schedulers' ``Sleeper`` states."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.stock_idle = module.Scheduler.__dict__["check_idle"]
        self.stock_no_workers = module.Scheduler.__dict__["_check_no_workers"]
        self.installed = Flag()
        self.states = PerObject("_fastloop_timeouts", detach=self.detach)

    def running(self, scheduler: Any, name: str) -> Any:
        """The scheduler's callback ``name`` if it runs, else None."""
        pc = scheduler.periodic_callbacks.get(name)
        return pc if pc is not None and pc.is_running() else None

    def sleeper(self, scheduler: Any) -> Sleeper | None:
        """The scheduler's Sleeper (None: uninstalled meanwhile, stay stock)."""
        sleeper: Sleeper | None = getattr(scheduler, "_fastloop_timeouts", None)
        if sleeper is None:
            made = self.states.setdefault(scheduler, Sleeper)
            if getattr(scheduler, "_fastloop_timeouts", None) is not made:
                return None
            sleeper = made
        return sleeper

    def idle_quiet(self, scheduler: Any) -> bool:
        """Whether the idle check, just run, may sleep: the scheduler idle,
        no Jupyter server, the deadline (if any) more than a stretch away."""
        if (
            scheduler.idle_since is None
            or scheduler.jupyter
            or scheduler._active_graph_updates
            or scheduler.status != self.module.Status.running
        ):
            return False
        timeout = scheduler.idle_timeout
        return not timeout or (
            self.module.time() + LONGEST_S < scheduler.idle_since + timeout
        )

    def after_idle(self, scheduler: Any) -> None:
        """After stock's idle check, run by its callback: sleep or wake."""
        pc = self.running(scheduler, IDLE)
        sleeper: Sleeper | None = getattr(scheduler, "_fastloop_timeouts", None)
        if pc is None or not self.idle_quiet(scheduler):
            if sleeper is not None:
                self.wake_idle(sleeper, by_pc=True)
            return
        sleeper = self.sleeper(scheduler)
        if sleeper is None:
            return
        if sleeper.idle is None or sleeper.idle.pc is not pc:
            sleeper.idle = Asleep(pc)
        elif pc.callback_time != sleeper.idle.stretched:
            sleeper.idle.stock_time = pc.callback_time  # set meanwhile
        sleeper.transitions = scheduler.transition_counter
        sleeper.graphs = scheduler._active_graph_updates
        sleeper.idle_timeout = scheduler.idle_timeout
        # Tornado schedules the next run with this as the callback returns.
        sleeper.idle.stretched = stretch(pc, LONGEST_S, sleeper.idle.stock_time / 1000)

    def after_no_workers(self, scheduler: Any) -> None:
        """After stock's no-workers check, run by its callback."""
        pc = self.running(scheduler, NO_WORKERS)
        sleeper: Sleeper | None = getattr(scheduler, "_fastloop_timeouts", None)
        if pc is None or scheduler.no_workers_timeout is not None:
            if sleeper is not None:
                self.wake_no_workers(sleeper, by_pc=True)
            return
        sleeper = self.sleeper(scheduler)
        if sleeper is None:
            return
        if sleeper.no_workers is None or sleeper.no_workers.pc is not pc:
            sleeper.no_workers = Asleep(pc)
        elif pc.callback_time != sleeper.no_workers.stretched:
            sleeper.no_workers.stock_time = pc.callback_time  # set meanwhile
        sleeper.no_workers.stretched = stretch(
            pc, LONGEST_S, sleeper.no_workers.stock_time / 1000
        )

    def look(self, sleeper: Sleeper) -> None:
        """On the loop, after a watched set: wake each check that has
        something to see, and run stock's check for it there and then."""
        sleeper.looking = False
        if not self.installed.on:
            self.wake(sleeper)
            return
        scheduler = sleeper.scheduler
        running = scheduler.status == self.module.Status.running
        if sleeper.idle is not None and not (
            running
            and scheduler.idle_since is not None
            and scheduler.transition_counter == sleeper.transitions
            and scheduler._active_graph_updates == sleeper.graphs
            and scheduler.idle_timeout == sleeper.idle_timeout
        ):
            self.wake_idle(sleeper)
            if running:
                # idle_since turns None now, as stock's next check would.
                self.stock_idle(scheduler)
        if sleeper.no_workers is not None and not (
            running and scheduler.no_workers_timeout is None
        ):
            self.wake_no_workers(sleeper)
            if running:
                self.stock_no_workers(scheduler)

    def wake_idle(self, sleeper: Sleeper, *, by_pc: bool = False) -> None:
        asleep, sleeper.idle = sleeper.idle, None
        if asleep is not None:
            self.unstretch(sleeper.scheduler, IDLE, asleep, by_pc=by_pc)

    def wake_no_workers(self, sleeper: Sleeper, *, by_pc: bool = False) -> None:
        asleep, sleeper.no_workers = sleeper.no_workers, None
        if asleep is not None:
            self.unstretch(sleeper.scheduler, NO_WORKERS, asleep, by_pc=by_pc)

    def wake(self, sleeper: Sleeper) -> None:
        self.wake_idle(sleeper)
        self.wake_no_workers(sleeper)

    def unstretch(
        self, scheduler: Any, name: str, asleep: Asleep, *, by_pc: bool
    ) -> None:
        """A check's callback back to its interval, its next run an interval
        from now (``by_pc``: its run in progress reschedules it as it ends).
        A value set meanwhile, other than the stretch, is the user's: kept."""
        pc = asleep.pc
        if pc.callback_time != asleep.stretched:
            return
        if by_pc or self.running(scheduler, name) is not pc:
            pc.callback_time = asleep.stock_time
        else:
            rewind(pc, asleep.stock_time)

    def detach(self, scheduler: Any) -> None:
        # uninstall() may run on any thread: the callbacks restart on the loop.
        sleeper = getattr(scheduler, "_fastloop_timeouts", None)
        if sleeper is not None and sleeper.asleep():
            scheduler.io_loop.add_callback(self.wake, sleeper)


def stored(module: ModuleType, name: str) -> Any:
    """What ``Scheduler`` has under ``name`` (a slot, a property), or None
    where instances keep it in their ``__dict__``."""
    for klass in module.Scheduler.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


def check(module: ModuleType) -> str | None:
    scheduler = getattr(module, "Scheduler", None)
    if scheduler is None:
        return "distributed.scheduler.Scheduler is missing"
    if not scheduler.__dictoffset__:
        return "Scheduler instances have no __dict__"
    for name in WATCHED:
        where = stored(module, name)
        if where is not None and not hasattr(type(where), "__set__"):
            return f"Scheduler.{name} is a class attribute"
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
        checks.states,
        installed,
        *(
            Swap(module.Scheduler, name, Watched(checks, name, stored(module, name)))
            for name in WATCHED
        ),
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
    "sleep); `transition_counter`, `_active_graph_updates`, `idle_timeout`, "
    "`no_workers_timeout` and `status` as data descriptors on `Scheduler` "
    "that keep each value where stock does and note its sets",
    relies_on='the `"idle-timeout"` and `"no-workers-timeout"` PeriodicCallbacks '
    "in `Scheduler.periodic_callbacks`; `idle_since`, `idle_timeout`, "
    "`jupyter`, `transition_counter`, `_active_graph_updates`, "
    "`no_workers_timeout`, each changed by setting it (`transition_counter` "
    "in `SchedulerState._transition`); Tornado's `PeriodicCallback` reading "
    "`callback_time` as it reschedules",
    verifies=(
        "distributed.scheduler:Scheduler.check_idle",
        "distributed.scheduler:Scheduler._check_no_workers",
        "distributed.scheduler:SchedulerState._transition",
    ),
    check=check,
    apply=apply,
)
