"""One read buffer per thread for tornado's streams, instead of a fresh one per read.

Stock ``BaseIOStream._read_to_buffer`` makes ``bytearray(read_chunk_size)``
(64 KiB, zeroed) for every ``read_from_fd`` call, copies the bytes read into
the stream's ``_read_buffer`` and drops it: the fresh buffer only carries
one ``recv`` to that copy.  While installed, the same read uses a buffer
kept by the thread, so a small message costs its copy, not an allocation
and 64 KiB of zeroes.

That is safe only where nothing keeps the buffer past the read.  Tornado's
own ``read_from_fd`` methods (``IOStream``, ``SSLIOStream``,
``PipeIOStream``) hand it to ``recv_into`` or ``readinto`` and drop it, so
a stream reuses the kept buffer only when its class inherits one of them
unchanged and, for a socket stream, its socket is exactly a
``socket.socket`` or ``ssl.SSLSocket`` (an application's socket class may
override ``recv_into``).  Every other stream, and every read into a user's
buffer (``read_into``), runs stock's code.

The buffer is the thread's, not the loop's: a loop runs on one thread, and
a stream read from another thread (which Tornado forbids, and stock
survives) still gets one of its own.  It is lent for the read: a read
nested in it (a finalizer or signal handler reading a stream) finds none
and allocates, as stock does.  The bytes a buffer holds beyond the last
read are never looked at: only ``[:bytes_read]`` is copied.  A thread keeps
one buffer, of the last chunk size it read with, up to ``KEPT_AT_MOST``.

What differs from stock: each thread that reads streams holds its buffer
between reads (stock's lives for one read).  The code after the copy, a
read buffer over ``max_buffer_size``, is stock's for the Tornado version:
``check()`` tells the two shapes apart and declines any other.
"""

from __future__ import annotations

import functools
import socket
import ssl
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from fastloop.patches import Patch, changed_method, needs_gil
from fastloop.patches.changes import Change, Swap
from fastloop.telemetry.live import counters

READ_BUFFER = counters("ReadBufferStats")

#: Chunk sizes above this read into a fresh buffer, as stock: a thread should
#: not pin a large chunk size's memory that stock only borrows.  Tornado's
#: default ``read_chunk_size`` is 64 KiB.
KEPT_AT_MOST = 1 << 20

#: What stock ``_read_to_buffer`` must still do, by the names its code uses.
NEEDS = {
    "_read_to_buffer": {
        "_user_read_buffer",
        "bytearray",
        "read_chunk_size",
        "read_from_fd",
        "_is_connreset",
        "close",
        "_read_buffer",
        "_read_buffer_size",
        "max_buffer_size",
        "gen_log",
        "StreamBufferFullError",
    }
}
#: Tornado 6.5 closes an overflowing stream with the error it raises; earlier
#: versions close it without one.  The local that tells the two apart:
OVERFLOW_ERROR_LOCAL = "buffer_full_error"
OVERFLOW_MESSAGE = "Reached maximum read buffer size"

#: The classes whose ``read_from_fd`` drops its buffer, and what it reads with.
READERS = {"IOStream": "socket", "SSLIOStream": "socket", "PipeIOStream": "pipe"}
SOCKETS = (socket.socket, ssl.SSLSocket)


def check(module: ModuleType) -> str | None:
    no_gil = needs_gil("the reuse count is a lock-free itertools counter")
    if no_gil is not None:
        return no_gil
    cls = getattr(module, "BaseIOStream", None)
    if cls is None:
        return "tornado.iostream.BaseIOStream is missing"
    if changed_method(cls, NEEDS) is not None:
        return "BaseIOStream._read_to_buffer changed"
    if OVERFLOW_MESSAGE not in cls._read_to_buffer.__code__.co_consts:
        return "BaseIOStream._read_to_buffer's overflow changed"
    for name in READERS:
        reader = getattr(getattr(module, name, None), "__dict__", {}).get(
            "read_from_fd"
        )
        if getattr(reader, "__code__", None) is None:
            return f"tornado.iostream.{name}.read_from_fd is missing"
    return None


