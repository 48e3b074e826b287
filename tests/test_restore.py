"""Uninstall leaves no trace on objects: loops, selectors, IOLoops and streams.

Each patch, installed, used for real (callbacks on the loop and from other
threads, self-pipe wake-ups, stream writes), then uninstalled while every
object is still alive: ``vars()`` of each has the names stock leaves, and
nothing in it (one level into the selector's keys and handles) is
fastloop's.  Against stock, run through the same scenario.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import socket
import sys
import threading
from asyncio import events
from typing import Any

import pytest
from tornado.ioloop import IOLoop
from tornado.iostream import IOStream

import fastloop
from fastloop.patches import registry

PATCHES = list(registry.known())


def traces(obj: Any) -> list[str]:
    """Paths under ``vars(obj)`` to values that are fastloop's own objects."""
    found: list[str] = []

    def visit(value: Any, path: str, depth: int) -> None:
        function = getattr(value, "__func__", value)
        owner = getattr(function, "__module__", None) or type(value).__module__
        if isinstance(owner, str) and owner.startswith("fastloop"):
            found.append(f"{path}: {value!r}"[:200])
        if depth == 0:
            return
        if isinstance(value, dict):
            for key, item in value.items():
                visit(item, f"{path}[{key!r}]", depth - 1)
        elif isinstance(value, (list, tuple, collections.deque)):
            for index, item in enumerate(value):
                visit(item, f"{path}[{index}]", depth - 1)
        elif isinstance(value, events.Handle):
            visit(value._callback, f"{path}._callback", depth - 1)

    for name, value in vars(obj).items():
        visit(value, name, 4)
    return found


def use_and_inspect(patches: list[str]) -> dict[str, Any]:
    """Make a loop, an IOLoop and streams, use them, uninstall, and look."""
    fastloop.install(patches)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    io = IOLoop.current()
    mine, peer = socket.socketpair()
    left, right = IOStream(mine), IOStream(peer)

    async def use() -> bytes:
        on_loop = asyncio.Event()
        io.add_callback(on_loop.set)
        await on_loop.wait()
        for schedule in (io.add_callback, loop.call_soon_threadsafe):
            done = asyncio.Event()
            threading.Thread(target=schedule, args=(done.set,)).start()
            await done.wait()
        await left.write(b"x" * 64)
        return await right.read_bytes(64)

    try:
        assert loop.run_until_complete(use()) == b"x" * 64
        fastloop.uninstall()  # every object still alive
        objects = {
            "loop": loop,
            "selector": loop._selector,
            "ioloop": io,
            "stream": left,
            "peer stream": right,
        }
        return {
            "names": {key: sorted(vars(obj)) for key, obj in objects.items()},
            "traces": {key: traces(obj) for key, obj in objects.items()},
            "switch interval": sys.getswitchinterval(),
        }
    finally:
        left.close()
        right.close()
        io.close()
        asyncio.set_event_loop(None)
        loop.close()


@pytest.mark.parametrize("patch", [*PATCHES, "all"])
def test_uninstall_leaves_every_object_as_stock_would(patch):
    patches = PATCHES if patch == "all" else [patch]
    if any(fastloop.available()[name] for name in patches):
        pytest.skip(f"not applicable here: {fastloop.available()}")
    stock = use_and_inspect([])
    patched = use_and_inspect(patches)
    assert patched["traces"] == {key: [] for key in stock["traces"]}
    assert patched["names"] == stock["names"]
    assert patched["switch interval"] == stock["switch interval"]


