"""Coalesced self-pipe wake-ups for asyncio's selector event loop.

Every ``call_soon_threadsafe`` (Tornado's cross-thread ``add_callback``,
``run_in_executor`` and ``concurrent.futures`` completions) ends in
``_write_to_self``: one ``send`` of a NUL byte on the loop's self-pipe, a
syscall that also drops the GIL, and one byte for the loop to read back.
One byte is enough to wake the loop however many handles were appended, so
a producer writes only when no wake-up is pending; the loop clears the
pending flag in ``_read_from_self``, *after* the pipe is drained.

Why that ordering cannot lose a wake-up.  ``call_soon_threadsafe`` appends
its handle to ``_ready`` *before* calling ``_write_to_self``.  A producer
that skips the write saw the flag set, so either (a) the byte is still in
the pipe: the loop's next ``select()`` returns at once and that iteration
runs the handle; or (b) the loop has read the byte and is inside
``_read_from_self``, about to clear the flag: it is mid-iteration, and
``_run_once`` computes the next ``select()`` timeout from ``_ready`` (0 when
non-empty) before it can block, so the handle runs next iteration.
Clearing *before* draining would break (b): a producer could set the flag
and write a byte that the same drain then swallows, leaving the flag set
with an empty pipe, and every later producer would skip its write while
the loop sleeps.

CPython 3.14: kept, not declined.  Its ``call_soon_threadsafe``
(gh-128340) no longer goes through ``_call_soon``: it builds an
``events._ThreadSafeHandle`` (a ``Handle`` whose ``cancel``/``_run`` take
an ``RLock``) and appends it to ``_ready`` itself, then calls
``_write_to_self``.  The argument above needs only that the handle is in
``_ready`` before ``_write_to_self`` runs, and that ``_run_once`` computes
its timeout from ``_ready`` before it polls; both hold in 3.14 as in
3.10-3.13, and the handle's lock guards cancel-versus-run, which this
patch never touches.  So ``check()`` accepts exactly those two shapes of
``call_soon_threadsafe`` (queue, then wake) and declines any other.

Free-threaded builds (no GIL): declined.  Without the GIL, a skipped
write is safe only if the loop thread, after releasing the flag, sees the
handle the producer appended before it found the flag taken: a memory
ordering argument across a ``deque`` and a ``dict`` that we have not made
for the free-threaded runtime and cannot test here, and the counters are
atomic only under the GIL (``fastloop.telemetry.live``).  Stock wakes the
loop with a syscall per call, which needs no such argument.

The reader registered for the self-pipe is bound when the loop is created,
so a loop created before ``install()`` still runs the stock
``_read_from_self`` and would never clear the flag: such loops are detected
once and keep writing every time (stock behaviour).  Signals are untouched:
the C signal handler writes to the pipe itself, not through here.  Only
asyncio's selector loops run this code: a proactor loop, uvloop and
Tornado's ``AddThreadSelectorEventLoop`` (its own selector thread) never
reach it.  So ``check()`` reads the class alone, not which loop the
application runs (an event loop policy, which 3.16 removes, or a
``loop_factory``): ``check_loop`` says of one loop whether it runs this code.

Undo argument.  A loop created while installed keeps fastloop's reader
(the self-pipe handle binds ``_read_from_self`` when the loop is made) and,
once woken from another thread, its pending flag ``_fastloop_wakeup``.
Uninstall restores the class attributes first, then turns coalescing off in
every flag, then takes the flags off and puts a handle of stock
``_read_from_self`` back on each such loop's self-pipe.  A producer still
inside the patched ``_write_to_self`` cannot lose a wake-up: after failing
to take the flag it skips its write only if coalescing is still on, which
means the reader registered is still fastloop's, and then the argument
above holds; once coalescing is off it writes.  The handle is swapped by
``selector.modify``, a dict assignment the loop thread sees whole, whichever
of the two handles it runs.
"""

from __future__ import annotations

import contextlib
import functools
from asyncio import events, selector_events
from types import ModuleType
from typing import Any

from fastloop.patches import Patch, changed_method, loop_class, needs_gil, registry
from fastloop.patches.changes import Change, PerObject, Swap
from fastloop.runtime import fork
from fastloop.telemetry.live import counters

WAKEUP = counters("WakeupStats")


