"""The handles that batched ``add_callback`` puts in a loop's ready queue.

A ``CallbackBatch`` holds consecutive on-loop callbacks of one IOLoop, a
``RemoteBatch`` those added from other threads, under the ``LoopState``
lock each IOLoop keeps (``add_callback``'s module
says when a batch accepts one); ``run_items`` runs a batch's callbacks in
order, each in its own context, handling errors as stock ``_run_callback``
and ``Handle._run`` do.  ``run_lone`` runs one callback on loops without a
ready deque (uvloop).  Built once, at import: nothing here refers to the
originals the patch replaces.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import threading
from asyncio import events
from collections.abc import Callable, Sequence
from contextvars import Context, copy_context
from typing import Any

from tornado import gen
from tornado.log import app_log

from fastloop.runtime import fork
from fastloop.telemetry.live import counters

ADD_CALLBACK = counters("AddCallbackStats")

_cancelled = asyncio.CancelledError
#: Bumped for each callback beyond the first of its batch (the schema adds
#: ``onloop_batches``): a lone callback, a chain's step, costs no bump here.
_onloop_extra = ADD_CALLBACK.onloop_callbacks.add
_batches = ADD_CALLBACK.batches.increment
_batched = ADD_CALLBACK.batched.add
_batched_one = ADD_CALLBACK.batched.increment


#: Far enough apart that no loop iterates from one start to the next.
_FIRST_ITERATIONS = itertools.count(0, 1 << 40)


class LoopState:
    """What one IOLoop's add_callback needs; kept on the IOLoop, no cycles."""

    __slots__ = ("__weakref__", "call_soon", "iteration", "listeners", "lock", "ready")

    def __init__(self, ready: Any, call_soon: bool) -> None:
        #: asyncio's ready deque when batching applies, else None.
        self.ready: collections.deque[Any] | None = ready
        #: True on loops without a ready deque (uvloop): call_soon per callback.
        self.call_soon = call_soon
        #: Loop iterations so far (bumped once per iteration on the loop thread),
        #: counted from a start of this state's own: a batch stamped under an
        #: earlier install of the same loop never matches this one's count.
        self.iteration = next(_FIRST_ITERATIONS)
        #: Guards RemoteBatch appends against the loop starting that batch.
        #: Reentrant: an allocation under it can run a finalizer that calls
        #: add_callback on the same thread (distributed's ``Future.__del__``
        #: does, from a task thread), which a plain Lock would deadlock and
        #: stock's lock-free ``call_soon_threadsafe`` survives; the nested
        #: call then queues first, as it does in stock.
        self.lock = threading.RLock()
        #: Each called with each iteration's event list (on the loop thread,
        #: before the loop handles them): the sleepers of this loop's that
        #: wake on its activity (``dask_tick``, ``dask_memory``).  Only the
        #: loop thread changes it, by replacing the tuple.
        self.listeners: tuple[Callable[[Any], None], ...] = ()
        fork.in_child(self.reset_after_fork)

    def listen(self, listener: Callable[[Any], None]) -> None:
        self.listeners = (*self.listeners, listener)

    def unlisten(self, listener: Callable[[Any], None]) -> None:
        self.listeners = tuple(each for each in self.listeners if each is not listener)

    def reset_after_fork(self) -> None:
        """A producer thread of the parent may have held the lock: not ours."""
        self.lock = threading.RLock()


def adopt_result(ioloop: Any, result: Any) -> None:
    # Stock _run_callback: a returned awaitable is converted and its
    # failure logged; a non-awaitable non-None result is ignored.
    try:
        future = gen.convert_yielded(result)
    except gen.BadYieldError:
        return
    ioloop.add_future(future, ioloop._discard_future_result)


#: The flat fields of one queued callback: callback, args, kwargs, context.
FIELDS = 4


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
        if len(items) != FIELDS and self._iteration >= 0:
            # Counted per batch: the callbacks beyond the first.  A batch
            # put back after KeyboardInterrupt (iteration -1) was counted.
            _onloop_extra(len(items) // FIELDS - 1)
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
        if len(items) == FIELDS:
            _batched_one()
        else:
            _batched(len(items) // FIELDS)
        run_items(self._ioloop, self._loop, items, self)


def run_items(ioloop: Any, loop: Any, items: Sequence[Any], handle: Any) -> None:
    """Run flat (callback, args, kwargs, context, ...) items in order."""
    # Flat rather than a list of tuples: one GC-tracked object fewer per
    # callback.  A lone callback (a callback chain, a cross-thread ping)
    # skips building the grouping iterator, a sixth of a chain's cost
    # (docs/design.md#one-callback-one-item).
    remaining = None if len(items) == FIELDS else iter(items)
    if remaining is None:
        groups: Any = (items,)
    else:
        # No strict=: the keyword costs ~115 ns a batch here (python -m timeit:
        # list(zip(a, b)) 251 ns, with strict=True 365 ns, 3 items each).
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


def _callback_formatter() -> Callable[[Any, tuple[Any, ...]], str]:
    helpers = getattr(asyncio, "format_helpers", None)
    formatter = getattr(helpers, "_format_callback_source", None)
    if formatter is None:
        return lambda callback, args: repr(functools.partial(callback, *args))
    return lambda callback, args: str(formatter(callback, args))


_format_callback = _callback_formatter()
