"""On-loop fast path for ``IOLoop.add_callback``.

Stock Tornado pays, per callback, a ``functools.partial``, a bound
``_run_callback``, asyncio's ``call_soon`` -> ``_call_soon`` -> ``Handle``
chain, then ``Handle._run`` -> ``Context.run`` -> ``_run_callback`` ->
``partial`` to run it.  On the loop thread we instead append consecutive
callbacks to one *batch*: a single ``asyncio.Handle`` subclass sitting in the
loop's ready queue that runs them in order.  A callback costs a tuple and a
``contextvars`` snapshot; the handle is paid once per batch.

Ordering argument.  A batch accepts callbacks only while it is the *last*
entry of ``loop._ready``.  Anything scheduled after it (``call_soon``, a
future's done-callbacks, another thread's ``call_soon_threadsafe``) makes
it no longer last, so the next ``add_callback`` opens a new batch behind
that entry: the run order equals the order in which stock Tornado would
have appended one handle per callback.  When the loop pops the batch to
run it, it leaves ``_ready``, so a callback added *by* a callback of the
batch opens a new batch that runs on the next iteration, after I/O
polling, exactly like stock (no starvation).

Off the loop thread (another thread, or the loop not running yet) stock
Tornado calls ``call_soon_threadsafe`` per callback: a ``Handle`` and a
self-pipe write each.  We append to the IOLoop's cross-thread queue and
schedule one *drain* entry while none is pending; the drain takes what is
queued and runs it like a batch.  Per producer thread the order is FIFO;
each callback runs in the context of the thread that added it.  The
pending flag is a Lock used as a test-and-set, released by the drain
*before* it takes the queue, so an item appended after the drain's snapshot
always finds the flag free and schedules the next drain: nothing is
stranded.  A closed loop drops its queue and the call returns silently.

The stock path remains for asyncio debug mode (it checks every handle), for
on-loop calls on uvloop or any loop without a ``_ready`` deque, and for
IOLoop subclasses that override ``_run_callback``.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import threading
from asyncio import events
from collections.abc import Callable, Sequence
from contextvars import Context, copy_context
from types import ModuleType
from typing import Any

from fastloop import _fork
from fastloop import _stats as stats
from fastloop._registry import Patch, Swap

_get_running_loop: Callable[[], Any] = events._get_running_loop

#: On-loop mode of a loop without asyncio's ``_ready`` deque (uvloop).
CALL_SOON = object()

#: Serialises the creation of an IOLoop's queue by its first producers.
_creating = threading.Lock()


class RemoteQueue:
    """Callbacks added to one IOLoop from other threads, waiting for a drain."""

    __slots__ = (
        "__weakref__",
        "base_event_loop",
        "eligible",
        "items",
        "pending",
    )

    def __init__(self, loop: Any, eligible: bool) -> None:
        self.items: collections.deque[tuple[Any, ...]] = collections.deque()
        self.pending = threading.Lock()  # held while a drain is scheduled
        # asyncio's own loops: read _closed/_debug rather than call methods.
        self.base_event_loop = isinstance(loop, asyncio.BaseEventLoop)
        # False for IOLoop subclasses that override _run_callback: stock path.
        self.eligible = eligible
        _fork.track(self)

    def reset_after_fork(self) -> None:
        """In a forked child: the parent's callbacks and pending drain are not ours."""
        self.items.clear()
        self.pending = threading.Lock()


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
    if not {"_ready", "popleft", "_cancelled", "_run"} <= names:
        return "asyncio's BaseEventLoop._run_once no longer pops _ready handles"
    return None


