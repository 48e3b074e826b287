"""Zero-timeout selector polls that keep the GIL, and optionally skip.

asyncio's ``_run_once`` polls its selector on every iteration: with a
timeout when the ready queue is empty (the loop has nothing else to do),
and with timeout 0 when ready work is waiting, only to collect I/O that
became ready meanwhile.  Stock makes that zero-timeout poll an
``epoll_wait`` through ``select.epoll.poll``, which releases the GIL around
the syscall.  Alone that costs little; beside a thread running pure Python
the loop gets the GIL back only when that thread's switch interval (5 ms by
default) has passed: a loop whose callbacks keep coming hands the GIL away
once per iteration, for a syscall that never blocks (dask/distributed#6325).

While another thread wants the GIL, this patch makes each zero-timeout
poll of an epoll selector the same ``epoll_wait(epfd, events, maxevents,
0)`` called through ``ctypes.PyDLL``, which keeps the GIL, and builds the
same ``(key, events)`` list as ``EpollSelector.select``: every poll is
still real, the events and their order are the kernel's, so nothing a
program can observe changes except that the loop thread keeps the GIL
(Tornado's suite passes with every zero-timeout poll held this way).  A
poll with a timeout may block, so it always goes through stock and
releases the GIL, as it must.

When is the GIL wanted?  Every 2 ms one zero-timeout poll releases it on
purpose, timed: ``epoll_wait(0)`` returns at once, so its wall time minus
the thread's CPU time is what getting the GIL (or a CPU) back cost.  That
sample goes to ``stats().gil.poll``.  Polls keep the GIL from then on when
the sample waited 20 us or more, or when the loop never blocked since the
previous sample and yet ran less than half of the wall time (it lost the
GIL at polls the sample did not catch); the next sample comes a second
later, so under contention sampling costs one switch interval a second.
Without contention polls stay stock's: the held call (ctypes) costs more
than stock's in a busy loop, which a loop alone should not pay
(docs/design.md#holding-zero-timeout-polls).

Skipping (opt-in, ``poll_us`` > 0): a zero-timeout poll younger than
``poll_us`` after the last real one answers "no events" without a syscall.
That also saves the syscall, but it does change what a program can see:
readiness is collected up to ``poll_us`` later than stock would, and code
that expects I/O to be seen in the very next iteration (Tornado's own
suite has four such tests) sees it later.  So it is off by default.  When
on: a poll with a timeout is never skipped, so a loop waiting for I/O polls
for real at once; epoll is level-triggered (asyncio never uses
``EPOLLET``), so nothing skipped is lost; timers move to the ready queue
after the poll whatever it returned; signals and the self-pipe arrive as
self-pipe readability and follow the same bound (a C-level handler such
as SIGINT's ``KeyboardInterrupt`` still runs at once); a loop stopped
before its iteration began and a loop in debug mode poll for real.

Scope: asyncio's selector loops on epoll (``check_loop``: not uvloop's,
whose polls are libuv's, whatever loop the application runs) created while
the patch is installed (the gate is put on a loop's selector when the loop
is created, through the registry's ``PerObject``); ``uninstall()`` takes
every gate off again, and so does closing the selector.  The gate marks
itself as a stand-in for ``select`` (``fastloop.runtime.waits``), so the
profiler counts a loop waiting in it as idle.  Fork needs nothing: the
state is timestamps of system-wide monotonic clocks (a forked child's
thread CPU clock restarts, which at worst makes its first decision
"contended").  The gate holds its selector weakly: a strong reference
would be a cycle through the selector's ``__dict__``, which Tornado's own
suite rejects.

A free-threaded build running without its GIL has no GIL for a poll to
keep: the patch declines there.  CPython 3.14's ``_run_once`` polls as
3.13's does; an ``EpollSelector.select`` spelled otherwise than the two
``_STOCK_SPELLINGS`` declines.
"""

from __future__ import annotations

import contextlib
import math
import os
import selectors
import struct
import time
import weakref
from collections.abc import Callable
from select import EPOLLIN, EPOLLOUT
from types import ModuleType
from typing import Any

from fastloop.config import settings
from fastloop.patches import Patch, loop_class, needs_gil, registry
from fastloop.patches.changes import Change, PerObject, Swap
from fastloop.runtime import waits
from fastloop.telemetry.live import GIL, counters

