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
``_process_events`` (called once per iteration), stamps each batch.

From other threads, and on the loop's thread before it runs, the batch
class is ``RemoteBatch``: producers append under a per-IOLoop lock while
it is the tail and has not started; the loop marks it started under the
same lock before reading it.  Only a new batch writes a wake-up byte (the
``wakeup`` patch coalesces those further).  A closed loop swallows the
call, as stock does.

The stock path remains for asyncio debug mode (it checks every handle),
for IOLoop subclasses that override ``_run_callback``, and for loops this
patch does not know (a proactor loop, Tornado's proxy loops): those are
declined one by one, with a reason on logger ``fastloop``.  Loops without
a ``_ready`` deque (uvloop) get one handle per callback, minus the partial.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import threading
import weakref
from asyncio import events, selector_events
from collections.abc import Callable, Sequence
from contextvars import Context, copy_context
from types import ModuleType
from typing import Any

from tornado import gen
from tornado.log import app_log

from fastloop import _counters as stats
from fastloop import _fork, _registry
from fastloop._attached import attached
from fastloop._registry import Patch, Swap

_get_running_loop: Callable[[], Any] = events._get_running_loop
_cancelled = asyncio.CancelledError

_onloop_batch = stats.ONLOOP_BATCHES.increment
_onloop_extra = stats.ONLOOP_EXTRA.add
_queued = stats.REMOTE_CALLBACKS.increment
_batches = stats.REMOTE_BATCHES.increment
_batched = stats.REMOTE_BATCHED.add
_batched_one = stats.REMOTE_BATCHED.increment


class LoopState:
    """What one IOLoop's add_callback needs; kept on the IOLoop, no cycles."""

    __slots__ = ("__weakref__", "call_soon", "iteration", "lock", "ready")

    def __init__(self, ready: Any, call_soon: bool) -> None:
        #: asyncio's ready deque when batching applies, else None.
        self.ready: collections.deque[Any] | None = ready
        #: True on loops without a ready deque (uvloop): call_soon per callback.
        self.call_soon = call_soon
        #: Loop iterations so far (bumped once per iteration on the loop thread).
        self.iteration = 0
        #: Guards RemoteBatch appends against the loop starting that batch.
        self.lock = threading.Lock()
        _fork.track(self)

    def reset_after_fork(self) -> None:
        """A producer thread of the parent may have held the lock: not ours."""
        self.lock = threading.Lock()


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
    if not {"_ready", "popleft", "_cancelled", "_run", "_process_events"} <= names:
        return "asyncio's BaseEventLoop._run_once changed (_ready, _process_events)"
    return None


def adopt_result(ioloop: Any, result: Any) -> None:
    # Stock _run_callback: a returned awaitable is converted and its
    # failure logged; a non-awaitable non-None result is ignored.
    try:
        future = gen.convert_yielded(result)
    except gen.BadYieldError:
        return
    ioloop.add_future(future, ioloop._discard_future_result)


class CallbackBatch(events.Handle):
    """Consecutive on-loop callbacks of one IOLoop, run as one ready entry."""

    __slots__ = ("_ioloop", "_items", "_iteration")
    # Read by Handle.__repr__ and asyncio's debug formatting; never
    # written, because only the ready queue holds a reference to a batch.
    _callback = None
    _args = ()
    _source_traceback = None
    _repr = None
    _context = None

    def __init__(
        self, ioloop: Any, loop: Any, items: list[Any], iteration: int
    ) -> None:
        self._ioloop = ioloop
        self._loop = loop
        self._items = items
        self._iteration = iteration
        self._cancelled = False

    def __repr__(self) -> str:
        return f"<fastloop {type(self).__name__} of {self._ioloop!r}>"

    def _run(self) -> None:
        items = self._items
        if len(items) != 4 and self._iteration >= 0:
            # Counted per batch: the callbacks beyond the first.  A batch
            # put back after KeyboardInterrupt (iteration -1) was counted.
            _onloop_extra(len(items) // 4 - 1)
        run_items(self._ioloop, self._loop, items, self)


class RemoteBatch(CallbackBatch):
    """Callbacks added off the loop thread; appended to under ``state.lock``."""

    __slots__ = ("_started", "_state")

    def __init__(
        self, ioloop: Any, loop: Any, items: list[Any], state: LoopState
    ) -> None:
        # Assigned here rather than through super().__init__: one frame
        # less on the path of every lone cross-thread callback.
        self._ioloop = ioloop
        self._loop = loop
        self._items = items
        self._iteration = -1
        self._cancelled = False
        self._state = state
        self._started = False

    def _run(self) -> None:
        lock = self._state.lock
        lock.acquire()
        self._started = True  # from here on no producer appends
        lock.release()
        items = self._items
        _batches()
        if len(items) == 4:
            _batched_one()
        else:
            _batched(len(items) // 4)
        run_items(self._ioloop, self._loop, items, self)


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
            except _cancelled:
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
                _report(ioloop, loop, callback, args, kwargs, context, exc)
    except BaseException as exc:
        # The callbacks not yet run go back to the *front* of the ready
        # queue, where stock's remaining handles would still be, so they
        # run first when the loop runs again: nothing is lost.
        rest = list(remaining) if remaining is not None else []
        if rest:  # batches exist only on loops with a _ready deque
            loop._ready.appendleft(CallbackBatch(ioloop, loop, rest, -1))
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


def _report(
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
            + _format_callback(run_callback, (partial,)),
            "exception": exc,
            "handle": events.Handle(run_callback, (partial,), loop, context),
        }
    )


def run_lone(
    ioloop: Any, loop: Any, callback: Callable[..., Any], args: Any, kwargs: Any
) -> None:
    # Runs inside the handle's context, which call_soon took at add time.
    try:
        result = callback(*args, **kwargs)
        if result is not None:
            adopt_result(ioloop, result)
    except _cancelled:
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
        _report(ioloop, loop, callback, args, kwargs, copy_context(), exc)


def count_iterations(loop: Any, state: LoopState) -> None:
    # _run_once calls self._process_events once per iteration, before it
    # runs that iteration's handles.  The weak reference keeps the loop
    # free of a loop -> wrapper -> bound method -> loop cycle.
    process = type(loop)._process_events
    loop_ref = weakref.ref(loop)

    def process_events(event_list: Any) -> None:
        state.iteration += 1
        process(loop_ref(), event_list)

    loop._process_events = process_events


def apply(module: ModuleType) -> list[Swap]:
    """The replacement ``add_callback``, made for the originals found now.

    Only what must close over those originals is made here: ``add_callback``
    falls back to the stock one it replaces, and ``new_state`` compares an
    IOLoop's ``_run_callback`` with the stock one (a subclass with its own
    error handling keeps the stock path).  The batches and the code that
    runs them are module-level, built once.
    """
    from tornado.ioloop import IOLoop

    base = module.BaseAsyncIOLoop
    stock_add_callback: Callable[..., None] = base.__dict__["add_callback"]
    stock_run_callback = IOLoop._run_callback

    def new_state(ioloop: Any) -> LoopState:
        loop = ioloop.asyncio_loop
        if type(ioloop)._run_callback is not stock_run_callback:
            return LoopState(None, False)  # customised error handling: stock path
        reason = unknown_loop(loop)
        if reason is not None:
            _registry.declined_on_loop("add_callback", loop, reason)
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
        count_iterations(loop, state)
        return state

    # A plain function, not a wrapt FunctionWrapper: this is the hottest path
    # in a Tornado process and the wrapper layer costs a measurable share of
    # the ~0.6 us per callback left after batching.
    #
    # The debug flag: asyncio's loops (the ones with a ready deque) are read
    # through their ``_debug`` attribute, as asyncio itself does, a method
    # call less per cross-thread callback; uvloop keeps it in C, so the
    # call_soon path asks ``get_debug()``.
    def add_callback(
        self: Any, callback: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> None:
        loop: Any = self.asyncio_loop
        try:
            state = self._fastloop_state
        except AttributeError:
            state = attached(self, "_fastloop_state", new_state)
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
                    _onloop_batch()  # ~25 ns, once per batch, not per callback
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
                    and tail._ioloop is self
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
    return [Swap(base, "add_callback", add_callback)]


def unknown_loop(loop: Any) -> str | None:
    """Why an asyncio loop is not one this patch knows, or None.

    Known: asyncio's selector loops (batched) and uvloop (one handle per
    callback).  A proactor loop, Tornado's ``AddThreadSelectorEventLoop``
    proxy, or anything else keeps stock ``add_callback``.
    """
    kind = type(loop)  # not isinstance: Tornado's proxy forwards __class__
    if issubclass(kind, selector_events.BaseSelectorEventLoop):
        return None
    if kind.__module__.startswith("uvloop"):
        return None
    return f"{kind.__module__}.{kind.__qualname__} is not a selector loop or uvloop"


def _callback_formatter() -> Callable[[Any, tuple[Any, ...]], str]:
    helpers = getattr(asyncio, "format_helpers", None)
    formatter = getattr(helpers, "_format_callback_source", None)
    if formatter is None:
        return lambda callback, args: repr(functools.partial(callback, *args))
    return lambda callback, args: str(formatter(callback, args))


_format_callback = _callback_formatter()


PATCH = Patch(
    name="add_callback",
    target="tornado.platform.asyncio",
    summary="IOLoop.add_callback: callbacks batched into one ready-queue entry",
    check=check,
    apply=apply,
)
