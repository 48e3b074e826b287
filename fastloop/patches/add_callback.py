"""Batched ``IOLoop.add_callback``: on the loop thread, and from other threads.

Stock Tornado pays, per callback, a ``functools.partial``, a bound
``_run_callback``, asyncio's ``call_soon`` -> ``_call_soon`` -> ``Handle``
chain, then ``Handle._run`` -> ``Context.run`` -> ``_run_callback`` ->
``partial`` to run it; from another thread, ``call_soon_threadsafe`` adds a
self-pipe write (a syscall that drops the GIL) per callback.  We append
consecutive callbacks to one *batch*: a single ``asyncio.Handle`` subclass
in the loop's ready queue that runs them in order.  A callback costs a
tuple and a ``contextvars`` snapshot; the handle (and, from another
thread, the wake-up) is paid once per batch.

Ordering argument.  A batch accepts callbacks only while it is the *last*
entry of ``loop._ready``.  Anything scheduled after it (``call_soon``, a
future's done-callbacks, another thread's ``call_soon_threadsafe``) makes
it no longer last, so the next ``add_callback`` opens a new batch behind
that entry: the run order equals the order in which stock Tornado would
have appended one handle per callback.

Iteration argument.  Stock runs a callback added by a running callback in
the *next* loop iteration (after I/O polling, and not at all after
``stop()``).  A batch opened in iteration N runs in iteration N+1; once
N+1 has begun, the handles ahead of the batch run first, and what they add
must go to N+2.  So an on-loop batch only accepts callbacks during the
iteration that opened it: a counter, bumped by a wrapper around the loop's
``_process_events`` (called once per iteration), stamps each batch.  The
same wrapper reports the iteration to auto mode's controller while it
sleeps (``fastloop.runtime.dormancy``): one attribute read while it is
awake; and it hands the iteration's event list to the state's
``listeners`` (``dask_tick``'s and ``dask_memory``'s sleepers, ``listened``).

From other threads, and on the loop's thread before it runs, the batch
class is ``RemoteBatch``: producers append under a per-IOLoop lock while
it is the tail and has not started; the loop marks it started under the
same lock before reading it.  Only a new batch writes a wake-up byte (the
``wakeup`` patch coalesces those further).  A closed loop swallows the
call, as stock does.

Undo argument.  The patch hangs two attributes on objects, both through
the registry (``PerObject``): ``_fastloop_state`` on each IOLoop and the
iteration counter ``_process_events`` on its asyncio loop.  Uninstall puts
the class's ``add_callback`` back first, so no new call starts patched;
then it takes both attributes off every object, and wakes auto mode's
controller if it sleeps, since those loops no longer report their
iterations (``ReportedIterations``).  A call already running
keeps the state it read for the rest of that one call, which is safe: on
the loop thread no iteration passes inside one call, so the iteration it
compares is still current; from another thread it appends only to a
``RemoteBatch`` made under that same state, whose lock the batch takes
when it starts (it holds the state itself, not the IOLoop's attribute).
A batch queued before an uninstall and install belongs to the old state:
a producer holding the new lock opens a batch of its own behind it rather
than append to one the loop may be starting under the other lock.  A call
that finds no state once uninstalled is given one that takes the stock
path, and attaches nothing (``PerObject.setdefault``).

The stock path remains for asyncio debug mode (it checks every handle),
for IOLoop subclasses that override ``_run_callback``, and for loops this
patch does not know (a proactor loop, Tornado's proxy loops): those are
declined one by one, with a reason on logger ``fastloop``.  Loops without
a ``_ready`` deque (uvloop) get one handle per callback, minus the partial.

CPython 3.14 changes nothing here.  Its ``call_soon_threadsafe`` appends a
``_ThreadSafeHandle`` to ``_ready`` itself instead of calling
``_call_soon`` (gh-128340): still one entry behind the batch, so the
ordering argument holds.  That handle's lock makes ``cancel()`` from
another thread safe against ``_run``; a batch is never handed out, so
nothing can cancel it.  ``_run_once``, the ``Handle`` slots and Tornado's
``add_callback`` are what ``check()`` reads, and they are 3.13's.

Free-threaded builds (no GIL): declined.  A producer reads the ready
queue's tail (``ready[-1] if ready``) while the loop thread pops it, which
is atomic only because no thread switch falls between those bytecodes
under the GIL; the counters are atomic only under the GIL
(``fastloop.telemetry.live``).  Arguing each step again for the
free-threaded runtime, and testing it, is work not done: stock it is.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import weakref
from asyncio import events, selector_events
from collections.abc import Callable
from contextvars import copy_context
from types import ModuleType
from typing import Any

from fastloop.patches import Patch, loop_class, needs_gil, registry
from fastloop.patches._callback_batches import (
    CallbackBatch,
    LoopState,
    RemoteBatch,
    run_lone,
)
from fastloop.patches.changes import Change, PerObject, Swap
from fastloop.runtime import dormancy
from fastloop.runtime.dormancy import IDLE
from fastloop.telemetry.live import counters

ADD_CALLBACK = counters("AddCallbackStats")

_get_running_loop: Callable[[], Any] = events._get_running_loop
_onloop_batch = ADD_CALLBACK.onloop_batches.increment
_queued = ADD_CALLBACK.remote_callbacks.increment


_HANDLE_SLOTS = (
    "_callback",
    "_args",
    "_cancelled",
    "_loop",
    "_source_traceback",
    "_repr",
    "_context",
)


def check(module: ModuleType) -> str | None:
    """Refuse unless Tornado and asyncio look exactly like the code we replace."""
    no_gil = needs_gil(
        "add_callback relies on the GIL's atomicity for reading the ready "
        "queue's tail while the loop thread pops it, and for its counters"
    )
    if no_gil is not None:
        return no_gil
    base = getattr(module, "BaseAsyncIOLoop", None)
    if base is None:
        return "tornado.platform.asyncio.BaseAsyncIOLoop is missing"
    stock = base.__dict__.get("add_callback")
    code = getattr(stock, "__code__", None)
    if code is None:
        return "BaseAsyncIOLoop.add_callback is not a plain function"
    if code.co_varnames[:2] != ("self", "callback") or code.co_argcount != 2:
        return f"unexpected add_callback signature {code.co_varnames[:4]}"
    if not {"_run_callback", "call_soon", "partial"} <= set(code.co_names):
        return "BaseAsyncIOLoop.add_callback no longer uses call_soon(_run_callback)"
    from tornado.ioloop import IOLoop

    for name in ("_run_callback", "_discard_future_result", "add_future"):
        if not callable(getattr(IOLoop, name, None)):
            return f"IOLoop.{name} is missing"
    if not callable(getattr(events, "_get_running_loop", None)):
        return "asyncio.events._get_running_loop is missing"
    if not set(_HANDLE_SLOTS) <= set(getattr(events.Handle, "__slots__", ())):
        return "asyncio.Handle slots changed"
    run_once = getattr(asyncio.BaseEventLoop, "_run_once", None)
    names = set(getattr(getattr(run_once, "__code__", None), "co_names", ()))
    if not {"_ready", "popleft", "_cancelled", "_run", "_process_events"} <= names:
        return "asyncio's BaseEventLoop._run_once changed (_ready, _process_events)"
    return None


def count_iterations(loop: Any, state: LoopState, iterations: PerObject) -> bool:
    """Count ``loop``'s iterations in ``state``, and report them to auto
    mode's controller while it sleeps (``dormancy``); False once uninstalled."""
    # _run_once calls self._process_events once per iteration, before it
    # runs that iteration's handles.  The weak reference keeps the loop
    # free of a loop -> wrapper -> bound method -> loop cycle.
    process = type(loop)._process_events
    loop_ref = weakref.ref(loop)
    seen = dormancy.Readings()

    def process_events(event_list: Any) -> None:
        state.iteration += 1
        if IDLE.asleep:
            IDLE.iterated(seen)
        for listener in state.listeners:
            listener(event_list)
        process(loop_ref(), event_list)

    dormancy.reporter(process_events)
    return iterations.put(loop, _process_events=process_events)