POLL = counters("PollStats")

#: The clock of the gate, read when a loop is created (tests substitute it).
clock: Callable[[], int] = time.perf_counter_ns
#: The thread CPU clock of the GIL-wait sample (tests substitute it).
thread_clock: Callable[[], int] = time.thread_time_ns
#: How often a zero-timeout poll releases the GIL on purpose, timed: while
#: no contention is seen (a sample costs ~0.4 us of thread-clock reads,
#: ``python -m timeit`` on two ``time.thread_time_ns()``) ...
SAMPLE_NS = 2_000_000
#: ... and while polls keep the GIL (a sample then costs up to a switch
#: interval: 0.5% of the loop's time at CPython's 5 ms).
HELD_SAMPLE_NS = 1_000_000_000
#: A sampled wait this long means another thread wants the GIL: polls keep it.
CONTENDED_NS = 20_000


#: ``struct epoll_event`` as (events, data.fd): packed on x86-64 only, as
#: glibc declares it; ``data`` is a union whose ``fd`` member comes first.
EPOLL_EVENT = struct.Struct("=Ii4x" if os.uname().machine == "x86_64" else "=I4xi4x")


class EventBuffer:
    """Memory for ``epoll_wait`` to fill, made without new ctypes types.

    ``ctypes.Structure * n`` would create an array class per size, and classes
    are cyclic garbage once dropped (Tornado's suite counts those).
    """

    __slots__ = ("_anchor", "capacity", "memory", "pointer")

    def __init__(self, capacity: int) -> None:
        import ctypes  # here, not at start-up: ~1 ms (python -X importtime)

        self.capacity = capacity
        self.memory = bytearray(capacity * EPOLL_EVENT.size)
        # from_buffer pins the bytearray (no resize while exported).
        self._anchor = ctypes.c_char.from_buffer(self.memory)
        self.pointer = ctypes.c_void_p(ctypes.addressof(self._anchor))

    def events(self, count: int) -> Any:
        """(fd, events) pairs of the first ``count`` entries, as stock's poll."""
        view = memoryview(self.memory)[: count * EPOLL_EVENT.size]
        return [(fd, events) for events, fd in EPOLL_EVENT.iter_unpack(view)]


def load_epoll_wait() -> Any:
    """libc's ``epoll_wait`` through PyDLL (calls that keep the GIL), or None.

    Loaded with the first gate, not at import: ctypes costs start-up ~1 ms
    (``python -X importtime``: 1.1 ms with its dependencies).
    """
    global EPOLL_WAIT
    if EPOLL_WAIT is None:
        import ctypes

        try:
            function = ctypes.PyDLL(None).epoll_wait
        except (AttributeError, OSError):
            EPOLL_WAIT = False
        else:
            function.restype = ctypes.c_int
            # No argtypes on purpose: ints and a pointer pass unconverted,
            # which is what makes the call cheaper than stock's.
            EPOLL_WAIT = function
    return EPOLL_WAIT or None


#: libc's epoll_wait once loaded (False: not reachable); see load_epoll_wait.
EPOLL_WAIT: Any = None

#: What ``EpollSelector.select`` uses, as CPython 3.10-3.12 spell it
#: (``_key_from_fd``, ``~EPOLLIN``) and as 3.13 does (``_fd_to_key.get``,
#: module constants ``_NOT_EPOLLIN``): the same mapping, which the gate
#: reproduces; any other spelling is code we have not read.
_STOCK_SPELLINGS = (
    {"_selector", "poll", "_fd_to_key", "_key_from_fd", "EPOLLIN", "EPOLLOUT"},
    {"_selector", "poll", "_fd_to_key", "get", "_NOT_EPOLLIN", "_NOT_EPOLLOUT"},
)


