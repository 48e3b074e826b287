"""read_buffer: what streams read is stock's; only Tornado's own readers reuse a buffer.

Each scenario runs under stock and patched Tornado (``differential``) and
returns what a caller can observe: the bytes read, the exceptions and the
stream's ``error``, the log lines, and how many reads the kept buffer
served (always 0 under stock).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct

import pytest
from tornado.iostream import IOStream, PipeIOStream, StreamBufferFullError

import fastloop
from fastloop.patches.read_buffer import KEPT_AT_MOST
from tests_support import Records, differential, stream_pair

PATCH = ["read_buffer"]
BODIES = [b"a" * 10, os.urandom(3000), b"", os.urandom(200_000), b"q"]


def reused() -> int:
    return fastloop.stats().read_buffer.reused


def frame(body: bytes) -> bytes:
    return struct.pack("!I", len(body)) + body


async def read_frames(stream, count: int) -> list[bytes]:
    frames = []
    for _ in range(count):
        (size,) = struct.unpack("!I", await stream.read_bytes(4))
        frames.append(await stream.read_bytes(size) if size else b"")
    return frames


def run(main):
    """``main()``'s result, and the reads the kept buffer served meanwhile."""
    before = reused()
    result = asyncio.run(main())
    return result, reused() - before


def socketpair_exchange(**stream_options):
    async def main():
        a, b = socket.socketpair()
        left, right = IOStream(a, **stream_options), IOStream(b, **stream_options)
        # Not awaited before reading: the big body outgrows the socket's buffer.
        writes = [left.write(frame(body)) for body in BODIES]
        got = await read_frames(right, len(BODIES))
        await asyncio.gather(*writes)
        left.close()
        tail = await right.read_until_close()
        right.close()
        return got, tail

    return run(main)


def test_socket_streams_read_stock_bytes_through_one_buffer():
    stock, patched = differential(socketpair_exchange, PATCH)
    assert stock[0] == patched[0] == (BODIES, b"")
    assert stock[1] == 0
    assert patched[1] > 0  # every read but the thread's first


def test_a_small_chunk_size_is_kept_and_a_huge_one_is_not():
    small, patched_small = differential(
        lambda: socketpair_exchange(read_chunk_size=512), PATCH
    )
    assert small[0] == patched_small[0] == (BODIES, b"")
    assert patched_small[1] > 0
    big = KEPT_AT_MOST * 2
    options = {"read_chunk_size": big, "max_buffer_size": big * 4}
    stock_big, patched_big = differential(lambda: socketpair_exchange(**options), PATCH)
    assert stock_big[0] == patched_big[0] == (BODIES, b"")
    assert patched_big[1] == 0  # allocated per read, as stock


def test_tls_streams(tls):
    server_context, client_context = tls

    async def main():
        client, server_side, server = await stream_pair(server_context, client_context)
        writes = [client.write(frame(body)) for body in BODIES]
        got = await read_frames(server_side, len(BODIES))
        await asyncio.gather(*writes)
        client.close()
        server_side.close()
        server.stop()
        return got

    stock, patched = differential(lambda: run(main), PATCH)
    assert stock[0] == patched[0] == BODIES
    assert patched[1] > 0


def test_pipes():
    async def main():
        read_fd, write_fd = os.pipe()
        reader, writer = PipeIOStream(read_fd), PipeIOStream(write_fd)
        writes = [writer.write(frame(body)) for body in BODIES]
        got = await read_frames(reader, len(BODIES))
        await asyncio.gather(*writes)
        writer.close()
        tail = await reader.read_until_close()
        reader.close()
        return got, tail

    stock, patched = differential(lambda: run(main), PATCH)
    assert stock[0] == patched[0] == (BODIES, b"")
    assert patched[1] > 0


def test_read_into_a_callers_buffer_is_stock():
    async def main():
        a, b = socket.socketpair()
        left, right = IOStream(a), IOStream(b)
        payload = os.urandom(100_000)
        written = left.write(payload)
        target = bytearray(len(payload))
        count = await right.read_into(target)
        await written
        left.close()
        right.close()
        return count, bytes(target) == payload

    stock, patched = differential(lambda: run(main), PATCH)
    assert stock == patched == ((100_000, True), 0)


class KeepingStream(IOStream):
    """A reader that keeps what it was handed: the kept buffer must not be it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.handed: list[bytearray | memoryview] = []

    def read_from_fd(self, buf):
        self.handed.append(buf)
        return super().read_from_fd(buf)


class CustomSocket(socket.socket):
    """A socket whose recv_into is the application's code."""


