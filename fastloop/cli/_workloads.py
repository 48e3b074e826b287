"""The built-in workloads of ``fastloop bench``: each one round, timed from inside.

A workload takes the event-loop runner (``asyncio.run`` or ``uvloop.run``)
and returns the seconds its timed part took, so that loop creation and
thread start-up stay outside the measurement.  ``per_round`` is how many
operations a round performs, for per-operation figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

#: ``asyncio.run`` or ``uvloop.run``: what every workload runs its round with.
Runner = Callable[[Coroutine[Any, Any, float]], float]


@dataclass(frozen=True, kw_only=True)
class Workload:
    name: str
    description: str
    patches: tuple[str, ...]
    per_round: int
    unit: str
    run: Callable[[Runner, int], float]  # (runner, scale) -> seconds
    limit: Callable[[Runner, int], float] | None = None  # the bare-asyncio floor


def _count_down(
    loop: asyncio.AbstractEventLoop, n: int
) -> tuple[asyncio.Future[None], Callable[[], None]]:
    done: asyncio.Future[None] = loop.create_future()
    remaining = [n]

    def tick() -> None:
        remaining[0] -= 1
        if remaining[0] == 0:
            done.set_result(None)

    return done, tick


def onloop_burst(runner: Runner, n: int) -> float:
    async def main() -> float:
        from tornado.ioloop import IOLoop

        loop = asyncio.get_running_loop()
        done, tick = _count_down(loop, n)
        add = IOLoop.current().add_callback
        start = time.perf_counter()
        for _ in range(n):
            add(tick)
        await done
        return time.perf_counter() - start

    return runner(main())


def call_soon_burst(runner: Runner, n: int) -> float:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        done, tick = _count_down(loop, n)
        call_soon = loop.call_soon
        start = time.perf_counter()
        for _ in range(n):
            call_soon(tick)
        await done
        return time.perf_counter() - start

    return runner(main())


def onloop_chain(runner: Runner, n: int) -> float:
    async def main() -> float:
        from tornado.ioloop import IOLoop

        loop = asyncio.get_running_loop()
        done, tick = _count_down(loop, n)
        io = IOLoop.current()
        left = [n]

        def step() -> None:
            tick()
            left[0] -= 1
            if left[0]:
                io.add_callback(step)

        start = time.perf_counter()
        io.add_callback(step)
        await done
        return time.perf_counter() - start

    return runner(main())


def call_soon_chain(runner: Runner, n: int) -> float:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        done, tick = _count_down(loop, n)
        left = [n]

        def step() -> None:
            tick()
            left[0] -= 1
            if left[0]:
                loop.call_soon(step)

        start = time.perf_counter()
        loop.call_soon(step)
        await done
        return time.perf_counter() - start

    return runner(main())


def onloop_mixed(runner: Runner, n: int) -> float:
    async def main() -> float:
        from tornado.ioloop import IOLoop

        loop = asyncio.get_running_loop()
        done, tick = _count_down(loop, n - n % 2)
        add = IOLoop.current().add_callback
        call_soon = loop.call_soon
        start = time.perf_counter()
        for _ in range(n // 2):
            add(tick)
            call_soon(tick)
        await done
        return time.perf_counter() - start

    return runner(main())


def _producers(runner: Runner, n: int, threads: int, ioloop: bool) -> float:
    async def main() -> float:
        from tornado.ioloop import IOLoop

        loop = asyncio.get_running_loop()
        done, tick = _count_down(loop, n - n % threads)
        add = IOLoop.current().add_callback if ioloop else loop.call_soon_threadsafe
        go = threading.Event()

        def produce() -> None:
            go.wait()
            for _ in range(n // threads):
                add(tick)

        workers = [threading.Thread(target=produce) for _ in range(threads)]
        for worker in workers:
            worker.start()
        start = time.perf_counter()
        go.set()
        await done
        elapsed = time.perf_counter() - start
        for worker in workers:
            worker.join()
        return elapsed

    return runner(main())


def xthread_burst_2(runner: Runner, n: int) -> float:
    return _producers(runner, n, 2, ioloop=True)


def xthread_burst_8(runner: Runner, n: int) -> float:
    return _producers(runner, n, 8, ioloop=True)


def threadsafe_burst(runner: Runner, n: int) -> float:
    return _producers(runner, n, 2, ioloop=False)


def executor_storm(runner: Runner, n: int) -> float:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        await asyncio.gather(*(loop.run_in_executor(None, int) for _ in range(n)))
        return time.perf_counter() - start

    return runner(main())


def ping_pong(runner: Runner, n: int) -> float:
    async def main() -> float:
        from tornado.ioloop import IOLoop

        loop = asyncio.get_running_loop()
        io = IOLoop.current()
        done: asyncio.Future[None] = loop.create_future()
        pong = threading.Event()

        def producer() -> None:
            for _ in range(n):
                pong.clear()
                io.add_callback(pong.set)
                pong.wait()
            loop.call_soon_threadsafe(done.set_result, None)

        thread = threading.Thread(target=producer)
        start = time.perf_counter()
        thread.start()
        await done
        elapsed = time.perf_counter() - start
        thread.join()
        return elapsed

    return runner(main())


@contextlib.contextmanager
def spinning_thread() -> Iterator[None]:
    """A thread that runs pure Python (it holds the GIL) for the whole block.

    A dask task thread crunching in Python, or any CPU-bound helper thread:
    it releases the GIL only when a waiter has asked for a switch interval.
    """
    stop = [False]

    def spin() -> None:
        counter = 0
        while not stop[0]:
            counter += 1

    thread = threading.Thread(target=spin, name="busy", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop[0] = True
        thread.join()


def _echo(runner: Runner, trips: int, size: int) -> float:
    async def main() -> float:
        from tornado.iostream import IOStream
        from tornado.tcpserver import TCPServer

        accepted: asyncio.Future[IOStream] = asyncio.get_running_loop().create_future()

        class Server(TCPServer):
            async def handle_stream(self, stream: IOStream, address: object) -> None:
                accepted.set_result(stream)

        server = Server()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        sock.setblocking(False)
        server.add_sockets([sock])
        client = IOStream(socket.socket())
        await client.connect(sock.getsockname())
        peer = await accepted
        message = b"m" * size
        start = time.perf_counter()
        for _ in range(trips):
            await client.write(message)
            await peer.write(await peer.read_bytes(size))
            await client.read_bytes(size)
        elapsed = time.perf_counter() - start
        client.close()
        peer.close()
        server.stop()
        return elapsed

    return runner(main())


def echo_64(runner: Runner, n: int) -> float:
    return _echo(runner, n, 64)


def echo_64k(runner: Runner, n: int) -> float:
    return _echo(runner, n, 65536)


def busy_chain(runner: Runner, n: int) -> float:
    with spinning_thread():
        return onloop_chain(runner, n)


def busy_ping_pong(runner: Runner, n: int) -> float:
    with spinning_thread():
        return ping_pong(runner, n)


def busy_echo_64(runner: Runner, n: int) -> float:
    with spinning_thread():
        return echo_64(runner, n)


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            name="onloop-burst",
            description="N add_callback on the loop thread, then run them",
            patches=("add_callback",),
            per_round=50_000,
            unit="callback",
            run=onloop_burst,
            limit=call_soon_burst,
        ),
        Workload(
            name="onloop-chain",
            description="each callback adds the next, N times",
            patches=("add_callback",),
            per_round=50_000,
            unit="callback",
            run=onloop_chain,
            limit=call_soon_chain,
        ),
        Workload(
            name="onloop-mixed",
            description="add_callback alternating with asyncio call_soon "
            "(no two in a row)",
            patches=("add_callback",),
            per_round=50_000,
            unit="callback",
            run=onloop_mixed,
        ),
        Workload(
            name="xthread-burst-2",
            description="2 threads add N callbacks",
            patches=("add_callback", "wakeup"),
            per_round=40_000,
            unit="callback",
            run=xthread_burst_2,
        ),
        Workload(
            name="xthread-burst-8",
            description="8 threads add N callbacks",
            patches=("add_callback", "wakeup"),
            per_round=40_000,
            unit="callback",
            run=xthread_burst_8,
        ),
        Workload(
            name="xthread-ping-pong",
            description="a thread adds a callback and waits for it, N times",
            patches=("add_callback", "wakeup"),
            per_round=2_000,
            unit="ping",
            run=ping_pong,
        ),
        Workload(
            name="threadsafe-burst",
            description="2 threads call loop.call_soon_threadsafe N times",
            patches=("wakeup",),
            per_round=40_000,
            unit="call",
            run=threadsafe_burst,
        ),
        Workload(
            name="executor-storm",
            description="N run_in_executor no-ops, all awaited",
            patches=("wakeup",),
            per_round=4_000,
            unit="call",
            run=executor_storm,
        ),
        Workload(
            name="echo-64B",
            description="IOStream echo round trips of 64 bytes",
            patches=("write_to_fd",),
            per_round=2_000,
            unit="round trip",
            run=echo_64,
        ),
        Workload(
            name="echo-64KiB",
            description="IOStream echo round trips of 64 KiB",
            patches=("write_to_fd",),
            per_round=300,
            unit="round trip",
            run=echo_64k,
        ),
        Workload(
            name="busy-chain",
            description="onloop-chain while another thread runs pure Python",
            patches=("add_callback", "wakeup", "write_to_fd", "poll"),
            per_round=10_000,
            unit="callback",
            run=busy_chain,
        ),
        Workload(
            name="busy-pingpong",
            description="xthread-ping-pong while another thread runs pure Python",
            patches=("add_callback", "wakeup", "write_to_fd", "poll"),
            per_round=100,
            unit="ping",
            run=busy_ping_pong,
        ),
        Workload(
            name="busy-echo",
            description="echo-64B while another thread runs pure Python",
            patches=("add_callback", "wakeup", "write_to_fd", "poll"),
            per_round=200,
            unit="round trip",
            run=busy_echo_64,
        ),
    )
}
