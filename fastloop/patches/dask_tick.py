"""dask's loop-health tick sleeps while its loop handles no I/O, wakes with the first.

Every dask server (scheduler, worker, nanny) runs ``Server._measure_tick``
every ``distributed.admin.tick.interval`` (20 ms, the ``"tick"``
PeriodicCallback) and ``_cycle_ticks`` every ``admin.tick.cycle`` (1 s).
The tick counts itself (``_tick_counter``), adds the time since the last
tick to the ``tick-duration`` digest, and logs "Event loop was
unresponsive" when that time passes ``admin.tick.limit``; the cycle turns
the count into ``_tick_interval_observed``.  Idle, it is most of a
process's wake-ups.

Idle.  A server's loop is idle when none of its iterations since the tick
last ran handled an I/O event: ``add_callback``'s per-loop
``_process_events`` wrapper hands each iteration's event list to its
``listeners``, among them a ``Listener`` (one per loop) while some tick
watches; timers alone leave the list empty, so an idle process's other
periodic callbacks are idle iterations, while a message, a new connection
or another thread's wake-up through the self-pipe is I/O.  A tick that
runs without a listener on its loop (uvloop, ``add_callback`` off or
declined there) stays stock.

Stretch.  A tick that runs awake starts watching (the listener is on);
if it runs again with no I/O iteration in between, it sets its
PeriodicCallback's ``callback_time`` to stretch it (``longest`` at most;
``stretch`` lands its next run just after a timer the loop has anyway in
the second half of that, so that one wake-up serves both; each sleeping
run lands the next one anew), which Tornado reads when it schedules the
next run.  The first I/O iteration
takes the listener off, and wakes each sleeping tick there and then: the
callback back to the interval, stopped and started again (its next run an
interval later), before the loop handles that I/O; the woken tick watches
from there, so that its next run stretches it again unless more I/O came
meanwhile (a lone heartbeat costs one awake tick).  So a busy loop calls
the listener until its first I/O iteration after each tick: about once a
tick.

Figures.  A sleeping tick accounts, whenever it runs, for the ticks stock
would have run meanwhile: ``_tick_counter`` grows by the number of
intervals elapsed (rounded), and the digest gets that many values, each
the interval but the last, which carries the rest, so that their total is
the time elapsed, as stock's is; ``_last_tick`` is
then the time it ran.  When it wakes, and before each ``_cycle_ticks``, it
accounts for the whole intervals elapsed and moves ``_last_tick`` on by as
many, so that the cycle's ``_tick_interval_observed``, a Prometheus scrape
(I/O, so it wakes the tick first) and the tick after the wake read stock's
figures; that tick, an interval and part of one after the last whole
interval accounted, counts as many ticks as that makes, rounded.  The
``tick-duration`` total a worker sends with a heartbeat may lack the ticks
of the current sleep (the next heartbeat has them).

A blocked loop.  While a tick sleeps, the listener takes the time at which
each iteration begins: a gap between two iterations longer than
``tick_maximum_delay`` is the loop blocked for that long.  The stretch is
at most half that limit, so an idle wait alone never makes such a gap, and
a block that does outlasts the stretch, after which the loop polls without
waiting: the gap is the block (plus the handles run before it in its
iteration).  The tick accounts it as stock would have, one tick of that
gap plus the rest of an interval, with regular ticks before it, and logs
dask's line with that duration: within one interval of stock's, where the
block started up to an interval after stock's last tick.  The line comes
when the loop next runs the tick or wakes it: after the block, as stock's.

Undo.  ``uninstall()`` puts back every stretched callback's interval on its
loop's thread (``add_callback``), listeners take themselves off at their
next iteration, and methods bound before it act as stock from then on.
A callback stopped (its server closed) is never started again.  Where
``add_callback`` leaves the loop first, a sleeping tick is stock again at
its next run, a stretch at most later; no I/O wakes it meanwhile, and a
block then is logged with all of the time since the last tick.
"""

from __future__ import annotations

import functools
import weakref
from types import ModuleType
from typing import Any

from fastloop.patches import Patch, rewind, stretch, stretch_unsupported
from fastloop.patches.changes import Change, Flag, PerObject, Swap

#: The PeriodicCallback of ``Server.periodic_callbacks`` that calls
#: ``_measure_tick``.
CALLBACK = "tick"

#: The longest a tick sleeps, in seconds: how late an unresponsive loop can
#: be noticed after its block ends, at worst (also at most half the limit).
LONGEST_S = 1.0

#: How dask's unresponsive-loop line starts (``check`` finds it in stock code).
UNRESPONSIVE = "Event loop was unresponsive in "


def stock_message(module: ModuleType) -> str | None:
    """The format string of stock ``_measure_tick``'s unresponsive line."""
    code = getattr(getattr(module, "Server", None), "_measure_tick", None)
    for const in getattr(getattr(code, "__code__", None), "co_consts", ()):
        if isinstance(const, str) and const.startswith(UNRESPONSIVE):
            return const
    return None


