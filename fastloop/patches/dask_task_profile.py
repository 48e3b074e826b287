"""A dask worker's task profiler runs while tasks do, and sleeps between.

A worker's ``"profile"`` PeriodicCallback calls ``Worker.trigger_profile``
every ``distributed.worker.profile.interval`` (10 ms): a hundred loop
wake-ups a second, each of which returns at once unless some thread is
computing a task (``active_threads``).  Those threads are the executor
threads of ``Worker.execute`` (tasks) and ``Worker.actor_execute`` (actor
methods): each puts itself in ``active_threads`` inside such a call and
takes itself out before the call returns.

While installed, ``trigger_profile`` stops that PeriodicCallback when it
finds no thread computing and no ``execute``/``actor_execute`` call in
flight on the worker, and each of those calls starts it again as it begins
(on the loop thread, as stock starts it).  Every stock call that samples
(``active_threads`` not empty) falls inside such a call, so it still
happens, with the same interval: task and actor profiles and the
``profile-duration`` digest are stock's; the calls skipped are the ones
that return at once.  The first sample of a task comes an interval after
its call starts, where stock's comes anywhere in that interval.

A worker built before install keeps its stock callback.  ``uninstall()``
starts every callback it stopped again (on its worker's loop), and the
methods bound before it act as stock from then on.  A worker no longer
running (closing, closed) is never started again.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from fastloop.patches import Patch
from fastloop.patches.changes import Change, Flag, PerObject, Swap

#: The PeriodicCallback of ``Worker.periodic_callbacks`` that calls
#: ``trigger_profile``.
CALLBACK = "profile"


class Calls:
    """One worker's ``execute``/``actor_execute`` calls in flight, and the
    callback this patch stopped (None while it runs)."""

    __slots__ = ("asleep", "in_flight")

    def __init__(self, worker: Any) -> None:
        self.in_flight = 0
        self.asleep: Any = None


def check(module: ModuleType) -> str | None:
    worker = getattr(module, "Worker", None)
    if worker is None:
        return "distributed.worker.Worker is missing"
    for name in ("trigger_profile", "execute", "actor_execute"):
        if getattr(worker.__dict__.get(name), "__code__", None) is None:
            return f"distributed.worker.Worker.{name} is missing"
    trigger = worker.__dict__["trigger_profile"].__code__
    if trigger.co_names[:1] != ("active_threads",):
        return "Worker.trigger_profile no longer returns first when no thread computes"
    if not isinstance(getattr(module, "WORKER_ANY_RUNNING", None), set | frozenset):
        return "distributed.worker.WORKER_ANY_RUNNING is missing"
    return None


def apply(module: ModuleType) -> list[Change]:
    cls = module.Worker
    running_states = module.WORKER_ANY_RUNNING
    stock_trigger = cls.__dict__["trigger_profile"]
    stock_execute = cls.__dict__["execute"]
    stock_actor_execute = cls.__dict__["actor_execute"]
    installed = Flag()

    def start(worker: Any, pc: Any) -> None:
        """Start a callback this patch stopped, if it is still the worker's."""
        if (
            worker.periodic_callbacks.get(CALLBACK) is pc
            and worker.status in running_states
            and not pc.is_running()
        ):
            pc.start()

    def wake(worker: Any, calls: Calls) -> None:
        pc, calls.asleep = calls.asleep, None
        if pc is not None:
            start(worker, pc)

    def detach(worker: Any) -> None:
        # uninstall() may run on any thread: the callback starts on its loop.
        calls = getattr(worker, "_fastloop_profile_calls", None)
        if calls is not None and calls.asleep is not None:
            worker.loop.add_callback(start, worker, calls.asleep)

    states = PerObject("_fastloop_profile_calls", detach=detach)

    def trigger_profile(self: Any) -> None:
        if self.active_threads or not installed.on:
            stock_trigger(self)
            return
        calls = states.setdefault(self, Calls)
        pc = self.periodic_callbacks.get(CALLBACK)
        if calls.in_flight == 0 and pc is not None and pc.is_running():
            pc.stop()
            calls.asleep = pc

    async def execute(self: Any, key: Any, *, stimulus_id: str) -> Any:
        calls = states.setdefault(self, Calls)
        calls.in_flight += 1
        wake(self, calls)
        try:
            return await stock_execute(self, key, stimulus_id=stimulus_id)
        finally:
            calls.in_flight -= 1

    async def actor_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls = states.setdefault(self, Calls)
        calls.in_flight += 1
        wake(self, calls)
        try:
            return await stock_actor_execute(self, *args, **kwargs)
        finally:
            calls.in_flight -= 1

    for replacement, stock in (
        (trigger_profile, stock_trigger),
        (execute, stock_execute),
        (actor_execute, stock_actor_execute),
    ):
        functools.update_wrapper(replacement, stock)
    return [
        states,
        installed,
        Swap(cls, "trigger_profile", trigger_profile),
        Swap(cls, "execute", execute),
        Swap(cls, "actor_execute", actor_execute),
    ]


PATCH = Patch(
    name="dask_task_profile",
    target="distributed.worker",
    summary="dask worker: the task profiler's 10 ms callback stops while no "
    "task or actor call runs",
    replaces="`distributed.worker.Worker.trigger_profile`; `Worker.execute` "
    "and `Worker.actor_execute` wrapped (each starts the callback again)",
    relies_on='the `"profile"` PeriodicCallback in `Worker.periodic_callbacks`'
    "; `active_threads` filled only inside `execute` and `actor_execute`; "
    "`WORKER_ANY_RUNNING`",
    verifies=(
        "distributed.worker:Worker.trigger_profile",
        "distributed.worker:Worker.execute",
        "distributed.worker:Worker.actor_execute",
        "distributed.worker:_run_task",
        "distributed.worker:_run_actor",
    ),
    check=check,
    apply=apply,
)
