"""write_callback: write futures behave as stock's, with no handle for a finished write.

Each scenario runs under stock and patched Tornado (``differential``) and
returns what a caller can observe: results, the order and context of the
callbacks a caller adds, exceptions, and asyncio's log ("exception was
never retrieved" among others).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import os
import socket

from tornado.iostream import IOStream, PipeIOStream, StreamClosedError

import fastloop
from tests_support import Records, differential

PATCH = ["write_callback"]
WHO = contextvars.ContextVar("who", default="nobody")


def skipped() -> int:
    return fastloop.stats().write_callback.skipped


def observed(main):
    """``main()``'s result, asyncio's log lines, and the writes skipped meanwhile."""
    before = skipped()
    with Records("asyncio", "tornado.application", "tornado.general") as records:
        result = asyncio.run(main())
        gc.collect()  # a future whose error nobody retrieved logs when collected
    return result, [row[:3] for row in records.rows], skipped() - before


def test_small_writes_finish_at_once_and_callbacks_run_as_stock():
    async def main():
        a, b = socket.socketpair()
        left, right = IOStream(a), IOStream(b)
        order = []
        for i in range(5):
            WHO.set(f"caller {i}")
            future = left.write(b"m%d" % i)
            future.add_done_callback(lambda f, i=i: order.append((i, WHO.get())))
        await left.write(b"")  # the empty write resolves after the others
        got = await right.read_bytes(10)
        await asyncio.sleep(0)
        left.close()
        right.close()
        return got, order

    stock, patched = differential(lambda: observed(main), PATCH)
    assert stock[:2] == patched[:2]
    (got, order), logged, _ = patched
    assert got == b"m0m1m2m3m4"
    assert order == [(i, f"caller {i}") for i in range(5)]
    assert logged == []
    assert stock[2] == 0
    assert patched[2] == 6


def test_a_pending_write_failed_by_a_close_logs_nothing_as_stock():
    async def main():
        a, b = socket.socketpair()
        left = IOStream(a)
        left.write(b"x" * 10_000_000)  # outgrows the socket buffer: pending
        pending = left._write_futures[-1][1]
        callbacks = len(pending._callbacks)
        b.close()
        left.close()
        await asyncio.sleep(0)
        return callbacks, type(pending.exception()).__name__

    stock, patched = differential(lambda: observed(main), PATCH)
    assert stock[:2] == patched[:2] == ((1, StreamClosedError.__name__), [])
    assert patched[2] == 0


def test_unawaited_failed_writes_log_nothing_as_stock():
    async def main():
        read_fd, write_fd = os.pipe()
        writer = PipeIOStream(write_fd)
        os.close(read_fd)  # the write fails inside write()
        writer.write(b"lost")
        await asyncio.sleep(0)
        closed = writer.closed()
        writer.close()
        return closed, type(writer.error).__name__

    stock, patched = differential(lambda: observed(main), PATCH)
    assert stock[:2] == patched[:2]
    assert patched[0] == (True, "BrokenPipeError")
    assert patched[1] == []  # no "exception was never retrieved"
    assert patched[2] == 1


def test_a_write_whose_send_raises_still_gets_the_callback():
    class Failing(Exception):
        pass

    async def main():
        a, b = socket.socketpair()
        left = IOStream(a)

        def failing_handle_write():
            raise Failing

        left._handle_write = failing_handle_write
        with contextlib.suppress(Failing):
            left.write(b"x")
        future = left._write_futures[-1][1]
        callbacks = len(future._callbacks)
        left.close()
        b.close()
        await asyncio.sleep(0)
        return callbacks, type(future.exception()).__name__

    stock, patched = differential(lambda: observed(main), PATCH)
    assert stock[:2] == patched[:2] == ((1, StreamClosedError.__name__), [])