def check(module: ModuleType) -> str | None:
    server = getattr(module, "Server", None)
    if server is None:
        return "distributed.core.Server is missing"
    for name in ("_measure_tick", "_cycle_ticks", "digest_metric"):
        if getattr(server.__dict__.get(name), "__code__", None) is None:
            return f"distributed.core.Server.{name} is missing"
    names = set(server.__dict__["_measure_tick"].__code__.co_names)
    if not {"_last_tick", "_tick_counter", "tick_maximum_delay"} <= names:
        return "Server._measure_tick no longer measures as it did"
    if stock_message(module) is None:
        return "Server._measure_tick no longer logs the unresponsive line"
    if not isinstance(getattr(module, "tick_maximum_delay", None), int | float):
        return "distributed.core.tick_maximum_delay is missing"
    if not callable(getattr(module, "time", None)):
        return "distributed.core.time is missing"
    return stretch_unsupported()


class Tick:
    """One server's tick: whether it watches its loop or sleeps, and the
    longest gap between two iterations seen while it slept."""

    __slots__ = ("asleep", "blocked", "listener", "pc", "server", "wakes", "woke")

    def __init__(self, server: Any) -> None:
        self.server = weakref.ref(server)
        #: The loop's listener it is on: no I/O iteration since it was put there.
        self.listener: Any = None
        self.asleep = False
        self.blocked = 0.0
        #: The PeriodicCallback it stretched, while it sleeps.
        self.pc: Any = None
        #: Times an I/O iteration woke it (a counter, read by the tests).
        self.wakes = 0
        #: Woken since it last ran: its next run is off stock's grid.
        self.woke = False


class Ticks:
    """What the replacements share: dask's module, the stock methods, the
    installed flag and the servers' ``Tick`` states."""

    def __init__(self, module: ModuleType) -> None:
        from fastloop.patches.add_callback import listened

        self.module = module
        self.listened = listened
        self.stock_measure = module.Server.__dict__["_measure_tick"]
        self.stock_cycle = module.Server.__dict__["_cycle_ticks"]
        self.message = stock_message(module)
        self.installed = Flag()
        self.states = PerObject("_fastloop_tick", detach=self.detach)

    def longest(self, server: Any) -> float | None:
        """How long this server's tick may sleep: a whole number of
        intervals, at most ``LONGEST_S`` and half the limit; None if that
        is under two intervals."""
        interval: float = server._tick_interval
        bound = min(LONGEST_S, self.module.tick_maximum_delay / 2)
        intervals = int(bound / interval) if interval > 0 else 0
        return intervals * interval if intervals >= 2 else None

    def account(self, server: Any, tick: Tick, now: float, *, ran: bool) -> None:
        """Count the ticks stock would have run since ``_last_tick``: all of
        them if the tick runs now (``ran``), else the whole intervals."""
        interval: float = server._tick_interval
        elapsed = now - server._last_tick
        blocked, tick.blocked = tick.blocked, 0.0
        if blocked:
            regular = int(max(0.0, elapsed - blocked) / interval)
            durations = [interval] * regular + [elapsed - regular * interval]
            server._last_tick = now
        elif ran:
            regular = max(1, round(elapsed / interval)) - 1
            durations = [interval] * regular + [elapsed - regular * interval]
            server._last_tick = now
        else:
            durations = [interval] * int(elapsed / interval)
            server._last_tick += len(durations) * interval
        server._tick_counter += len(durations)
        if blocked and durations[-1] > self.module.tick_maximum_delay:
            self.module.logger.info(self.message, type(server).__name__, durations[-1])
        for duration in durations:
            server.digest_metric("tick-duration", duration)

    def unstretch(self, server: Any, tick: Tick) -> None:
        """The tick's callback back to the interval (on its loop's thread)."""
        pc, tick.pc = tick.pc, None
        tick.asleep = False
        if pc is None:
            return
        if server.periodic_callbacks.get(CALLBACK) is pc:
            rewind(pc, server._tick_interval * 1000)
        else:
            pc.callback_time = server._tick_interval * 1000

    def wake(self, tick: Tick, now: float) -> None:
        server = tick.server()
        tick.wakes += 1
        if server is None:
            tick.asleep = False
            return
        self.account(server, tick, now, ran=False)
        self.unstretch(server, tick)
        tick.woke = True

    def watch(self, state: Any, tick: Tick) -> None:
        """Put the tick on its loop's listener (made if there is none)."""
        listener = next(
            (
                each
                for each in state.listeners
                if isinstance(each, Listener) and each.patch is self
            ),
            None,
        )
        if listener is None:
            listener = Listener(self, state)
            state.listen(listener)
        listener.ticks.append(tick)
        tick.listener = listener

    def measure(self, server: Any) -> None:
        """``Server._measure_tick`` while installed."""
        tick = self.states.setdefault(server, Tick)
        interval = server._tick_interval
        if tick.asleep:
            now = self.module.time()
            state = self.listened(tick.pc.io_loop)
            watched = state is not None and tick.listener in state.listeners
            elapsed = now - server._last_tick
            if not watched and elapsed > self.module.tick_maximum_delay:
                # No iteration was seen (add_callback went meanwhile): all
                # of the time since the last tick counts as the block.
                tick.blocked = max(tick.blocked, elapsed)
            self.account(server, tick, now, ran=True)
            longest = self.longest(server)
            if not watched or longest is None:
                # Its loop no longer reports its iterations (or the interval
                # changed past stretching): stock again.  The running
                # callback reschedules itself at the interval.
                tick.pc.callback_time = interval * 1000
                tick.pc, tick.asleep = None, False
                if not watched:
                    tick.listener = None
            else:
                # Each sleeping run lands the next one anew.
                stretch(tick.pc, longest, interval)
            return
        now = self.module.time()
        if tick.woke and now - server._last_tick < 2 * interval:
            # The first run after a wake, an interval and part of one since
            # the last whole interval accounted: as many ticks as stock's
            # grid would have (rounded), unless the loop was held meanwhile.
            self.account(server, tick, now, ran=True)
        else:
            self.stock_measure(server)
        tick.woke = False
        pc = server.periodic_callbacks.get(CALLBACK)
        if pc is None or getattr(pc.callback, "__self__", None) is not server:
            return
        state = self.listened(pc.io_loop)
        if state is None:
            return  # uvloop, add_callback off or declined there: stock
        if tick.listener is None or tick.listener not in state.listeners:
            self.watch(state, tick)
            return
        longest = self.longest(server)
        if longest is not None and pc.is_running():
            # No I/O since the last tick: Tornado schedules the next run
            # with this callback_time, when this call returns.
            tick.asleep, tick.pc = True, pc
            stretch(pc, longest, interval)

    def cycle(self, server: Any) -> None:
        """``Server._cycle_ticks`` while installed."""
        tick = getattr(server, "_fastloop_tick", None)
        if tick is not None and tick.asleep:
            self.account(server, tick, self.module.time(), ran=False)
        self.stock_cycle(server)

    def detach(self, server: Any) -> None:
        # uninstall() may run on any thread: the callback restarts on its loop.
        tick = getattr(server, "_fastloop_tick", None)
        if tick is None or tick.pc is None:
            return
        if tick.pc.is_running():
            server.io_loop.add_callback(self.unstretch, server, tick)
        else:
            tick.pc.callback_time = server._tick_interval * 1000
            tick.pc, tick.asleep = None, False


