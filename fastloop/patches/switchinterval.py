"""The interpreter switch interval: adaptive by default, or a fixed value.

A thread that wants the GIL while another runs Python waits up to the
switch interval (CPython's 5 ms) for it, and a loop thread asks after
every syscall: beside threads that compute in Python, a Tornado server's
requests and a dask worker's 1 ms actor calls take several intervals each
(bpo-7946, dask/distributed#6325).  ``FASTLOOP_SWITCH_INTERVAL_US=auto``,
the default, keeps CPython's interval while no thread waits, and shortens
it only while waits are measured and by no more than the hand-overs it adds
between compute threads allow (``FASTLOOP_SWITCH_BUDGET``):
``_switch_policy`` argues the decisions, ``_switch_controller`` is the
thread that samples and applies them.  A number holds that interval
instead, as ``sys.setswitchinterval`` would.

Rules, in both modes: the interval found at install is put back at
uninstall, but only if it is still the one fastloop set (an application
that sets its own keeps it, and auto mode stops for good the moment it
sees one); a process whose interval is not CPython's default when we
install has chosen its own, and the patch declines.  ``configure()`` of
either setting applies at once.  A free-threaded build has no GIL, hence
no interval to manage: the patch declines there.

Auto mode's thread starts with the process's second Python thread (the
``threading.Thread.start`` hook below), since a process of one thread has
nobody to wait for the GIL; the controller's modules load then too, not
with Tornado.  It sleeps while there is nothing to decide, and that hook
and one on ``IOLoop.initialize`` wake it (``_switch_controller`` says
what else does).  A forked child starts with no controller and with the
interval found, and gets a controller with its next thread.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
import time
from types import ModuleType
from typing import TYPE_CHECKING, Any

from fastloop.config import AUTO, settings
from fastloop.patches import Patch, needs_gil, registry
from fastloop.patches.changes import Change, Swap
from fastloop.runtime import fork
from fastloop.runtime.dormancy import IDLE
from fastloop.telemetry import live

if TYPE_CHECKING:
    from fastloop.patches._switch_controller import Controller

log = logging.getLogger("fastloop")

#: CPython's default switch interval, in seconds.
CPYTHON_DEFAULT_S = 0.005


def check(module: ModuleType) -> str | None:
    """``module`` is ``tornado.ioloop``: the loops the interval serves are
    Tornado's, so the patch applies when they can exist (and an interval the
    application set before importing Tornado is its own choice)."""
    if not callable(getattr(sys, "setswitchinterval", None)):
        return "sys.setswitchinterval is missing"
    no_gil = needs_gil("no switch interval to manage")
    if no_gil is not None:
        return no_gil
    interval = sys.getswitchinterval()
    if abs(interval - CPYTHON_DEFAULT_S) > 1e-9:
        return (
            f"the switch interval is {interval * 1e6:g} us, not CPython's default "
            f"{CPYTHON_DEFAULT_S * 1e6:g} us: the application chose it, left alone"
        )
    if settings.switch_interval_us == AUTO and not auto_supported():
        return (
            "auto mode reads other threads' CPU clocks "
            "(time.pthread_getcpuclockid), which this platform lacks"
        )
    if not callable(vars(module.IOLoop).get("initialize")):
        return "tornado.ioloop.IOLoop.initialize is missing"
    return None


def auto_supported() -> bool:
    return callable(getattr(time, "pthread_getcpuclockid", None))


class SwitchInterval(Change):
    """The interval fastloop holds, and the application's (put back at undo).

    ``application_s`` is the interval found at install, the application's;
    ``held_s`` is the one fastloop set last.  An interval that is neither
    means the application set its own: fastloop then stops for good.
    """

    __slots__ = (
        "__weakref__",
        "application_s",
        "auto",
        "controller",
        "held_s",
        "made",
        "overridden",
    )

    def __init__(self) -> None:
        self.application_s = self.held_s = 0.0
        self.overridden = False
        #: auto mode is on; its controller is made with the second thread
        self.auto = False
        self.controller: Controller | None = None
        #: threads start anywhere: one of them makes the controller
        self.made = threading.Lock()

    def do(self) -> None:
        self.application_s = self.held_s = sys.getswitchinterval()
        fork.in_child(self.after_fork)
        live.SWITCHINTERVAL.set(
            overridden=0, engaged=0, competitors=0, cost=0, dormant=0
        )
        self.follow(settings.switch_interval_us)

    def hold(self, interval_us: float) -> bool:
        """Set the interval if it is still ours; False (for good) once it is not."""
        if self.overridden or sys.getswitchinterval() != self.held_s:
            self.overridden = True
            return False
        sys.setswitchinterval(interval_us / 1e6)
        self.held_s = sys.getswitchinterval()
        return True

    def follow(self, value: float | str) -> None:
        """Hold ``value`` (``settings.switch_interval_us``): auto, or a number."""
        if self.overridden or sys.getswitchinterval() != self.held_s:
            self.overridden = True
            live.SWITCHINTERVAL.set(overridden=1, engaged=0)
            log.info("fastloop: the switch interval was set by someone else: kept")
            return
        if value == AUTO and auto_supported():
            if not self.auto:  # auto starts calm, from the found interval
                self.hold(self.application_s * 1e6)
                self.auto = True
            live.SWITCHINTERVAL.set(auto=1, interval_us=self.application_s * 1e6)
            if threading.active_count() > 1:
                self._start_controller()
            return
        self._stop_controller()
        interval = float(value) if value != AUTO else self.application_s * 1e6
        self.hold(interval)
        live.SWITCHINTERVAL.set(auto=0, engaged=0, interval_us=interval)

    def thread_started(self) -> None:
        """A Python thread started: auto mode's controller now has work."""
        if self.auto and not self.overridden:
            self._start_controller()
            IDLE.wake("thread")

    def _start_controller(self) -> None:
        with self.made:
            if not self.auto:
                return
            if self.controller is None:
                from fastloop.patches._switch_controller import Controller

                self.controller = Controller(self.application_s * 1e6, self.hold)
            controller = self.controller
        controller.start()

    def _stop_controller(self) -> None:
        with self.made:
            self.auto = False
            controller, self.controller = self.controller, None
        if controller is not None:
            controller.stop()

    def undo(self) -> None:
        self._stop_controller()
        live.SWITCHINTERVAL.set(auto=0, engaged=0, interval_us=0)
        if sys.getswitchinterval() == self.held_s:
            sys.setswitchinterval(self.application_s)
        else:
            log.info(
                "fastloop: switch interval %g us was set by the application: kept",
                sys.getswitchinterval() * 1e6,
            )

    def after_fork(self) -> None:
        """In a forked child no controller runs: start from the interval found."""
        self.made = threading.Lock()  # a parent's thread may have held it
        if self.controller is not None:
            self.controller.forget_thread()
        live.SWITCHINTERVAL.set(engaged=0, dormant=0)
        auto = settings.switch_interval_us == AUTO
        if auto and not self.overridden and sys.getswitchinterval() == self.held_s:
            sys.setswitchinterval(self.application_s)
            self.held_s = sys.getswitchinterval()
            live.SWITCHINTERVAL.set(interval_us=self.application_s * 1e6)