class WakeupState:
    """One loop's pending flag, as a token a producer takes to write.

    ``token.pop(0, False)`` is the test-and-set: one C call, atomic under
    the GIL, that answers True to exactly one producer until the loop puts
    the token back (``token[0] = True``, idempotent: putting back a token
    nobody took, after a signal's byte, is harmless).  A ``Lock`` did the
    same with ``acquire(False)``, and ``release()`` under
    ``contextlib.suppress(RuntimeError)`` for a flag found free: 7,700
    instructions a cross-thread ping over stock, against 3,100 with the
    token, most of which is the two wrappers' frames
    (``python bench/instructions.py --arms wakeup``, callgrind).
    """

    __slots__ = ("__weakref__", "coalesce", "token")

    def __init__(self, coalesce: bool) -> None:
        self.token = {0: True}
        self.coalesce = coalesce
        fork.in_child(self.reset_after_fork)

    def reset_after_fork(self) -> None:
        """In a forked child the parent's pending byte is not ours to wait for."""
        self.token = {0: True}


#: What ``call_soon_threadsafe`` does before its ``self._write_to_self()``
#: to queue the handle: ``self._call_soon(...)`` (3.10-3.13), or append an
#: ``events._ThreadSafeHandle`` to ``self._ready`` itself (3.14, gh-128340).
QUEUE_THEN_WAKE = (
    ("_call_soon",),
    ("_ThreadSafeHandle", "_ready", "append"),
)


def _first_uses(function: Any) -> list[str]:
    """The global and attribute names ``function`` uses, in order of first use.

    ``co_names`` is filled as the compiler meets each name, in source order:
    a fingerprint of what comes before what, read without ``dis`` (start-up).
    """
    return list(getattr(getattr(function, "__code__", None), "co_names", ()))


def queues_then_wakes(function: Any) -> bool:
    """Whether ``call_soon_threadsafe`` is a shape that queues, then wakes."""
    names = _first_uses(function)
    if "_write_to_self" not in names:
        return False
    before = names[: names.index("_write_to_self")]
    return any(all(name in before for name in shape) for shape in QUEUE_THEN_WAKE)


def check(module: ModuleType) -> str | None:
    no_gil = needs_gil(
        "wakeup relies on the GIL's atomicity for a skipped write (the handle "
        "appended before the pending flag is seen taken) and for its counters"
    )
    if no_gil is not None:
        return no_gil
    cls = getattr(module, "BaseSelectorEventLoop", None)
    if cls is None:
        return "asyncio.selector_events.BaseSelectorEventLoop is missing"
    if not queues_then_wakes(getattr(cls, "call_soon_threadsafe", None)):
        return (
            "BaseEventLoop.call_soon_threadsafe changed: not a shape known to "
            "queue its handle before _write_to_self"
        )
    run_once = _first_uses(getattr(cls, "_run_once", None))
    if not {"_ready", "select"} <= set(run_once) or run_once.index(
        "_ready"
    ) > run_once.index("select"):
        return "BaseEventLoop._run_once no longer reads _ready before it polls"
    needs = {
        "_write_to_self": {"_csock", "send"},
        "_read_from_self": {"_ssock", "recv", "_process_self_data"},
        "_make_self_pipe": {"_add_reader", "_read_from_self"},
    }
    changed = changed_method(cls, needs)
    if changed is not None:
        return f"BaseSelectorEventLoop.{changed} changed"
    return None


def check_loop(loop: Any) -> str | None:
    """Why ``loop`` never runs the patched self-pipe code, or None if it does."""
    if isinstance(loop, selector_events.BaseSelectorEventLoop):
        return None
    if type(loop).__module__.startswith("uvloop"):
        return "uvloop coalesces its wake-ups already, without asyncio's self-pipe"
    return f"{loop_class(loop)} is not an asyncio selector loop"


def _self_pipe_reader(loop: Any) -> Any:
    """The callback of the handle that reads ``loop``'s self-pipe (None if closed)."""
    try:
        return loop._selector.get_key(loop._ssock.fileno()).data[0]._callback
    except Exception:  # closed, or a selector we do not know
        return None


def _reads_for_us(loop: Any) -> bool:
    """Whether the loop's self-pipe reader is fastloop's (any fastloop version)."""
    callback = _self_pipe_reader(loop)
    function = getattr(callback, "__func__", None)
    return bool(getattr(function, "clears_fastloop_wakeup", False))


def stop_coalescing(loop: Any) -> None:
    """Uninstall, step 1: every producer from now on writes (see the argument)."""
    state = getattr(loop, "_fastloop_wakeup", None)
    if state is not None:
        state.coalesce = False


