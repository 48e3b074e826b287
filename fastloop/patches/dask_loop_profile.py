"""dask's event-loop profiler thread wakes once a sample, not once an interval.

From CPython 3.12 every dask server (scheduler, worker, nanny) starts
``distributed.profile.watch`` on its IOLoop: a thread whose body,
``_watch``, sleeps ``distributed.worker.profile.interval`` (10 ms) at a time
to ask whether ``distributed.worker.profile.cycle`` (1 s) has passed, and
when it has starts a new entry of the loop's profile log with one sample
of the loop thread's stack.  So it wakes a hundred times a sample, idle or
not.

While installed, ``_watch`` (``watch()`` looks it up when it starts a
thread) sleeps until the cycle has passed instead, never less than an
interval, and samples exactly as stock does (the same lock, log entry and
``process`` call).  The log holds what stock's holds: one entry a cycle,
each one sample, at least a cycle after the one before; stock takes it up
to an interval later, where its grid of sleeps crosses the cycle.

What it trades: the thread asks ``stop()`` once a cycle rather than once an
interval, so it ends within a cycle of its loop's closing (a daemon thread
nobody joins; distributed's own thread-leak check waits up to 5 s).  A
thread started while installed sleeps stock's intervals again from its next
cycle after ``uninstall()``; one started before keeps stock's body.
"""

from __future__ import annotations

import functools
import sys
from collections import deque
from collections.abc import Callable, Collection
from types import ModuleType
from typing import Any

from fastloop.patches import Patch
from fastloop.patches.changes import Change, Flag, Swap

#: What stock ``_watch`` does, by the names its code uses.
NEEDS = {"create", "time", "lock", "append", "_current_frames", "process", "sleep"}
ARGUMENTS = ("thread_id", "log", "interval", "cycle", "omit", "stop")


def check(module: ModuleType) -> str | None:
    code = getattr(module.__dict__.get("_watch"), "__code__", None)
    if code is None:
        return "distributed.profile._watch is missing"
    if code.co_varnames[: code.co_argcount + code.co_kwonlyargcount] != ARGUMENTS:
        return "distributed.profile._watch's arguments changed"
    if not set(code.co_names) >= NEEDS:
        return "distributed.profile._watch no longer samples as it did"
    return None


def apply(module: ModuleType) -> list[Change]:
    stock = module.__dict__["_watch"]
    installed = Flag()

    def _watch(
        thread_id: int,
        log: deque[tuple[float, dict[str, Any]]],
        interval: float,
        cycle: float,
        omit: Collection[str],
        stop: Callable[[], bool],
    ) -> None:
        # Stock's body, module globals looked up as it does, but the sleep.
        recent = module.create()
        last = module.time()
        while not stop():
            if module.time() > last + cycle:
                recent = module.create()
                with module.lock:
                    log.append((module.time(), recent))
                    last = module.time()
                    try:
                        frame = sys._current_frames()[thread_id]
                    except KeyError:
                        return
                    module.process(frame, None, recent, omit=omit)
                    del frame
            wait = interval
            if installed.on:
                wait = max(interval, last + cycle - module.time())
            module.sleep(wait)

    functools.update_wrapper(_watch, stock)
    return [installed, Swap(module, "_watch", _watch)]


PATCH = Patch(
    name="dask_loop_profile",
    target="distributed.profile",
    summary="dask's event-loop profiler thread: one wake-up a sample, not "
    "one an interval",
    replaces="`distributed.profile._watch` (the body of the thread "
    "`distributed.profile.watch` starts)",
    relies_on="`watch()` looking `_watch` up when it starts a thread; the "
    "module's `create`, `process`, `lock`, `time` and `sleep`",
    verifies=("distributed.profile:_watch", "distributed.profile:watch"),
    check=check,
    apply=apply,
)
