"""read_interest: what streams read and see is stock's, with fewer selector calls.

Each scenario runs under stock and patched Tornado (``differential``) and
returns what a caller can observe: the bytes read, the exceptions raised,
``IOLoop.readers`` and ``handlers``, and the selector's registration once
it must be stock's again (after a close, or after the fd was readable while
muted).  While an fd is muted the selector holds it by design; nothing
else may differ.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import socket
import struct
import threading

import pytest
from tornado.iostream import IOStream, PipeIOStream, StreamClosedError

import fastloop
from tests_support import differential, stream_pair

PATCH = ["read_interest"]
BODIES = [b"a" * 10, os.urandom(3000), b"", b"z" * 70_000, b"q"]


def frame(body: bytes) -> bytes:
    return struct.pack("!I", len(body)) + body


async def read_frame(stream) -> bytes:
    (size,) = struct.unpack("!I", await stream.read_bytes(4))
    return await stream.read_bytes(size) if size else b""


def fd_of(stream) -> int:
    return stream.io_loop.split_fd(stream.fileno())[0]


def registration(stream, fd: int) -> tuple[bool, bool, int | None]:
    """(in readers, in handlers, the selector's event mask or None)."""
    loop = stream.io_loop
    selector = getattr(loop.asyncio_loop, "_selector", None)
    try:
        mask = selector.get_key(fd).events if selector is not None else None
    except KeyError:
        mask = None
    return fd in loop.readers, fd in loop.handlers, mask


class SelectorCalls:
    """Counts epoll registrations and removals (asyncio's selector loops)."""

    def __init__(self, monkeypatch) -> None:
        self.calls = {"register": 0, "unregister": 0}
        for name in self.calls:
            stock = getattr(selectors.EpollSelector, name)

            def counting(selector, *args, _stock=stock, _name=name):
                self.calls[_name] += 1
                return _stock(selector, *args)

            monkeypatch.setattr(selectors.EpollSelector, name, counting)

    def take(self) -> dict[str, int]:
        taken, self.calls = self.calls, dict.fromkeys(self.calls, 0)
        return taken


def socket_streams(close_callback: bool):
    a, b = socket.socketpair()
    left, right = IOStream(a), IOStream(b)
    if close_callback:  # as distributed sets one: idle streams listen for close
        left.set_close_callback(lambda: None)
        right.set_close_callback(lambda: None)
    return left, right


async def echo(stream, count: int) -> None:
    for _ in range(count):
        body = await read_frame(stream)
        await stream.write(frame(body[::-1]))


def exchange(close_callback: bool, calls: SelectorCalls | None = None):
    """Framed messages to an echo and back, each read waiting for its data
    (a request's header and body come in one write, as distributed's)."""

    async def main():
        left, right = socket_streams(close_callback)
        echoing = asyncio.ensure_future(echo(right, len(BODIES)))
        got = []
        for body in BODIES:
            replied = asyncio.ensure_future(read_frame(left))
            await asyncio.sleep(0)  # both reads wait before any data comes
            await left.write(frame(body))
            got.append(await replied)
        await echoing
        left.close()
        right.close()
        await asyncio.sleep(0)
        return got

    fastloop.reset_stats()
    if calls is not None:
        calls.take()
    got = asyncio.run(main())
    return got, calls.take() if calls else None, fastloop.stats().read_interest


@pytest.mark.parametrize("close_callback", [False, True])
def test_messages_are_stock_with_fewer_selector_calls(monkeypatch, close_callback):
    calls = SelectorCalls(monkeypatch)
    stock, patched = differential(lambda: exchange(close_callback, calls), PATCH)
    assert stock[0] == patched[0] == [body[::-1] for body in BODIES]
    counted = patched[2]
    assert counted.resumed > 0
    assert counted.muted >= counted.resumed + counted.dropped
    saved = stock[1]["unregister"] - patched[1]["unregister"]
    assert saved == stock[1]["register"] - patched[1]["register"]
    assert saved == counted.resumed  # each resumption is one pair not made
    assert stock[2].muted == 0  # nothing counted while not installed


async def header_then_buffered_body(left, right) -> bytes:
    """The right stream reads a header that arrives with its body: the body
    stays buffered, and read interest is dropped (muted, when patched)."""
    header = asyncio.ensure_future(right.read_bytes(4))
    await asyncio.sleep(0)  # the read waits: READ registered
    await left.write(frame(b"x" * 100))
    return await header


def muted_then(action: str):
    """The right stream muted (a header read, its body buffered), then ``action``."""

    async def main():
        left, right = socket_streams(close_callback=True)
        header = await header_then_buffered_body(left, right)
        for _ in range(3):
            await asyncio.sleep(0)
        fd = fd_of(right)
        before = (right._read_buffer_size, fd in right.io_loop.readers)
        outcome: list[object] = [header, before]
        if action == "peer keeps writing":  # back-pressure: stock stops reading
            left.write(b"y" * 200_000)
            for _ in range(20):
                await asyncio.sleep(0.001)
            outcome += [right._read_buffer_size, registration(right, fd)]
            outcome.append(await right.read_bytes(100))
            outcome.append(len(await right.read_bytes(200_000)))
        elif action == "peer half-closes":
            left.socket.shutdown(socket.SHUT_WR)
            await asyncio.sleep(0.01)
            outcome.append(await right.read_until_close())
            outcome.append(right.closed())
        elif action == "peer closes":
            left.close()
            await asyncio.sleep(0.01)
            outcome.append(await right.read_bytes(100))
            try:
                await right.read_bytes(1)
            except StreamClosedError as exc:
                outcome.append(type(exc).__name__)
        elif action == "stream closes":
            right.close()
            await asyncio.sleep(0)
            outcome.append(registration(right, fd))
        elif action == "owner closes the fd":
            # Closed under the stream, without remove_handler; the fd number
            # is then reused by a new stream, which must work as on stock.
            right.socket.close()
            a, b = socket.socketpair()
            reused = a.fileno() == fd or b.fileno() == fd
            right.io_loop.remove_handler(fd)  # what Tornado needs to reuse it
            first, second = IOStream(a), IOStream(b)
            await first.write(frame(b"again"))
            outcome += [reused, await read_frame(second)]
            outcome.append(registration(second, fd_of(second))[:2])
            first.close()
            second.close()
        left.close()
        right.close()
        return outcome

    return asyncio.run(main())


@pytest.mark.parametrize(
    "action",
    [
        "peer keeps writing",
        "peer half-closes",
        "peer closes",
        "stream closes",
        "owner closes the fd",
    ],
)
def test_muted_streams_behave_as_stock(action):
    fastloop.reset_stats()
    stock, patched = differential(lambda: muted_then(action), PATCH)
    assert fastloop.stats().read_interest.muted >= 1  # the patched run muted
    assert stock == patched
    assert stock[1] == (100, False)  # muted: the body buffered, no read interest


def test_back_pressure_removes_the_reader_when_data_arrives():
    fastloop.reset_stats()
    with fastloop.patched(PATCH):
        outcome = muted_then("peer keeps writing")
    buffered, (reading, handled, mask) = outcome[2], outcome[3]
    assert buffered == 100  # nothing more was read while not reading
    assert (reading, handled) == (False, True)
    assert mask is None or not mask & selectors.EVENT_READ  # removed for real
    assert fastloop.stats().read_interest.dropped == 1


def test_tls_streams(tls):
    server_context, client_context = tls

    def scenario():
        async def main():
            client, server_side, server = await stream_pair(
                server_context, client_context
            )
            server_side.set_close_callback(lambda: None)
            got = []
            for body in BODIES:
                await client.write(frame(body))
                got.append(await read_frame(server_side))
            client.close()
            server_side.close()
            server.stop()
            return got

        return asyncio.run(main())

    stock, patched = differential(scenario, PATCH)
    assert stock == patched == BODIES


def test_pipes():
    def scenario():
        async def main():
            reader_fd, writer_fd = os.pipe()
            reader, writer = PipeIOStream(reader_fd), PipeIOStream(writer_fd)
            reader.set_close_callback(lambda: None)
            got = []
            for body in BODIES[:3]:
                await writer.write(frame(body))
                got.append(await read_frame(reader))
            writer.close()
            got.append(await reader.read_until_close())
            reader.close()
            return got

        return asyncio.run(main())

    stock, patched = differential(scenario, PATCH)
    assert stock == patched == [*BODIES[:3], b""]


def test_uvloop_streams_keep_stock_drops():
    """uvloop runs a reader's handle from inside its poll: a fresh handle
    could not hold back a readiness polled while muted, so nothing is muted."""
    uvloop = pytest.importorskip("uvloop")
    fastloop.reset_stats()
    runs = differential(lambda: uvloop.run(_uvloop_main()), PATCH)
    assert runs[0] == runs[1]
    assert runs[0][0] == [part for body in BODIES for part in (body, body)]
    assert fastloop.stats().read_interest.muted == 0
    declined = {name for name, _ in fastloop.patches.registry.loop_declines()}
    assert "read_interest" in declined


async def _uvloop_main():
    left, right = socket_streams(close_callback=True)
    got = []
    for body in BODIES:
        await left.write(frame(body))
        got.append(await read_frame(right))
        await right.write(frame(body))
        got.append(await read_frame(left))
    fd = fd_of(right)
    right.close()
    left.close()
    return got, registration(right, fd)


def test_uninstall_while_muted_leaves_stock_state():
    async def main():
        with fastloop.patched(PATCH):
            left, right = socket_streams(close_callback=True)
            await header_then_buffered_body(left, right)
            await asyncio.sleep(0)
            loop = right.io_loop
            muted = set(loop._fastloop_reads.muted)
        fd = fd_of(right)
        state = (muted == {fd}, hasattr(loop, "_fastloop_reads"))
        state += (registration(right, fd),)
        body = await right.read_bytes(100)  # stock from here on
        left.close()
        right.close()
        return state, body

    (was_muted, left_attribute, registered), body = asyncio.run(main())
    assert was_muted and not left_attribute
    assert registered == (False, True, None)  # stock: no reader while not reading
    assert body == b"x" * 100


def test_a_reader_registered_before_install_is_left_to_stock():
    async def main():
        left, right = socket_streams(close_callback=False)
        reading = asyncio.ensure_future(right.read_bytes(4))
        await asyncio.sleep(0)  # registers READ, stock's
        await left.write(b"ping")
        await reading
        fastloop.reset_stats()
        with fastloop.patched(PATCH):
            await header_then_buffered_body(left, right)
            muted = fastloop.stats().read_interest.muted
            body = await right.read_bytes(100)
        left.close()
        right.close()
        return muted, body

    assert asyncio.run(main()) == (0, b"x" * 100)


def eof_polled_then_unmuted():
    """The order a half-closing client meets: its EOF is polled while the fd
    is muted, and the same iteration adds read interest back and schedules
    the handler's next step (as ``set_close_callback`` then ``post()`` do)."""
    from tornado.ioloop import IOLoop

    async def main():
        loop = asyncio.get_running_loop()
        ioloop = IOLoop.current()
        a, b = socket.socketpair()
        a.setblocking(False)
        seen: list[str] = []
        done = loop.create_future()

        def on_events(fd, events):
            seen.append("read")
            ioloop.remove_handler(fd)
            if not done.done():
                done.set_result(None)

        ioloop.add_handler(a.fileno(), on_events, ioloop.READ)
        ioloop.update_handler(a.fileno(), 0)  # the request read: interest dropped
        b.shutdown(socket.SHUT_WR)  # the client's EOF, readable from now on

        def add_interest_back():
            ioloop.update_handler(a.fileno(), ioloop.READ)
            loop.call_soon(seen.append, "next step")

        # Runs in the next iteration, whose poll reports the EOF first.
        loop.call_soon(add_interest_back)
        await asyncio.wait_for(done, 5)
        for _ in range(3):
            await asyncio.sleep(0)
        a.close()
        b.close()
        return seen

    return asyncio.run(main())


def test_an_eof_polled_while_muted_is_not_delivered_before_stock_would():
    stock, patched = differential(eof_polled_then_unmuted, PATCH)
    assert stock == ["next step", "read"]
    assert patched == stock


def uninstalled_from_another_thread_then_fd_reused(toggle: bool):
    """Uninstall from another thread while an fd is muted; before the loop
    takes the marks off, the stream closes and a new socket gets its number."""
    from tornado.ioloop import IOLoop

    async def main():
        ioloop = IOLoop.current()
        got = asyncio.get_running_loop().create_future()
        a, b = socket.socketpair()
        number = a.fileno()
        ioloop.add_handler(number, lambda fd, events: None, ioloop.READ)
        ioloop.update_handler(number, 0)
        if toggle:
            uninstalling = threading.Thread(target=fastloop.uninstall)
            uninstalling.start()
            uninstalling.join()
        ioloop.remove_handler(number)
        a.close()
        c, d = socket.socketpair()
        assert c.fileno() == number

        def on_read(fd, events):
            if not got.done():
                got.set_result(c.recv(10))

        ioloop.add_handler(c.fileno(), on_read, ioloop.READ)
        d.send(b"hello")
        try:
            return await asyncio.wait_for(got, 5)
        except TimeoutError:
            return "never polled"
        finally:
            ioloop.remove_handler(c.fileno())
            for sock in (b, c, d):
                sock.close()

    return asyncio.run(main())


def test_a_number_reused_between_uninstall_and_its_undo_is_polled():
    stock = uninstalled_from_another_thread_then_fd_reused(toggle=False)
    fastloop.install(PATCH)
    try:
        patched = uninstalled_from_another_thread_then_fd_reused(toggle=True)
    finally:
        fastloop.uninstall()
    assert stock == patched == b"hello"
