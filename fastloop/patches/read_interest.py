"""Read interest kept registered while a stream merely pauses between messages.

An ``IOStream`` listens for READ only while a read is pending or its buffer
is empty: when one ``recv`` brings more than the pending read wants (a
message's header and its frames), ``_handle_events`` drops read interest,
and the next read, served from the buffer, adds it back.  On Tornado's
asyncio loops each drop is ``remove_reader`` and each return
``add_reader``: an ``epoll_ctl`` unregister and register, a pair per
message (several per dask actor call).

While installed, dropping read interest in ``update_handler`` takes the fd
out of ``IOLoop.readers`` as stock does but leaves asyncio's reader
registered, marking the fd *muted*; adding it back while muted unmarks it
and calls asyncio's ``add_reader`` as stock does, which finds the mask
unchanged (no ``epoll_ctl``) and swaps in a fresh handle, cancelling the
muted one: a READ the last poll queued for the muted reader is not
delivered in the iteration that unmuted it (stock, with no reader at that
poll, sees it one poll later, after the callbacks already queued; a
handler that half-closes right after its request depends on that order).
If the selector reports the fd readable while it is muted, the reader is
removed for real then, as stock removed it at the drop, and nothing is
delivered: the handler sees no event stock would not have given it, nor
one earlier, so buffering, back-pressure (a reader that stops reading
stops draining the socket) and close detection are stock's.  ``remove_handler``
removes a muted reader for real, so ``IOLoop.readers``, ``handlers`` and
the selector are stock's once a stream is closed.

What differs while an fd is muted: the selector still holds it (stock's
holds it too whenever a stream is idle), and one readable report costs
the loop one more turn of its callback.  An fd closed by its owner without
``remove_handler`` while muted leaves a stale selector key that stock
would not have: a new file given that number and registered straight
through asyncio's ``add_reader`` is not polled (Tornado's streams remove
their handler before they close; a new ``add_handler`` of that number
removes the stale key first).

Only asyncio's selector loops mute: they queue a polled reader's handle to
run later, which is what lets a fresh handle hold back a readiness polled
while muted.  uvloop runs the handle from inside its poll, so its loops
keep stock's drops, declined with one line (``declined``).  Only readers
this patch registered are muted: a reader added before install delivers
through stock's ``_handle_events``, which would not know the mark, so its
drops stay stock's.  Uninstall unmutes every loop on its own thread
(muted fds not read again are removed for real, with the marks): the loop
thread is the only one that registers readers, and a loop running
elsewhere gets the undo as a callback, until which the marks stay with the
replacement ``_handle_events`` its registrations are bound to.  A muted fd
that stock's methods re-added in that window is registered afresh then,
since its number may have passed to a new file the kernel never saw.
"""

from __future__ import annotations

import asyncio
import functools
from asyncio import selector_events
from collections.abc import Callable
from types import ModuleType
from typing import Any

from fastloop.patches import Patch, changed_method, needs_gil, registry
from fastloop.patches.changes import Change, PerObject, Swap
from fastloop.telemetry.live import counters

READ_INTEREST = counters("ReadInterestStats")

#: What each stock method must still do, by the names its code uses: the
#: replacements register and remove readers on ``selector_loop`` as stock does.
NEEDS = {
    "add_handler": {
        "split_fd",
        "handlers",
        "selector_loop",
        "add_reader",
        "_handle_events",
        "readers",
    },
    "update_handler": {
        "split_fd",
        "readers",
        "selector_loop",
        "add_reader",
        "remove_reader",
    },
    "remove_handler": {
        "split_fd",
        "handlers",
        "readers",
        "selector_loop",
        "remove_reader",
    },
    "_handle_events": {"handlers"},
}


def check(module: ModuleType) -> str | None:
    no_gil = needs_gil("the muted marks are sets shared with the uninstalling thread")
    if no_gil is not None:
        return no_gil
    cls = getattr(module, "BaseAsyncIOLoop", None)
    if cls is None:
        return "tornado.platform.asyncio.BaseAsyncIOLoop is missing"
    changed = changed_method(cls, NEEDS)
    return None if changed is None else f"BaseAsyncIOLoop.{changed} changed"