def apply(module: ModuleType) -> list[Swap]:
    from tornado import gen
    from tornado.ioloop import IOLoop
    from tornado.log import app_log

    base = module.BaseAsyncIOLoop
    stock_add_callback: Callable[..., None] = base.__dict__["add_callback"]
    stock_run_callback = IOLoop._run_callback
    convert_yielded = gen.convert_yielded
    bad_yield = gen.BadYieldError
    cancelled = asyncio.CancelledError
    format_callback = _callback_formatter()

    def adopt_result(ioloop: Any, result: Any) -> None:
        # Stock _run_callback: a returned awaitable is converted and its
        # failure logged; a non-awaitable non-None result is ignored.
        try:
            future = convert_yielded(result)
        except bad_yield:
            return
        ioloop.add_future(future, ioloop._discard_future_result)

    class CallbackBatch(events.Handle):
        """Consecutive on-loop callbacks of one IOLoop, run as one ready entry."""

        __slots__ = ("_ioloop", "_items")
        # Read by Handle.__repr__ and asyncio's debug formatting; never
        # written, because only the ready queue holds a reference to a batch.
        _callback = None
        _args = ()
        _source_traceback = None
        _repr = None
        _context = None

        def __init__(self, ioloop: Any, loop: Any, items: list[Any]) -> None:
            self._ioloop = ioloop
            self._loop = loop
            self._items = items
            self._cancelled = False

        def __repr__(self) -> str:
            return f"<fastloop CallbackBatch of {self._ioloop!r}>"

        def _run(self) -> None:
            run_items(self._ioloop, self._loop, self._items, self)

    def run_items(ioloop: Any, loop: Any, items: Sequence[Any], handle: Any) -> None:
        """Run flat (callback, args, kwargs, context, ...) items in order."""
        # Flat rather than a list of tuples: one GC-tracked object fewer per
        # callback.  A lone callback (a callback chain, a cross-thread ping)
        # skips building the grouping iterator: ~15% of a chain's cost.
        remaining = None if len(items) == 4 else iter(items)
        if remaining is None:
            groups: Any = (items,)
        else:
            # No strict=: a keyword call costs ~150 ns a batch here.
            groups = zip(remaining, remaining, remaining, remaining)  # noqa: B905
        try:
            for callback, args, kwargs, context in groups:
                # Each callback runs in the snapshot taken when it was added,
                # as Handle does; errors are handled as stock _run_callback
                # does, logging inside the same context.
                try:
                    if kwargs:
                        result = context.run(callback, *args, **kwargs)
                    else:
                        result = context.run(callback, *args)
                    if result is not None:
                        context.run(adopt_result, ioloop, result)
                except cancelled:
                    pass
                except Exception:
                    context.run(
                        app_log.error,
                        "Exception in callback %r",
                        functools.partial(callback, *args, **kwargs),
                        exc_info=True,
                    )
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:
                    report(ioloop, loop, callback, args, kwargs, context, exc)
        except BaseException as exc:
            # The callbacks not yet run go back to the *front* of the ready
            # queue, where stock's remaining handles would still be, so they
            # run first when the loop runs again: nothing is lost.
            rest = list(remaining) if remaining is not None else []
            if rest:
                requeue_first(CallbackBatch(ioloop, loop, rest))
            if isinstance(exc, (SystemExit, KeyboardInterrupt)):
                raise  # leaves run_forever, as stock Handle._run lets it
            # Only a failing logging handler gets here; Handle._run would
            # report it to the loop rather than crash the loop.
            loop.call_exception_handler(
                {
                    "message": f"Exception in {handle!r}",
                    "exception": exc,
                    "handle": handle,
                }
            )

    def report(
        ioloop: Any,
        loop: Any,
        callback: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        context: Context,
        exc: BaseException,
    ) -> None:
        # What Handle._run does with a BaseException that is neither
        # Exception nor CancelledError, worded as for the stock handle.
        partial = functools.partial(callback, *args, **kwargs)
        run_callback = ioloop._run_callback
        loop.call_exception_handler(
            {
                "message": "Exception in callback "
                + format_callback(run_callback, (partial,)),
                "exception": exc,
                "handle": events.Handle(run_callback, (partial,), loop, context),
            }
        )

    def requeue_first(batch: CallbackBatch) -> None:
        ready = getattr(batch._loop, "_ready", None)
        if isinstance(ready, collections.deque):
            ready.appendleft(batch)
        else:  # uvloop (a drain's leftovers): last rather than lost
            batch._loop.call_soon(batch._run)

    def on_loop_mode(ioloop: Any, loop: Any) -> Any:
        """How on-loop calls go for this IOLoop: its ready deque, CALL_SOON, or None."""
        if type(ioloop)._run_callback is not stock_run_callback:
            return None  # a subclass customises error handling: stock path
        ready = getattr(loop, "_ready", None)
        if isinstance(ready, collections.deque):
            return ready  # asyncio's own loops: batches
        return CALL_SOON  # uvloop and others: one handle each, minus the partial

    def run_lone(
        ioloop: Any, loop: Any, callback: Callable[..., Any], args: Any, kwargs: Any
    ) -> None:
        # Runs inside the handle's context, which call_soon took at add time.
        try:
            result = callback(*args, **kwargs)
            if result is not None:
                adopt_result(ioloop, result)
        except cancelled:
            pass
        except Exception:
            app_log.error(
                "Exception in callback %r",
                functools.partial(callback, *args, **kwargs),
                exc_info=True,
            )
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            report(ioloop, loop, callback, args, kwargs, copy_context(), exc)

    queued = stats.REMOTE_CALLBACKS.increment
    drains = stats.REMOTE_DRAINS.increment
    drained = stats.REMOTE_DRAINED.add
    drained_one = stats.REMOTE_DRAINED.increment

    def drain(ioloop: Any, remote: RemoteQueue) -> None:
        # Release first, then snapshot: anything appended from here on finds
        # the flag free and schedules the next drain itself.
        # try/except rather than contextlib.suppress: cheaper, once a drain.
        try:  # noqa: SIM105
            remote.pending.release()
        except RuntimeError:  # a drain the parent scheduled, run in a forked child
            pass
        queue = remote.items
        count = len(queue)
        drains()
        if count == 1:  # a lone callback: its tuple is already flat
            drained_one()
            run_items(ioloop, ioloop.asyncio_loop, queue.popleft(), remote)
        elif count:
            drained(count)
            popleft = queue.popleft
            items: list[Any] = []
            for _ in range(count):
                items += popleft()
            run_items(ioloop, ioloop.asyncio_loop, items, remote)

    def remote_queue(ioloop: Any) -> RemoteQueue:
        # Plain attributes, never ioloop.__dict__ (that would de-optimise
        # every attribute access on the object in CPython 3.11+); the lock
        # makes racing first producers share one queue.
        with _creating:
            remote: RemoteQueue | None = getattr(ioloop, "_fastloop_remote", None)
            if remote is None:
                eligible = type(ioloop)._run_callback is stock_run_callback
                remote = RemoteQueue(ioloop.asyncio_loop, eligible)
                ioloop._fastloop_remote = remote
            return remote

    # A plain function, not a wrapt FunctionWrapper: this is the hottest path
    # in a Tornado process and the wrapper layer costs a measurable share of
    # the ~0.6 us per callback left after batching.
    def add_callback(
        self: Any, callback: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> None:
        loop: Any = self.asyncio_loop
        if _get_running_loop() is loop:
            try:
                ready = self._fastloop_ready
            except AttributeError:
                ready = self._fastloop_ready = on_loop_mode(self, loop)
            if ready is CALL_SOON:
                if not loop.get_debug():
                    loop.call_soon(run_lone, self, loop, callback, args, kwargs)
                    return
            elif ready is not None:
                # The open batch is found at the tail of the ready queue, not
                # kept on the IOLoop: a reference from the IOLoop to a batch
                # (which refers back to it) would be a reference cycle, and
                # Tornado's own test suite rightly fails on those.
                if ready:
                    tail = ready[-1]
                    if tail.__class__ is CallbackBatch and tail._ioloop is self:
                        tail._items += (callback, args, kwargs, copy_context())
                        return
                if not loop._debug:
                    items = [callback, args, kwargs, copy_context()]
                    ready.append(CallbackBatch(self, loop, items))
                    return
        else:
            try:
                remote = self._fastloop_remote
            except AttributeError:
                remote = remote_queue(self)
            if remote.base_event_loop:
                closed, debug = loop._closed, loop._debug
            else:
                closed, debug = loop.is_closed(), loop.get_debug()
            if not debug and remote.eligible:
                if closed:
                    remote.items.clear()  # nothing queued can run any more
                    return
                remote.items.append((callback, args, kwargs, copy_context()))
                queued()
                if remote.pending.acquire(False):
                    try:
                        loop.call_soon_threadsafe(drain, self, remote)
                    except (RuntimeError, AttributeError):
                        # Closed under our feet (AttributeError: the proactor
                        # race stock mentions).  The flag stays held: later
                        # calls see the loop closed.
                        remote.items.clear()
                return
        stock_add_callback(self, callback, *args, **kwargs)

    functools.update_wrapper(add_callback, stock_add_callback)
    return [Swap(base, "add_callback", add_callback)]


def _callback_formatter() -> Callable[[Any, tuple[Any, ...]], str]:
    helpers = getattr(asyncio, "format_helpers", None)
    formatter = getattr(helpers, "_format_callback_source", None)
    if formatter is None:
        return lambda callback, args: repr(functools.partial(callback, *args))
    return lambda callback, args: str(formatter(callback, args))


PATCH = Patch(
    name="add_callback",
    target="tornado.platform.asyncio",
    summary="IOLoop.add_callback: on-loop batches, coalesced cross-thread queue",
    check=check,
    apply=apply,
)