def test_a_stream_taken_off_keeps_its_counts_in_the_totals():
    async def main() -> tuple[bool, fastloop.StreamStats, int]:
        fastloop.install(["write_to_fd"])
        fastloop.reset_stats()
        mine, theirs = socket.socketpair()
        left, right = IOStream(mine), IOStream(theirs)
        await left.write(b"y" * 300)
        await right.read_bytes(300)
        fastloop.uninstall()  # the stream still alive
        seen = (
            "_fastloop_writes" in vars(left),
            fastloop.stream_stats(left),
            fastloop.stats().write_to_fd.bytes_written,
        )
        left.close()
        right.close()
        return seen

    carries, stream, written = asyncio.run(main())
    assert not carries
    assert stream == fastloop.StreamStats()  # the stream carries nothing
    assert written == 300  # nothing lost
    gc.collect()
    assert fastloop.stats().write_to_fd.bytes_written == 300  # folded, once


def test_uninstall_while_producers_add_callbacks_loses_none_and_leaves_nothing():
    """Producers on other threads keep adding while uninstall takes state off."""
    fastloop.install(["add_callback", "wakeup"])
    loop = asyncio.new_event_loop()
    ready, stop = threading.Event(), threading.Event()
    ran = []
    holder: dict[str, IOLoop] = {}

    def run_loop() -> None:
        asyncio.set_event_loop(loop)
        holder["io"] = IOLoop.current()
        holder["io"].add_callback(ready.set)
        holder["io"].start()

    runner = threading.Thread(target=run_loop)
    runner.start()
    assert ready.wait(30)
    io = holder["io"]
    per_producer, producers = 5_000, 4

    def produce() -> None:
        for _ in range(per_producer):
            io.add_callback(ran.append, 1)

    threads = [threading.Thread(target=produce) for _ in range(producers)]
    for thread in threads:
        thread.start()
    fastloop.uninstall()  # while they produce
    for thread in threads:
        thread.join()
    done = threading.Event()
    io.add_callback(done.set)
    assert done.wait(60), "a wake-up was lost"
    assert len(ran) == per_producer * producers
    found = {"loop": traces(loop), "selector": traces(loop._selector), "io": traces(io)}
    io.add_callback(io.stop)
    runner.join(30)
    io.close()
    loop.close()
    stop.set()
    assert found == {"loop": [], "selector": [], "io": []}


def test_patches_swapped_on_a_running_loop_keep_every_message_and_count():
    """install() and uninstall() from the loop's own coroutine, between echo
    rounds on live streams (what a user's ``client.run(fastloop.install)``
    does): every message comes back intact and in order, writes are counted
    exactly while installed and not at all while not, and nothing is left
    on the objects.  (``wakeup`` and ``poll`` take no loop made before
    install(); the class-level patches apply at once.)"""
    trips, cycles = 50, 4

    async def main() -> tuple[list[bytes], list[int], dict[str, list[str]]]:
        fastloop.reset_stats()
        mine, theirs = socket.socketpair()
        left, right = IOStream(mine), IOStream(theirs)
        echoed, counted = [], []
        for cycle in range(cycles):
            for installed in (True, False):
                if installed:
                    fastloop.install()
                else:
                    fastloop.uninstall()
                for trip in range(trips):
                    message = f"{cycle}:{installed}:{trip}".encode().ljust(64)
                    await left.write(message)
                    await right.write(await right.read_bytes(64))
                    echoed.append(await left.read_bytes(64))
                counted.append(fastloop.stats().write_to_fd.calls)
        loop = asyncio.get_running_loop()
        found = {
            "loop": traces(loop),
            "selector": traces(loop._selector),  # type: ignore[attr-defined]
            "ioloop": traces(IOLoop.current()),
            "stream": traces(left),
        }
        left.close()
        right.close()
        return echoed, counted, found

    echoed, counted, found = asyncio.run(main())
    assert echoed == [
        f"{cycle}:{installed}:{trip}".encode().ljust(64)
        for cycle in range(cycles)
        for installed in (True, False)
        for trip in range(trips)
    ]
    # Two writes a trip, counted in the installed half of each cycle only.
    per_cycle = 2 * trips
    assert counted == [per_cycle * (index // 2 + 1) for index in range(2 * cycles)]
    assert found == {"loop": [], "selector": [], "ioloop": [], "stream": []}