def check(module: ModuleType) -> str | None:
    no_gil = needs_gil("no GIL for zero-timeout polls to keep")
    if no_gil is not None:
        return no_gil
    cls = getattr(module, "BaseSelectorEventLoop", None)
    if cls is None:
        return "asyncio.selector_events.BaseSelectorEventLoop is missing"
    init = getattr(cls.__dict__.get("__init__"), "__code__", None)
    if init is None or "_selector" not in init.co_names:
        return "BaseSelectorEventLoop.__init__ no longer sets _selector"
    # The modules this one imports, not the asyncio package's names: this
    # runs while the package may still be importing.
    from asyncio import base_events

    run_once = getattr(
        base_events.BaseEventLoop.__dict__.get("_run_once"), "__code__", None
    )
    needs = {"_selector", "select", "_ready", "_stopping", "_process_events"}
    if run_once is None or not needs <= set(run_once.co_names):
        return "asyncio's BaseEventLoop._run_once no longer polls self._selector"
    epoll_cls = getattr(selectors, "EpollSelector", None)
    if epoll_cls is None:
        return "needs Linux epoll"
    stock_select = getattr(epoll_cls.__dict__.get("select"), "__code__", None)
    names = set(getattr(stock_select, "co_names", ()))
    if not any(names >= spelling for spelling in _STOCK_SPELLINGS):
        return "selectors.EpollSelector.select changed"
    return None


def check_loop(loop: Any) -> str | None:
    """Why ``loop`` gets no gate on its polls, or None if it does."""
    from asyncio import selector_events

    if not isinstance(loop, selector_events.BaseSelectorEventLoop):
        return f"{loop_class(loop)} has no asyncio selector to poll"
    kind = type(getattr(loop, "_selector", None))
    if kind is not selectors.EpollSelector:
        return f"its selector is {kind.__qualname__}, not epoll"
    return None


def apply(module: ModuleType) -> list[Change]:
    cls = module.BaseSelectorEventLoop
    stock_init: Any = cls.__dict__["__init__"]
    gates = PerObject("select", "close")

    def __init__(self: Any, selector: Any = None) -> None:
        stock_init(self, selector)
        if type(self._selector) is selectors.EpollSelector:
            put_gate(self, gates)

    __init__.__wrapped__ = stock_init  # type: ignore[attr-defined]
    __init__.__qualname__ = stock_init.__qualname__
    __init__.__doc__ = stock_init.__doc__
    return [gates, Swap(cls, "__init__", __init__)]


def put_gate(loop: Any, gates: PerObject) -> None:
    """Give ``loop``'s epoll selector a ``select`` whose zero polls can keep the GIL.

    It replaces ``EpollSelector.select`` rather than wrapping it (one Python
    frame per poll, as stock): the timeout path is stock's code, line for
    line (``check()`` fingerprints it).
    """
    epoll_wait = load_epoll_wait()
    if epoll_wait is None:
        registry.declined_on_loop(
            "poll", loop, "libc's epoll_wait is not reachable through ctypes"
        )
        return
    selector = loop._selector
    gate = _gate(loop, selector, epoll_wait)
    waits.mark(gate)
    gates.put(selector, select=gate, close=_closer(selector))


def _ready_lister(
    fd_to_key: Any,
) -> Callable[[Any], list[tuple[selectors.SelectorKey, int]]]:
    """``EpollSelector.select``'s (key, events) list, from (fd, event) pairs."""
    event_read, event_write = selectors.EVENT_READ, selectors.EVENT_WRITE

    def ready_list(fd_event_list: Any) -> list[tuple[selectors.SelectorKey, int]]:
        ready = []
        for fd, event in fd_event_list:
            events = 0
            if event & ~EPOLLIN:
                events |= event_write
            if event & ~EPOLLOUT:
                events |= event_read
            key = fd_to_key.get(fd)
            if key:
                ready.append((key, events & key.events))
        return ready

    return ready_list


def _closer(selector: Any) -> Callable[[], None]:
    stock_close = selectors.EpollSelector.close
    selector_ref = weakref.ref(selector)

    def close() -> None:
        # A closed epoll's fd number may be reused: stock select from now on.
        owner = selector_ref()
        if owner is not None:
            take_gate_off(owner)
            stock_close(owner)

    return close