class Listener:
    """One loop's iterations, seen by the ticks watching it (among the
    loop's ``LoopState.listeners`` while any does)."""

    __slots__ = ("last", "patch", "state", "ticks")

    def __init__(self, patch: Ticks, state: Any) -> None:
        self.patch = patch
        self.state = state
        self.ticks: list[Tick] = []
        #: When the latest iteration began processing.
        self.last: float = patch.module.time()

    def __call__(self, event_list: Any) -> None:
        module = self.patch.module
        now: float = module.time()
        gap, self.last = now - self.last, now
        if gap > module.tick_maximum_delay:
            for tick in self.ticks:
                if tick.asleep and gap > tick.blocked:
                    tick.blocked = gap
        if event_list or not self.patch.installed.on:
            self.state.unlisten(self)
            ticks, self.ticks = self.ticks, []
            for tick in ticks:
                tick.listener = None
                if tick.asleep:
                    self.patch.wake(tick, now)
                    if self.patch.installed.on and tick.server() is not None:
                        # Watching from the wake: the I/O that woke it is
                        # this iteration's, and no more than that need keep
                        # it awake past its next run.
                        self.patch.watch(self.state, tick)


def apply(module: ModuleType) -> list[Change]:
    ticks = Ticks(module)
    installed = ticks.installed

    def _measure_tick(self: Any) -> None:
        if installed.on:
            ticks.measure(self)
        else:
            ticks.stock_measure(self)

    def _cycle_ticks(self: Any) -> None:
        if installed.on:
            ticks.cycle(self)
        else:
            ticks.stock_cycle(self)

    functools.update_wrapper(_measure_tick, ticks.stock_measure)
    functools.update_wrapper(_cycle_ticks, ticks.stock_cycle)
    return [
        ticks.states,
        installed,
        Swap(module.Server, "_measure_tick", _measure_tick),
        Swap(module.Server, "_cycle_ticks", _cycle_ticks),
    ]


PATCH = Patch(
    name="dask_tick",
    target="distributed.core",
    summary="dask servers: the 20 ms loop-health tick sleeps while the loop "
    "handles no I/O, and wakes with the first",
    replaces="`distributed.core.Server._measure_tick` and `Server._cycle_ticks` "
    "(each accounts for the ticks a sleeping tick stood for); a listener on "
    "`add_callback`'s per-loop state",
    relies_on='the `"tick"` PeriodicCallback in `Server.periodic_callbacks`; '
    "`Server._last_tick`, `_tick_counter`, `_tick_interval`, `digest_metric`; "
    "the module's `tick_maximum_delay`, `logger` and `time`; Tornado's "
    "`PeriodicCallback` reading `callback_time` as it reschedules; "
    "`add_callback` on the server's loop",
    verifies=(
        "distributed.core:Server.__init__",
        "distributed.core:Server._measure_tick",
        "distributed.core:Server._cycle_ticks",
        "distributed.core:Server.digest_metric",
    ),
    check=check,
    apply=apply,
)