def overflow(module: ModuleType, stock: Any) -> Callable[[Any], None]:
    """Stock's handling of a read buffer grown past ``max_buffer_size``."""
    gen_log = module.gen_log
    error_class = module.StreamBufferFullError
    with_error = OVERFLOW_ERROR_LOCAL in stock.__code__.co_varnames

    def overflowed(stream: Any) -> None:
        gen_log.error(OVERFLOW_MESSAGE)
        error = error_class(OVERFLOW_MESSAGE)
        if with_error:
            stream.close(exc_info=error)
        else:
            stream.close()
        raise error

    return overflowed


def reusable_streams(module: ModuleType) -> Callable[[Any], bool]:
    """Does this stream's read drop its buffer (``read_from_fd`` is Tornado's)?"""
    kinds = {
        getattr(module, name).__dict__["read_from_fd"]: kind
        for name, kind in READERS.items()
    }
    by_class: dict[type, str | None] = {}

    def reusable(stream: Any) -> bool:
        cls = type(stream)
        try:
            kind = by_class[cls]
        except KeyError:
            kind = by_class.setdefault(cls, kinds.get(cls.read_from_fd))
        if kind == "socket":
            return type(stream.socket) in SOCKETS
        return kind is not None

    return reusable


def apply(module: ModuleType) -> list[Change]:
    cls = module.BaseIOStream
    stock = cls.__dict__["_read_to_buffer"]
    overflowed = overflow(module, stock)
    reusable = reusable_streams(module)
    kept = threading.local()
    reused_count = READ_BUFFER.reused.increment

    def _read_to_buffer(self: Any) -> int | None:
        if self._user_read_buffer or not reusable(self):
            return stock(self)  # type: ignore[no-any-return]
        size = self.read_chunk_size
        # Lent for this read: a read nested in it finds none and allocates.
        buf: bytearray | None = kept.__dict__.pop("buffer", None)
        if buf is None or len(buf) != size:
            buf = bytearray(size)
        else:
            reused_count()
        try:
            try:
                bytes_read = self.read_from_fd(buf)
            except OSError as e:
                # ssl.SSLError is a subclass of OSError
                if self._is_connreset(e):
                    self.close(exc_info=e)
                    return None
                self.close(exc_info=e)
                raise
            if bytes_read is None:
                return 0
            if bytes_read == 0:
                self.close()
                return 0
            with memoryview(buf) as whole, whole[:bytes_read] as view:
                self._read_buffer += view
            self._read_buffer_size += bytes_read
        finally:
            if size <= KEPT_AT_MOST:
                kept.buffer = buf
            # As stock's ``del buf``: a traceback kept with the stream's error
            # must not reach the buffer, which the next read lends elsewhere.
            buf = None
        if self._read_buffer_size > self.max_buffer_size:
            overflowed(self)
        return bytes_read  # type: ignore[no-any-return]

    functools.update_wrapper(_read_to_buffer, stock)
    return [Swap(cls, "_read_to_buffer", _read_to_buffer)]


PATCH = Patch(
    name="read_buffer",
    target="tornado.iostream",
    summary="tornado.iostream: reads into one buffer kept per thread, "
    "not a fresh zeroed 64 KiB each",
    replaces=("`tornado.iostream.BaseIOStream._read_to_buffer`"),
    relies_on=(
        "the names `_read_to_buffer` uses (`_user_read_buffer`, "
        "`read_chunk_size`, `read_from_fd`, `_is_connreset`, `_read_buffer`, "
        "...) and its overflow message; `read_from_fd` of `IOStream`, "
        "`SSLIOStream` and `PipeIOStream` being Tornado's own (a subclass that "
        "overrides it reads into a fresh buffer, as stock); a GIL"
    ),
    verifies=(
        "tornado.iostream:BaseIOStream._read_to_buffer",
        "tornado.iostream:IOStream.read_from_fd",
        "tornado.iostream:SSLIOStream.read_from_fd",
        "tornado.iostream:PipeIOStream.read_from_fd",
    ),
    check=check,
    apply=apply,
)