def _gate(loop: Any, selector: Any, epoll_wait: Any) -> Callable[..., Any]:
    """The gate's ``select``; its state lives in its closure (the hot path)."""
    loop_ref = weakref.ref(loop)
    epoll = selector._selector
    epoll_poll = epoll.poll
    epfd = epoll.fileno()
    fd_to_key = selector._fd_to_key
    ready_list = _ready_lister(fd_to_key)
    buffer = EventBuffer(64)
    ceil = math.ceil
    now = clock
    cpu_now = thread_clock
    skip_ns = int(settings.poll_us * 1000)  # once per loop: the hot path reads a cell
    skipped = POLL.skipped.increment
    gil_wait = GIL.observe
    last_real = now()
    next_sample = last_real
    held = False  # polls keep the GIL: the last sample saw contention
    # Since the last sample: when it was, the thread's CPU clock then, and
    # whether the loop blocked in between (then wall time includes idling).
    sampled_at, sampled_cpu, blocked = last_real, cpu_now(), True

    def stock_poll(wait: float, max_ev: int) -> list[tuple[selectors.SelectorKey, int]]:
        # Stock's poll and EINTR rule, GIL released: for the paths that may
        # block or are rare (the busy path below keeps its own copy inline).
        try:
            return ready_list(epoll_poll(wait, max_ev))
        except InterruptedError:
            return []

    def select(timeout: float | None = None) -> Any:
        nonlocal last_real, next_sample, held, buffer
        nonlocal sampled_at, sampled_cpu, blocked
        if timeout is None or timeout > 0:  # may block: stock, GIL released
            wait = -1 if timeout is None else ceil(timeout * 1e3) * 1e-3
            ready = stock_poll(wait, len(fd_to_key) or 1)
            last_real = now()
            blocked = True
            return ready
        started = now()
        if skip_ns and started - last_real < skip_ns:
            owner = loop_ref()
            if owner is not None and not owner._stopping and not owner._debug:
                skipped()
                return []
        last_real = started
        if started >= next_sample:  # release the GIL, timed
            cpu = cpu_now()
            ready = stock_poll(0, len(fd_to_key) or 1)
            waited = now() - started - (cpu_now() - cpu)
            gil_wait("histogram", waited, part="poll")
            # Contended: this poll waited, or the loop never idled since the
            # last sample and yet ran less than half the time (it lost the
            # GIL at polls this one sample did not catch).
            starved = not blocked and (cpu - sampled_cpu) * 2 < started - sampled_at
            held = waited >= CONTENDED_NS or starved
            next_sample = started + (HELD_SAMPLE_NS if held else SAMPLE_NS)
            sampled_at, sampled_cpu, blocked = started, cpu, False
            return ready
        if not held:
            try:
                return ready_list(epoll_poll(0, len(fd_to_key) or 1))
            except InterruptedError:
                return []
        max_ev = len(fd_to_key) or 1  # as stock: a smaller one reorders
        if max_ev > buffer.capacity:
            buffer = EventBuffer(2 * max_ev)
        count = epoll_wait(epfd, buffer.pointer, max_ev, 0)
        if count == 0:
            return []
        if count < 0:  # EINTR, or an error stock raises in its own words
            return stock_poll(0, max_ev)
        return ready_list(buffer.events(count))

    return select


def take_gate_off(selector: Any) -> None:
    for name in ("select", "close"):
        with contextlib.suppress(AttributeError):
            delattr(selector, name)


PATCH = Patch(
    name="poll",
    target="asyncio.selector_events",
    summary="asyncio epoll loop: zero-timeout polls keep the GIL; skip them (opt-in)",
    replaces=(
        "`asyncio.selector_events.BaseSelectorEventLoop.__init__` (wrapped); on"
        " each new loop's `EpollSelector`, instance attributes `select` (a "
        "re-implementation that calls libc's `epoll_wait` through "
        "`ctypes.PyDLL` for zero-timeout polls) and `close`"
    ),
    relies_on=(
        "`BaseEventLoop._run_once` polling `self._selector.select`, "
        "`_stopping`, `_debug`; `EpollSelector.select`'s use of "
        "`_selector.poll`, `_fd_to_key`, `_key_from_fd`; `struct epoll_event`'s"
        " layout; a GIL"
    ),
    verifies=(
        "asyncio.selector_events:BaseSelectorEventLoop.__init__",
        "asyncio.base_events:BaseEventLoop._run_once",
        "selectors:EpollSelector.select",
        "selectors:EpollSelector.close",
    ),
    check=check,
    apply=apply,
    check_loop=check_loop,
)