def give_back_the_reader(loop: Any) -> None:
    """Uninstall, step 2: a handle of stock ``_read_from_self`` reads the pipe again."""
    if not _reads_for_us(loop):
        return
    with contextlib.suppress(Exception):  # closed meanwhile: nothing to read
        fd = loop._ssock.fileno()
        key = loop._selector.get_key(fd)
        handle = events.Handle(loop._read_from_self, (), loop, None)
        loop._selector.modify(fd, key.events, (handle, key.data[1]))


def apply(module: ModuleType) -> list[Change]:
    cls = module.BaseSelectorEventLoop
    stock_write: Any = cls.__dict__["_write_to_self"]
    stock_read: Any = cls.__dict__["_read_from_self"]
    stock_make_self_pipe: Any = cls.__dict__["_make_self_pipe"]
    requested = WAKEUP.requested.increment
    written = WAKEUP.written.increment
    # Loops whose self-pipe reader is ours, and their flags (undone first).
    readers = PerObject(detach=give_back_the_reader)
    states = PerObject("_fastloop_wakeup", detach=stop_coalescing)

    def make_self_pipe(self: Any) -> None:
        stock_make_self_pipe(self)
        readers.put(self)  # its reader is read_from_self, below

    def read_from_self(self: Any) -> None:
        try:
            stock_read(self)
        finally:
            # The pipe is empty now: only now may a producer write again.  If
            # a KeyboardInterrupt cut the read short, releasing is still
            # safe: nothing more is read until the loop runs again, so any
            # byte written from now on stays in the pipe and wakes it.
            state = getattr(self, "_fastloop_wakeup", None)
            if state is not None:
                state.token[0] = True

    read_from_self.clears_fastloop_wakeup = True  # type: ignore[attr-defined]

    def new_state(loop: Any) -> WakeupState:
        # Only a loop whose self-pipe reader is ours ever clears the flag;
        # anything else keeps writing every time.
        coalesce = _reads_for_us(loop)
        if not coalesce:
            registry.declined_on_loop(
                "wakeup",
                loop,
                "its self-pipe reader is not fastloop's (a loop made before "
                "install(), or one that overrides _read_from_self)",
            )
        return WakeupState(coalesce)

    def write_to_self(self: Any) -> None:
        requested()
        try:
            state = self._fastloop_wakeup
        except AttributeError:
            state = states.setdefault(self, new_state)
        if state.coalesce and not state.token.pop(0, False) and state.coalesce:
            return  # a wake-up is on its way (read coalesce again: uninstall)
        written()
        stock_write(self)

    functools.update_wrapper(write_to_self, stock_write)
    functools.update_wrapper(read_from_self, stock_read)
    functools.update_wrapper(make_self_pipe, stock_make_self_pipe)
    return [
        readers,
        states,
        Swap(cls, "_make_self_pipe", make_self_pipe),
        Swap(cls, "_write_to_self", write_to_self),
        Swap(cls, "_read_from_self", read_from_self),
    ]


PATCH = Patch(
    name="wakeup",
    target="asyncio.selector_events",
    summary="asyncio selector loop: at most one self-pipe wake-up outstanding",
    replaces=(
        "`asyncio.selector_events.BaseSelectorEventLoop._write_to_self` and "
        "`_read_from_self`; `_make_self_pipe` wrapped (it notes each loop "
        "whose self-pipe reader is the patched `_read_from_self`)"
    ),
    relies_on=(
        "`_csock`, `_ssock`, `_selector`, `_make_self_pipe`, "
        "`_process_self_data`; `call_soon_threadsafe` queueing before "
        "`_write_to_self` (3.10-3.13's or 3.14's shape); `_run_once` reading "
        "`_ready` before it polls; a GIL"
    ),
    verifies=(
        "asyncio.selector_events:BaseSelectorEventLoop._write_to_self",
        "asyncio.selector_events:BaseSelectorEventLoop._read_from_self",
        "asyncio.selector_events:BaseSelectorEventLoop._make_self_pipe",
        "asyncio.selector_events:BaseSelectorEventLoop._process_self_data",
        "asyncio.base_events:BaseEventLoop.call_soon_threadsafe",
        "asyncio.base_events:BaseEventLoop._run_once",
    ),
    check=check,
    apply=apply,
    check_loop=check_loop,
)
