"""Auto mode's controller asleep, and what wakes it: loops, new threads, new IOLoops.

The ``switchinterval`` patch's controller thread (``_switch_controller``)
sleeps with no timeout once it has had nothing to decide for a while
(``_switch_policy.DORMANT_TICKS``), and only where something will wake it.
This module is where the sleeper and what wakes it meet, so that neither
imports the other: ``add_callback``'s per-loop ``_process_events``
wrapper reports each loop iteration here (``IDLE.asleep``, then
``IDLE.iterated``), the switchinterval patch's hooks report a new thread
and a new IOLoop (``IDLE.wake``), and the controller sleeps here.

While the controller is awake an iteration pays one attribute read,
``IDLE.asleep``.  While it sleeps, an iteration reads a clock, and at most
once every ``every_ns`` (the controller's fast tick) the process's and its
own thread's CPU clocks: when the other threads used at least ``share`` of
the time since that loop last looked (one compute thread's share: if all
of them together used less, none of them is one), it wakes the
controller.  Timers alone therefore wake nothing, nor does I/O: an idle
dask worker runs its periodic callbacks and heartbeats without waking it.
An iteration that finds the process back to one thread wakes it too, to
end (as the controller does after ``ALONE_TICKS`` ticks alone).

Why it cannot lose a wake-up.  ``sleep`` and ``wake`` change ``asleep``
under one lock: a wake that comes before ``sleep`` is kept (``poked``)
and makes ``sleep`` refuse, one that comes after rings the sleeper's bell,
once.  No code under that lock allocates a tracked object, so no
finalizer can run there and come back (a ``Thread.start`` in a ``__del__``
calls ``wake``).  The per-loop readings (``Readings``) are written only
by the loop's thread, and carry the number of the sleep they were taken
in: readings from an earlier sleep, or from another thread of the loop,
are a new start, never compared.
"""

from __future__ import annotations

import _thread
import threading
import time
from collections.abc import Callable
from types import CodeType
from typing import Any

from fastloop.runtime import fork

_clock = time.perf_counter_ns
_process_cpu = time.process_time_ns
_thread_cpu = time.thread_time_ns

#: Code of the functions that report a loop's iterations (``reports``).
_reporters: set[CodeType] = set()


class Readings:
    """One loop's latest look at the CPU clocks while the controller sleeps."""

    __slots__ = ("at", "ident", "nap", "process", "thread")

    def __init__(self) -> None:
        self.nap = -1  # the sleep they were taken in: none yet
        self.at = self.process = self.thread = self.ident = 0


class Dormancy:
    """Whether the controller sleeps, how to wake it, and what woke it."""

    __slots__ = ("__weakref__", "_every_ns", "_lock", "_nap", "_poked", "_ring",
                 "_share", "asleep", "woken_by")  # fmt: skip

    def __init__(self) -> None:
        #: Read by every reported loop iteration: keep it a plain attribute.
        self.asleep = False
        self.woken_by: str | None = None
        self._lock = _thread.allocate_lock()
        self._ring: Callable[[], None] | None = None
        self._poked = False
        self._nap = 0
        self._every_ns = 0
        self._share = 0.0

    def sleep(self, ring: Callable[[], None], every_ns: int, share: float) -> bool:
        """The controller sleeps from now until ``ring()`` (called once, from
        any thread); loops look at the CPU clocks at most every ``every_ns``
        and wake it past ``share`` of a CPU.  False, and no sleep, if a wake
        came since the last ``poked()``."""
        with self._lock:
            if self._poked:
                self._poked = False
                return False
            self._ring, self._every_ns, self._share = ring, every_ns, share
            self._nap += 1
            self.woken_by = None
            self.asleep = True
        return True

    def wake(self, source: str) -> None:
        """Something the controller must look at (``source`` names it): ring
        if it sleeps, else keep it for its next ``poked()``."""
        with self._lock:
            if not self.asleep:
                self._poked = True
                return
            self.asleep = False
            self.woken_by = source
            ring, self._ring = self._ring, None
        if ring is not None:
            ring()

    def awake(self) -> str | None:
        """The controller is awake again (rung, or asked to end): what woke it."""
        with self._lock:
            self.asleep = False
            self._ring = None
            return self.woken_by

    def poked(self) -> bool:
        """Whether a wake came since the last call (the controller, each tick)."""
        with self._lock:
            poked, self._poked = self._poked, False
        return poked

    def iterated(self, seen: Readings) -> None:
        """A reported loop iteration while the controller sleeps, on the loop's
        thread: wake it if the other threads computed, or none is left."""
        now = _clock()
        nap = self._nap
        if seen.nap == nap and now - seen.at < self._every_ns:
            return
        process, mine, ident = _process_cpu(), _thread_cpu(), _thread.get_ident()
        if seen.nap == nap and seen.ident == ident:
            others = (process - seen.process) - (mine - seen.thread)
            if others >= self._share * (now - seen.at):
                self.wake("compute")
            elif threading.active_count() <= 1:
                self.wake("alone")
        seen.nap, seen.at, seen.ident = nap, now, ident
        seen.process, seen.thread = process, mine

    def forget(self) -> None:
        """In a forked child: no controller runs there, whatever this says."""
        self._lock = _thread.allocate_lock()
        self.asleep = self._poked = False
        self._ring = self.woken_by = None
        self._nap += 1


IDLE = Dormancy()
fork.in_child(IDLE.forget)


def reporter(function: Callable[..., Any]) -> None:
    """``function``, set as a loop's ``_process_events``, reports its
    iterations to ``IDLE`` (idempotent)."""
    _reporters.add(function.__code__)


def reports(loop: Any) -> bool:
    """Whether ``loop``'s iterations are reported: only such a loop can wake
    the controller when a thread beside it starts to compute."""
    process = getattr(loop, "_process_events", None)
    return getattr(process, "__code__", None) in _reporters
