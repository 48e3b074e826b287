"""Import and activation work without fork; loops the patches do not know stay stock."""

from __future__ import annotations

import asyncio
import contextlib
import os
import selectors
import socket
import subprocess
import sys
import textwrap
import threading

import pytest
from tornado.iostream import IOStream
from tornado.platform.asyncio import AddThreadSelectorEventLoop, AsyncIOLoop

import fastloop
from fastloop.patches import registry
from tests_support import default_set, differential, require_installed_pth

#: A platform without fork (Windows), simulated: os.fork and
#: os.register_at_fork go before anything imports fastloop (the standard
#: library checks for os.fork, fastloop for os.register_at_fork), then
#: ``site`` runs the .pth line.
NO_FORK = textwrap.dedent(
    """
    import os, sys
    del os.fork, os.register_at_fork
    import site
    site.main()  # the interpreter ran with -S: now the .pth line runs
    import asyncio, threading
    import tornado.web
    from tornado.ioloop import IOLoop
    import fastloop

    async def main():
        io = IOLoop.current()
        done = asyncio.get_running_loop().create_future()
        seen = []

        def producer():
            for i in range(3):
                io.add_callback(seen.append, i)
            io.add_callback(lambda: done.set_result(list(seen)))

        threading.Thread(target=producer).start()
        return await done

    seen = asyncio.run(main())
    print(sorted(fastloop.installed()), seen)
    print(fastloop.stats().add_callback.remote_callbacks)
    """
)


def test_import_and_activation_without_register_at_fork():
    require_installed_pth()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
    env.update(FASTLOOP="1", FASTLOOP_BLOCK_MS="1000")
    result = subprocess.run(
        [sys.executable, "-S", "-c", NO_FORK],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.splitlines() == [
        f"{default_set()} [0, 1, 2]",
        "4",
    ]


class NotASelectorLoop(asyncio.BaseEventLoop):
    """A stand-in for the proactor loop: asyncio's ``BaseEventLoop``, with a
    ready deque, ``_process_events`` and ``_write_to_self``, that is not a
    selector loop."""

    def __init__(self) -> None:
        super().__init__()
        self._selector = selectors.DefaultSelector()
        self._ssock, self._csock = socket.socketpair()
        self._ssock.setblocking(False)
        self._csock.setblocking(False)
        self._selector.register(self._ssock, selectors.EVENT_READ)

    def _process_events(self, event_list):
        for _ in event_list:
            with contextlib.suppress(BlockingIOError):
                self._ssock.recv(4096)

    def _write_to_self(self):
        with contextlib.suppress(OSError):
            self._csock.send(b"\0")

    def close(self):
        super().close()
        self._selector.close()
        self._ssock.close()
        self._csock.close()


def run_callbacks(make_loop):
    """On-loop and cross-thread add_callback on an IOLoop over ``make_loop()``."""
    io = AsyncIOLoop(asyncio_loop=make_loop())
    seen = []

    def producer():
        for i in range(3):
            io.add_callback(seen.append, f"thread {i}")
        io.add_callback(io.stop)

    def start():
        for i in range(3):
            io.add_callback(seen.append, f"loop {i}")
        threading.Thread(target=producer).start()

    io.add_callback(start)
    fastloop.reset_stats()
    io.start()
    io.close(all_fds=True)
    return seen, fastloop.stats().add_callback.remote_callbacks


@pytest.mark.parametrize(
    ("make_loop", "kind"),
    [
        (NotASelectorLoop, "NotASelectorLoop"),
        (
            lambda: AddThreadSelectorEventLoop(asyncio.new_event_loop()),
            "AddThreadSelectorEventLoop",
        ),
    ],
    ids=["proactor-like", "AddThreadSelectorEventLoop"],
)
def test_add_callback_keeps_stock_behaviour_on_loops_it_does_not_know(
    make_loop, kind, caplog
):
    stock, patched = differential(lambda: run_callbacks(make_loop), ["add_callback"])
    assert stock == patched
    seen, remote = patched
    assert seen == [f"loop {i}" for i in range(3)] + [f"thread {i}" for i in range(3)]
    assert remote == 0  # the stock path ran: nothing was batched
    reasons = {
        key: why
        for key, why in registry.loop_declines().items()
        if key[0] == "add_callback" and key[1].endswith(kind)
    }
    assert list(reasons.values()) == [
        f"{next(iter(reasons))[1]} is not a selector loop nor one of "
        "uvloop, zuvloop, rloop"
    ]


def test_writes_are_counted_on_a_stream_of_a_proxy_loop():
    # write_to_fd does not depend on the loop: a stream on Tornado's
    # AddThreadSelectorEventLoop (its reader thread) counts as anywhere.
    def scenario():
        io = AsyncIOLoop(
            asyncio_loop=AddThreadSelectorEventLoop(asyncio.new_event_loop())
        )

        async def main():
            mine, peer = socket.socketpair()
            a, b = IOStream(mine), IOStream(peer)
            await a.write(b"p" * 300)
            got = await b.read_bytes(300)
            counters = fastloop.stream_stats(a)
            a.close()
            b.close()
            return got, counters.bytes_written

        try:
            return io.run_sync(main)
        finally:
            io.close(all_fds=True)

    stock, patched = differential(scenario, ["write_to_fd"])
    assert stock == (b"p" * 300, 0)
    assert patched == (b"p" * 300, 300)


def test_selector_loops_and_uvloop_are_known():
    from fastloop.patches.add_callback import unknown_loop

    loop = asyncio.new_event_loop()
    try:
        assert unknown_loop(loop) is None
    finally:
        loop.close()
    uvloop = pytest.importorskip("uvloop")
    loop = uvloop.new_event_loop()
    try:
        assert unknown_loop(loop) is None
    finally:
        loop.close()
