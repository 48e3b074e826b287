"""A stream write's done-callback only while the write is pending.

Stock ``BaseIOStream.write`` gives each write's future a done-callback,
``lambda f: f.exception()``, so that a write failed by a close nobody awaits
logs no "exception was never retrieved".  Most writes of small messages
finish inside ``write`` itself (``_handle_write`` sends them at once), and
an asyncio future that completes with a callback schedules it: one handle
per write, run by the loop's next iteration to do nothing.

While installed, ``write`` is stock's with that callback added at its end,
and only while the future is still pending; a future already done is
marked retrieved there and then (``exception()``), as the callback would
have done an iteration later.  No other callback can be on the future
before ``write`` returns it, so the callbacks a caller adds run in the
order and the context stock gives them.  If ``_handle_write`` raises, the
callback is still added (``finally``).
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from fastloop.patches import Patch, changed_method, needs_gil
from fastloop.patches.changes import Change, Swap
from fastloop.telemetry.live import counters

WRITE_CALLBACK = counters("WriteCallbackStats")

#: What stock ``write`` must still do, by the names its code uses.
NEEDS = {
    "write": {
        "_check_closed",
        "cast",
        "max_write_buffer_size",
        "_write_buffer",
        "StreamBufferFullError",
        "_total_write_index",
        "Future",
        "add_done_callback",
        "_write_futures",
        "_connecting",
        "_handle_write",
        "_add_io_state",
        "io_loop",
        "WRITE",
        "_maybe_add_error_listener",
    }
}


def check(module: ModuleType) -> str | None:
    no_gil = needs_gil("the skip count is a lock-free itertools counter")
    if no_gil is not None:
        return no_gil
    cls = getattr(module, "BaseIOStream", None)
    if cls is None:
        return "tornado.iostream.BaseIOStream is missing"
    if changed_method(cls, NEEDS) is not None:
        return "BaseIOStream.write changed"
    callbacks = [
        const.co_names
        for const in cls.write.__code__.co_consts
        if hasattr(const, "co_names")
    ]
    if callbacks != [("exception",)]:
        return "BaseIOStream.write's done-callback changed"
    return None


def retrieve(future: Any) -> None:
    """Stock's callback: mark a failed write's error retrieved."""
    future.exception()


def apply(module: ModuleType) -> list[Change]:
    cls = module.BaseIOStream
    stock = cls.__dict__["write"]
    future_class = module.Future
    buffer_full = module.StreamBufferFullError
    skipped_count = WRITE_CALLBACK.skipped.increment

    def write(self: Any, data: bytes | memoryview) -> Any:
        self._check_closed()
        if data:
            if isinstance(data, memoryview):
                # Make sure that ``len(data) == data.nbytes``
                data = data.cast("B")
            if (
                self.max_write_buffer_size is not None
                and len(self._write_buffer) + len(data) > self.max_write_buffer_size
            ):
                raise buffer_full("Reached maximum write buffer size")
            self._write_buffer.append(data)
            self._total_write_index += len(data)
        future = future_class()
        self._write_futures.append((self._total_write_index, future))
        try:
            if not self._connecting:
                self._handle_write()
                if self._write_buffer:
                    self._add_io_state(self.io_loop.WRITE)
                self._maybe_add_error_listener()
        finally:
            if not future.done():
                future.add_done_callback(retrieve)
            else:
                future.exception()
                skipped_count()
        return future

    functools.update_wrapper(write, stock)
    return [Swap(cls, "write", write)]


PATCH = Patch(
    name="write_callback",
    target="tornado.iostream",
    summary="tornado.iostream write: the done-callback only while the write "
    "is pending, not one handle per write",
    replaces=("`tornado.iostream.BaseIOStream.write`"),
    relies_on=(
        "the names `write` uses (`_check_closed`, `max_write_buffer_size`, "
        "`_write_buffer`, `_total_write_index`, `Future`, ...) and its one "
        "done-callback, which retrieves the exception; a GIL"
    ),
    verifies=(
        "tornado.iostream:BaseIOStream.write",
        "tornado.iostream:BaseIOStream._handle_write",
    ),
    check=check,
    apply=apply,
)