class Reads:
    """One loop's marks: fds muted, and fds whose reader this patch registered."""

    __slots__ = ("muted", "ours")

    def __init__(self) -> None:
        self.muted: set[int] = set()
        #: registered while installed: delivered through ``handle_events``
        self.ours: set[int] = set()


def check_loop(selector_loop: Any) -> str | None:
    """Keep stock's drops on loops that run a reader's handle as they poll.

    Unmuting swaps in a fresh handle, which holds back a readiness polled
    while muted only where the poll queues handles to run later (asyncio's
    selector loops).  uvloop runs the handle from inside its poll, so a
    readiness in the same batch would be delivered before stock saw it.
    """
    if isinstance(selector_loop, selector_events.BaseSelectorEventLoop):
        return None
    return "it runs reader handles as it polls"


def declined(loop: Any) -> bool:
    """Whether an IOLoop's selector loop keeps stock's drops (``check_loop``)."""
    selector_loop = loop.selector_loop
    reason = check_loop(selector_loop)
    if reason is None:
        return False
    registry.declined_on_loop("read_interest", selector_loop, reason)
    return True


def unmute_all(loop: Any, read: int) -> None:
    """Uninstall: what stock would hold, on the loop's own thread."""

    def unmute() -> None:
        reads: Reads | None = vars(loop).pop("_fastloop_reads", None)
        if reads is None:
            return  # a loop of a kind this patch keeps stock on
        muted, reads.muted = reads.muted, set()
        if loop.asyncio_loop.is_closed():
            return  # its selector is gone, and with it every registration
        selector_loop = loop.selector_loop
        for fd in muted:
            selector_loop.remove_reader(fd)
            if fd in loop.readers:
                # Stock re-added it meanwhile onto the key left registered,
                # without epoll_ctl; the number may now be another file's,
                # which the kernel has never seen.  Register it afresh.
                selector_loop.add_reader(fd, loop._handle_events, fd, read)

    asyncio_loop = loop.asyncio_loop
    here = asyncio._get_running_loop() is asyncio_loop
    if here or not asyncio_loop.is_running():
        unmute()
    else:
        asyncio_loop.call_soon_threadsafe(unmute)


Replacement = Callable[..., None]


def registering(
    stock_add: Any,
    stock_update: Any,
    read: int,
    reads_of: Callable[[Any], Reads | None],
) -> tuple[Replacement, Replacement]:
    """``add_handler`` and ``update_handler``: mute a drop, unmute a return."""
    muted_count = READ_INTEREST.muted.increment
    resumed_count = READ_INTEREST.resumed.increment

    def add_handler(self: Any, fd: Any, handler: Any, events: int) -> None:
        reads: Reads | None = reads_of(self)
        if reads is None:
            stock_add(self, fd, handler, events)
            return
        number, _ = self.split_fd(fd)
        if number in self.handlers:
            stock_add(self, fd, handler, events)  # raises: added twice
            return
        if number in reads.muted:
            # A muted fd closed and reused without remove_handler: the stale
            # registration goes first, as stock had dropped it.
            reads.muted.discard(number)
            self.selector_loop.remove_reader(number)
        reads.ours.discard(number)
        stock_add(self, fd, handler, events)
        if number in self.readers:
            reads.ours.add(number)

    def update_handler(self: Any, fd: Any, events: int) -> None:
        reads: Reads | None = reads_of(self)
        if reads is None:
            stock_update(self, fd, events)
            return
        number, _ = self.split_fd(fd)
        readers = self.readers
        if events & read:
            if number in reads.muted:
                # Stock's add_reader, on a key whose mask already has READ: no
                # epoll_ctl, but a fresh handle.  The muted one is cancelled,
                # so a READ the last poll queued for it is not delivered this
                # iteration, where stock (no reader at that poll) sees it in
                # the next one.
                reads.muted.discard(number)
                resumed_count()
            elif number not in readers:
                stock_update(self, fd, events)
                if number in readers:
                    reads.ours.add(number)
                return
        elif number in readers and number in reads.ours:
            readers.remove(number)
            reads.muted.add(number)
            muted_count()
        stock_update(self, fd, events)

    return add_handler, update_handler