def thread_start_hook(change: SwitchInterval) -> Swap:
    """``threading.Thread.start``, then a word to auto mode's controller."""
    stock_start = threading.Thread.__dict__["start"]

    def start(self: threading.Thread) -> None:
        stock_start(self)
        try:
            change.thread_started()
        except Exception as exc:  # the application's thread runs regardless
            log.warning("fastloop: auto switch interval not started: %r", exc)

    functools.update_wrapper(start, stock_start)
    return Swap(threading.Thread, "start", start)


def ioloop_made_hook(module: ModuleType) -> Swap:
    """``IOLoop.initialize``, then a word to auto mode's controller if it
    sleeps: the new loop may be one that cannot wake it (uvloop's)."""
    stock_initialize = vars(module.IOLoop)["initialize"]

    def initialize(self: Any, *args: Any, **kwargs: Any) -> None:
        stock_initialize(self, *args, **kwargs)
        IDLE.wake("ioloop")

    functools.update_wrapper(initialize, stock_initialize)
    return Swap(module.IOLoop, "initialize", initialize)


def apply(module: ModuleType) -> list[Change]:
    change = SwitchInterval()
    return [change, thread_start_hook(change), ioloop_made_hook(module)]


def follow_setting(value: Any) -> None:
    """``configure(switch_interval_us=...)``: hold it now if installed."""
    change = registry.applied_change("switchinterval", SwitchInterval)
    if change is not None:
        change.follow(value)


PATCH = Patch(
    name="switchinterval",
    target="tornado.ioloop",
    summary="the switch interval: CPython's until threads wait for the GIL, "
    "then shorter within a compute budget (or a fixed value)",
    replaces=(
        "`threading.Thread.start` (wrapped: it starts auto mode's controller "
        "with the process's second thread, and wakes it if it sleeps); "
        "`tornado.ioloop.IOLoop.initialize` (wrapped: a new loop wakes it); "
        "`sys.setswitchinterval` while installed"
    ),
    relies_on=(
        "that the interval found is CPython's default (else the application "
        "chose it), a GIL (not a free-threaded build), and for auto mode "
        "`time.pthread_getcpuclockid` to read other threads' CPU clocks"
    ),
    verifies=("threading:Thread.start", "tornado.ioloop:IOLoop.initialize"),
    check=check,
    apply=apply,
)
