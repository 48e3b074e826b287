"""The built-in workloads of ``fastloop bench``: each one round, timed from inside.

A workload takes the event-loop runner (``asyncio.run`` or ``uvloop.run``)
and returns the seconds its timed part took, so that loop creation and
thread start-up stay outside the measurement.  ``per_round`` is how many
operations a round performs, for per-operation figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from fastloop.cli._echo_workload import Runner as Runner
from fastloop.cli._echo_workload import echo_64, echo_64k


@dataclass(frozen=True)
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
            "onloop-burst",
            "N add_callback on the loop thread, then run them",
            ("add_callback",),
            50_000,
            "callback",
            onloop_burst,
            call_soon_burst,
        ),
        Workload(
            "onloop-chain",
            "each callback adds the next, N times",
            ("add_callback",),
            50_000,
            "callback",
            onloop_chain,
            call_soon_chain,
        ),
        Workload(
            "onloop-mixed",
            "add_callback alternating with asyncio call_soon (no two in a row)",
            ("add_callback",),
            50_000,
            "callback",
            onloop_mixed,
        ),
        Workload(
            "xthread-burst-2",
            "2 threads add N callbacks",
            ("add_callback", "wakeup"),
            40_000,
            "callback",
            xthread_burst_2,
        ),
        Workload(
            "xthread-burst-8",
            "8 threads add N callbacks",
            ("add_callback", "wakeup"),
            40_000,
            "callback",
            xthread_burst_8,
        ),
        Workload(
            "xthread-ping-pong",
            "a thread adds a callback and waits for it, N times",
            ("add_callback", "wakeup"),
            2_000,
            "ping",
            ping_pong,
        ),
        Workload(
            "threadsafe-burst",
            "2 threads call loop.call_soon_threadsafe N times",
            ("wakeup",),
            40_000,
            "call",
            threadsafe_burst,
        ),
        Workload(
            "executor-storm",
            "N run_in_executor no-ops, all awaited",
            ("wakeup",),
            4_000,
            "call",
            executor_storm,
        ),
        Workload(
            "echo-64B",
            "IOStream echo round trips of 64 bytes",
            ("write_to_fd",),
            2_000,
            "round trip",
            echo_64,
        ),
        Workload(
            "echo-64KiB",
            "IOStream echo round trips of 64 KiB",
            ("write_to_fd",),
            300,
            "round trip",
            echo_64k,
        ),
        Workload(
            "busy-chain",
            "onloop-chain while another thread runs pure Python",
            ("add_callback", "wakeup", "write_to_fd", "poll"),
            10_000,
            "callback",
            busy_chain,
        ),
        Workload(
            "busy-pingpong",
            "xthread-ping-pong while another thread runs pure Python",
            ("add_callback", "wakeup", "write_to_fd", "poll"),
            100,
            "ping",
            busy_ping_pong,
        ),
        Workload(
            "busy-echo",
            "echo-64B while another thread runs pure Python",
            ("add_callback", "wakeup", "write_to_fd", "poll"),
            200,
            "round trip",
            busy_echo_64,
        ),
    )
}