@pytest.mark.parametrize("kind", ["stream subclass", "socket subclass"])
def test_streams_that_may_keep_the_buffer_read_as_stock(kind):
    async def main():
        if kind == "stream subclass":
            a, b = socket.socketpair()
            left, right = IOStream(a), KeepingStream(b)
        else:
            a, b = socket.socketpair()
            b = CustomSocket(fileno=b.detach())
            left, right = IOStream(a), IOStream(b)
        writes = [left.write(frame(body)) for body in BODIES]
        got = await read_frames(right, len(BODIES))
        await asyncio.gather(*writes)
        handed = getattr(right, "handed", [])
        distinct = len({id(buf) for buf in handed}) == len(handed)
        left.close()
        right.close()
        return got, distinct

    stock, patched = differential(lambda: run(main), PATCH)
    assert stock == patched == ((BODIES, True), 0)


def test_a_read_nested_in_a_read_gets_a_buffer_of_its_own():
    """A finalizer or signal handler reading a stream amid another read."""

    class NestingFile:
        def __init__(self, fio, nested) -> None:
            self.fio, self.nested, self.seen = fio, nested, []

        def readinto(self, buf):
            count = self.fio.readinto(buf)
            if self.nested is not None:
                inner, self.nested = self.nested, None
                inner._read_to_buffer()  # reads b"inner" amid the outer read
            return count

        def __getattr__(self, name):
            return getattr(self.fio, name)

    async def main():
        outer_r, outer_w = os.pipe()
        inner_r, inner_w = os.pipe()
        outer, inner = PipeIOStream(outer_r), PipeIOStream(inner_r)
        os.write(inner_w, b"inner")
        os.write(outer_w, b"outer")
        outer._fio = NestingFile(outer._fio, inner)
        await outer.read_bytes(0)  # a first read: the thread now keeps a buffer
        got = await outer.read_bytes(5), await inner.read_bytes(5)
        for fd in (outer_w, inner_w):
            os.close(fd)
        outer.close()
        inner.close()
        return got

    stock, patched = differential(lambda: run(main)[0], PATCH)
    assert stock == patched == (b"outer", b"inner")


def test_overflow_closes_and_raises_as_stock():
    def scenario():
        async def main():
            a, b = socket.socketpair()
            left = IOStream(a)
            right = IOStream(b, max_buffer_size=1000, read_chunk_size=400)
            left.write(b"x" * 5000)
            try:
                await right.read_until(b"\n")  # never comes: the buffer overflows
            except Exception as exc:
                raised = type(exc).__name__
            left.close()
            return raised, type(right.error).__name__, right.closed()

        with Records("tornado.general") as records:
            outcome = asyncio.run(main())
        return outcome, [row[:3] for row in records.rows]

    stock, patched = differential(scenario, PATCH)
    assert stock == patched
    (raised, _, closed), logged = patched
    assert raised in {StreamBufferFullError.__name__, "StreamClosedError"}
    assert closed
    assert ("tornado.general", "ERROR", "Reached maximum read buffer size") in logged


def test_peer_reset_closes_as_stock():
    async def main():
        a, b = socket.socketpair()
        left, right = IOStream(a), IOStream(b)
        await left.write(b"hello")
        assert await right.read_bytes(5) == b"hello"
        a.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        left.close()
        try:
            await right.read_bytes(1)
        except Exception as exc:
            raised = type(exc).__name__
        right.close()
        return raised, right.closed()

    stock, patched = differential(lambda: run(main)[0], PATCH)
    assert stock == patched == ("StreamClosedError", True)


def error_traceback_holds_a_buffer():
    """A failed read's error, kept by the stream: does its traceback still
    reach the buffer another stream reads into next?"""

    async def main():
        lonely = IOStream(socket.socket())  # never connected: recv fails
        with contextlib.suppress(OSError):
            lonely._read_to_buffer()
        error = lonely.error
        a, b = socket.socketpair()
        other = IOStream(a)
        b.send(b"another connection's bytes")
        await other.read_bytes(6, partial=True)
        other.close()
        b.close()
        frames = []
        traceback = error.__traceback__
        while traceback is not None:
            frames.append(traceback.tb_frame.f_locals.get("buf"))
            traceback = traceback.tb_next
        return type(error).__name__, [f for f in frames if f is not None]

    return asyncio.run(main())


def test_a_failed_reads_traceback_does_not_reach_the_kept_buffer():
    stock, patched = differential(error_traceback_holds_a_buffer, PATCH)
    assert stock == patched == ("OSError", [])