def removing(
    stock_remove: Any, stock_handle: Any, read: int
) -> tuple[Replacement, Replacement]:
    """``remove_handler`` and ``_handle_events``: a muted reader goes for real."""
    dropped_count = READ_INTEREST.dropped.increment

    def remove_handler(self: Any, fd: Any) -> None:
        reads: Reads | None = getattr(self, "_fastloop_reads", None)
        if reads is not None:
            number, _ = self.split_fd(fd)
            reads.ours.discard(number)
            if number in reads.muted:
                reads.muted.discard(number)
                self.selector_loop.remove_reader(number)
        stock_remove(self, fd)

    def handle_events(self: Any, fd: int, events: int) -> None:
        reads: Reads | None = getattr(self, "_fastloop_reads", None)
        if reads is not None and events & read and fd in reads.muted:
            # Readable while muted: stock had no reader here; remove it now.
            reads.muted.discard(fd)
            reads.ours.discard(fd)
            self.selector_loop.remove_reader(fd)
            dropped_count()
            return
        stock_handle(self, fd, events)

    return remove_handler, handle_events


def apply(module: ModuleType) -> list[Change]:
    cls = module.BaseAsyncIOLoop
    read = module.IOLoop.READ
    stock = {
        name: cls.__dict__[name]
        for name in (
            "add_handler",
            "update_handler",
            "remove_handler",
            "_handle_events",
        )
    }
    # The marks are taken off by unmute_all itself, on the loop's thread.
    loops = PerObject(detach=functools.partial(unmute_all, read=read))

    def reads_of(loop: Any) -> Reads | None:
        try:
            reads: Reads | None = loop._fastloop_reads
        except AttributeError:
            reads = None if declined(loop) else Reads()
            if not loops.put(loop, _fastloop_reads=reads):
                return None  # uninstalled meanwhile: stock
        return reads

    replacements = (
        *registering(stock["add_handler"], stock["update_handler"], read, reads_of),
        *removing(stock["remove_handler"], stock["_handle_events"], read),
    )
    changes: list[Change] = [loops]
    for (name, original), replacement in zip(stock.items(), replacements, strict=True):
        functools.update_wrapper(replacement, original)
        changes.append(Swap(cls, name, replacement))
    return changes


PATCH = Patch(
    name="read_interest",
    target="tornado.platform.asyncio",
    summary="IOLoop: read interest dropped between messages stays registered, "
    "muted, unless the fd is reported readable meanwhile",
    replaces=(
        "`tornado.platform.asyncio.BaseAsyncIOLoop.add_handler`, "
        "`update_handler`, `remove_handler` and `_handle_events`"
    ),
    relies_on=(
        "the names each of those four uses (`split_fd`, `handlers`, `readers`, "
        "`selector_loop`, `add_reader`, `remove_reader`, `_handle_events`); "
        "`asyncio`'s `add_reader`/`remove_reader` on the loop's selector loop; "
        "a GIL"
    ),
    verifies=(
        "tornado.platform.asyncio:BaseAsyncIOLoop.add_handler",
        "tornado.platform.asyncio:BaseAsyncIOLoop.update_handler",
        "tornado.platform.asyncio:BaseAsyncIOLoop.remove_handler",
        "tornado.platform.asyncio:BaseAsyncIOLoop._handle_events",
        "asyncio.selector_events:BaseSelectorEventLoop.add_reader",
        "asyncio.selector_events:BaseSelectorEventLoop.remove_reader",
        "asyncio.selector_events:BaseSelectorEventLoop._add_reader",
        "asyncio.selector_events:BaseSelectorEventLoop._remove_reader",
    ),
    check=check,
    apply=apply,
    check_loop=check_loop,
)