class ReportedIterations(PerObject):
    """The loops' ``_process_events`` wrappers: once they are taken off, no
    loop reports its iterations, and a sleeping controller must look again
    (nothing else would wake it when a thread starts to compute)."""

    __slots__ = ()

    def undo(self) -> None:
        super().undo()
        IDLE.wake("uninstall")


def new_state(
    stock_run_callback: Callable[..., Any], ioloop: Any, *, iterations: PerObject
) -> LoopState:
    """How ``add_callback`` treats this IOLoop: batched, call_soon or stock."""
    loop = ioloop.asyncio_loop
    if type(ioloop)._run_callback is not stock_run_callback:
        return LoopState(None, False)  # customised error handling: stock path
    reason = unknown_loop(loop)
    if reason is not None:
        registry.declined_on_loop("add_callback", loop, reason)
        return LoopState(None, False)
    ready = getattr(loop, "_ready", None)
    process = getattr(loop, "_process_events", None)
    batching = (
        isinstance(ready, collections.deque)
        and getattr(process, "__self__", None) is loop  # not already wrapped
        and callable(getattr(loop, "_write_to_self", None))
    )
    if not batching:
        return LoopState(None, True)  # uvloop, or a loop batched by another install
    state = LoopState(ready, False)
    if not count_iterations(loop, state, iterations):
        return LoopState(None, False)  # uninstalled meanwhile: the stock path
    return state


def apply(module: ModuleType) -> list[Change]:
    """The replacement ``add_callback``, closing over the originals found now.

    It falls back to the stock ``add_callback``, and tells an IOLoop subclass
    with its own error handling by the stock ``_run_callback``.  Debug mode:
    asyncio's ``_debug`` where there is a ready deque (a call less per
    cross-thread callback), uvloop's ``get_debug()`` (kept in C).
    """
    from tornado.ioloop import IOLoop

    base = module.BaseAsyncIOLoop
    stock_add_callback: Callable[..., None] = base.__dict__["add_callback"]
    states = PerObject("_fastloop_state")
    iterations = ReportedIterations("_process_events")
    stock_run = IOLoop._run_callback
    make_state = functools.partial(new_state, stock_run, iterations=iterations)

    def add_callback(
        self: Any, callback: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> None:
        loop: Any = self.asyncio_loop
        try:
            state = self._fastloop_state
        except AttributeError:
            state = states.setdefault(self, make_state)
        ready = state.ready
        if _get_running_loop() is loop:
            if ready is not None:
                # The open batch is found at the tail of the ready queue, not
                # kept on the IOLoop: a reference from the IOLoop to a batch
                # (which refers back to it) would be a reference cycle, and
                # Tornado's own test suite rightly fails on those.
                if ready:
                    tail = ready[-1]
                    if (
                        tail.__class__ is CallbackBatch
                        and tail._iteration == state.iteration
                        and tail._ioloop is self
                    ):
                        tail._items += (callback, args, kwargs, copy_context())
                        return
                if not loop._debug:
                    items = [callback, args, kwargs, copy_context()]
                    ready.append(CallbackBatch(self, loop, items, state.iteration))
                    _onloop_batch()  # ~25 ns (timeit), once per batch, not per callback
                    return
            elif state.call_soon and not loop.get_debug():
                loop.call_soon(run_lone, self, loop, callback, args, kwargs)
                return
        elif ready is not None:
            if not loop._debug:
                if loop._closed:
                    return  # stock swallows the RuntimeError: nothing runs
                item = (callback, args, kwargs, copy_context())
                lock = state.lock
                lock.acquire()
                tail = ready[-1] if ready else None
                if (
                    tail.__class__ is RemoteBatch
                    and tail._state is state  # started under this lock only
                    and not tail._started
                ):
                    tail._items += item
                    lock.release()
                    _queued()
                    return  # the batch's creator has woken the loop
                ready.append(RemoteBatch(self, loop, list(item), state))
                lock.release()
                _queued()
                loop._write_to_self()
                return
        elif state.call_soon and not loop.get_debug():
            # Closed: swallowed as stock does (AttributeError: its proactor race).
            with contextlib.suppress(RuntimeError, AttributeError):
                loop.call_soon_threadsafe(run_lone, self, loop, callback, args, kwargs)
            return
        stock_add_callback(self, callback, *args, **kwargs)

    functools.update_wrapper(add_callback, stock_add_callback)
    return [states, iterations, Swap(base, "add_callback", add_callback)]


def listened(ioloop: Any) -> LoopState | None:
    """The state whose ``listeners`` see every iteration of ``ioloop``'s
    asyncio loop, or None where this patch does not wrap that loop's
    ``_process_events`` (not installed, uvloop, a declined loop)."""
    state = getattr(ioloop, "_fastloop_state", None)
    if state is None or state.ready is None:
        return None
    if not dormancy.reports(getattr(ioloop, "asyncio_loop", None)):
        return None
    return state  # type: ignore[no-any-return]


#: Event loops written in C (or Rust, or Zig) that keep their ready queue to
#: themselves: a callback is one ``call_soon(run_lone, ...)`` there, which
#: saves stock's ``functools.partial`` and its ``_run_callback`` frame.
CALL_SOON_LOOPS = ("uvloop", "zuvloop", "rloop")


def unknown_loop(loop: Any) -> str | None:
    """Why an asyncio loop is not one this patch knows, or None.

    Known: asyncio's selector loops (batched) and ``CALL_SOON_LOOPS`` (one
    handle per callback).  A proactor loop, Tornado's
    ``AddThreadSelectorEventLoop`` proxy, or anything else keeps stock
    ``add_callback``, through this patch's wrapper.
    """
    kind = type(loop)  # not isinstance: Tornado's proxy forwards __class__
    if issubclass(kind, selector_events.BaseSelectorEventLoop):
        return None
    if kind.__module__.partition(".")[0] in CALL_SOON_LOOPS:
        return None
    known = ", ".join(CALL_SOON_LOOPS)
    return f"{loop_class(loop)} is not a selector loop nor one of {known}"


PATCH = Patch(
    name="add_callback",
    target="tornado.platform.asyncio",
    summary="IOLoop.add_callback: callbacks batched into one ready-queue entry",
    replaces=(
        "`tornado.platform.asyncio.BaseAsyncIOLoop.add_callback`; wraps each "
        "loop's `_process_events` (an instance attribute) to count iterations "
        "and report them to auto mode's controller while it sleeps"
    ),
    relies_on=(
        "`IOLoop._run_callback`, `IOLoop._discard_future_result`; asyncio's "
        "`BaseEventLoop._ready`, `_run_once`, `_process_events`, "
        "`_write_to_self`, `_closed`, `_debug`, "
        "`asyncio.events._get_running_loop`, the slots of `asyncio.Handle` (the"
        " batch subclasses it); a GIL"
    ),
    verifies=(
        "tornado.platform.asyncio:BaseAsyncIOLoop.add_callback",
        "tornado.ioloop:IOLoop._run_callback",
        "tornado.ioloop:IOLoop._discard_future_result",
        "asyncio.base_events:BaseEventLoop._run_once",
        "asyncio.base_events:BaseEventLoop.call_soon",
        "asyncio.base_events:BaseEventLoop._call_soon",
        "asyncio.base_events:BaseEventLoop.call_soon_threadsafe",
        "asyncio.selector_events:BaseSelectorEventLoop._process_events",
        "asyncio.selector_events:BaseSelectorEventLoop._write_to_self",
        "asyncio.events:Handle.__init__",
        "asyncio.events:Handle._run",
    ),
    check=check,
    apply=apply,
    check_loop=unknown_loop,
)
