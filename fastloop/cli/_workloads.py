"""The built-in workloads of ``fastloop bench``: each one round, timed from inside.

A workload takes the event-loop runner (``asyncio.run`` or ``uvloop.run``)
and a ``Slice``, and returns a ``Round``: the seconds its timed part took
and the operations it completed, so that loop creation and thread start-up
stay outside the measurement.

A round is sized by time, not by count: it runs its operations in batches
(a burst, a stretch of a chain, a few round trips), reads the clock after
each batch, and stops at the first batch that ends past the slice, once it
has done at least ``floor`` operations.  A slow arm does fewer operations in
the same time instead of taking longer; what is compared is the time per
operation.  ``Slice.count(n)`` is a fixed count instead: ``n`` operations,
whatever they take.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

#: ``asyncio.run`` or ``uvloop.run``: what every workload runs its round with.
Runner = Callable[[Coroutine[Any, Any, "Round"]], "Round"]


class Round(NamedTuple):
    """What one arm's round measured: its timed seconds and the operations done."""

    seconds: float
    ops: int

    @property
    def per_op(self) -> float:
        return self.seconds / self.ops


@dataclass(frozen=True)
class Slice:
    """How long one round runs: a time slice, with a floor on operations.

    ``batch`` is how many operations run between two reads of the clock;
    ``clock`` is the clock that decides (and times) the round.
    """

    seconds: float
    floor: int
    batch: int
    clock: Callable[[], float] = time.perf_counter

    def __post_init__(self) -> None:
        if self.floor < 1 or self.batch < 1 or self.seconds < 0:
            raise ValueError(f"a slice needs floor, batch >= 1, seconds >= 0: {self}")

    @classmethod
    def count(cls, n: int, *, batch: int | None = None) -> Slice:
        """Exactly ``n`` operations, however long they take."""
        return cls(0.0, n, batch or n)

    def share(self, parts: int) -> Slice:
        """The slice of one of ``parts`` producers: each does its part of the floor."""
        return dataclasses.replace(self, floor=-(-self.floor // parts))

    def next(self, ops: int) -> int:
        """How many operations the next batch runs: a batch, or what the floor lacks."""
        lacking = self.floor - ops
        return min(self.batch, lacking) if lacking > 0 else self.batch

    def over(self, start: float, ops: int) -> float | None:
        """The round's seconds once it has done its floor and run its slice, else None.

        Below the floor the clock is not read.
        """
        if ops < self.floor:
            return None
        elapsed = self.clock() - start
        return elapsed if elapsed >= self.seconds else None


@dataclass(frozen=True, kw_only=True)
class Workload:
    name: str
    description: str
    exercises: tuple[str, ...]  # the patches whose code it runs
    unit: str
    batch: int  # operations between two reads of the clock
    floor: int  # the fewest operations of a round, however slow the arm
    run: Callable[[Runner, Slice], Round]
    limit: Callable[[Runner, Slice], Round] | None = None  # the bare-asyncio floor

    def slice(self, seconds: float, clock: Callable[[], float] | None = None) -> Slice:
        """This workload's rounds of ``seconds``, with its batch and its floor."""
        if clock is None:
            return Slice(seconds, self.floor, self.batch)
        return Slice(seconds, self.floor, self.batch, clock)


async def _batches(s: Slice, batch: Callable[[int], Awaitable[object]]) -> Round:
    """Run ``batch(n)`` (n operations each) until the slice says the round is over."""
    ops = 0
    start = s.clock()
    while True:
        n = s.next(ops)
        await batch(n)
        ops += n
        elapsed = s.over(start, ops)
        if elapsed is not None:
            return Round(elapsed, ops)


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


async def _burst(s: Slice, add: Callable[[Callable[[], None]], object]) -> Round:
    """Bursts of n callbacks added at once, each burst awaited until all ran."""
    loop = asyncio.get_running_loop()

    async def burst(n: int) -> None:
        done, tick = _count_down(loop, n)
        for _ in range(n):
            add(tick)
        await done

    return await _batches(s, burst)


def onloop_burst(runner: Runner, s: Slice) -> Round:
    async def main() -> Round:
        from tornado.ioloop import IOLoop

        return await _burst(s, IOLoop.current().add_callback)

    return runner(main())


def call_soon_burst(runner: Runner, s: Slice) -> Round:
    async def main() -> Round:
        return await _burst(s, asyncio.get_running_loop().call_soon)

    return runner(main())


def _chain(s: Slice, add: Callable[[Callable[[], None]], object]) -> Awaitable[Round]:
    """Each callback adds the next; the clock is read once a stretch of the chain."""
    done: asyncio.Future[Round] = asyncio.get_running_loop().create_future()
    ops = [0]
    left = [s.next(0)]
    stretch = [left[0]]

    def step() -> None:
        left[0] -= 1
        if left[0]:
            add(step)
            return
        ops[0] += stretch[0]
        elapsed = s.over(start, ops[0])
        if elapsed is None:
            left[0] = stretch[0] = s.next(ops[0])
            add(step)
        else:
            done.set_result(Round(elapsed, ops[0]))

    start = s.clock()
    add(step)
    return done


def onloop_chain(runner: Runner, s: Slice) -> Round:
    async def main() -> Round:
        from tornado.ioloop import IOLoop

        io = IOLoop.current()
        return await _chain(s, io.add_callback)

    return runner(main())


def call_soon_chain(runner: Runner, s: Slice) -> Round:
    async def main() -> Round:
        loop = asyncio.get_running_loop()
        return await _chain(s, loop.call_soon)

    return runner(main())


def onloop_mixed(runner: Runner, s: Slice) -> Round:
    async def main() -> Round:
        from tornado.ioloop import IOLoop

        loop = asyncio.get_running_loop()
        add = IOLoop.current().add_callback
        call_soon = loop.call_soon

        async def burst(n: int) -> None:
            done, tick = _count_down(loop, n)
            for _ in range(n // 2):
                add(tick)
                call_soon(tick)
            if n % 2:
                add(tick)
            await done

        return await _batches(s, burst)

    return runner(main())


def _producers(runner: Runner, s: Slice, threads: int, ioloop: bool) -> Round:
    """``threads`` threads add callbacks in batches until the slice has passed.

    Each producer reads the clock once a batch and then adds a last callback
    that says how many it added: the loop has run them all (per-producer FIFO)
    when every producer's last callback has run.
    """

    async def main() -> Round:
        from tornado.ioloop import IOLoop

        loop = asyncio.get_running_loop()
        done: asyncio.Future[int] = loop.create_future()
        add = IOLoop.current().add_callback if ioloop else loop.call_soon_threadsafe
        go = threading.Event()
        share = s.share(threads)
        ran = [0]
        finished = [0, 0]  # producers finished, callbacks they added

        def tick() -> None:
            ran[0] += 1

        def last(added: int) -> None:
            finished[0] += 1
            finished[1] += added
            if finished[0] == threads:
                done.set_result(finished[1])

        def produce() -> None:
            go.wait()
            ops = 0
            while True:
                n = share.next(ops)
                for _ in range(n):
                    add(tick)
                ops += n
                if share.over(start, ops) is not None:
                    break
            add(last, ops)

        workers = [threading.Thread(target=produce) for _ in range(threads)]
        for worker in workers:
            worker.start()
        start = s.clock()
        go.set()
        ops = await done
        elapsed = s.clock() - start
        for worker in workers:
            worker.join()
        if ran[0] != ops:
            raise RuntimeError(f"{ops} callbacks added, {ran[0]} ran")
        return Round(elapsed, ops)

    return runner(main())


def xthread_burst_2(runner: Runner, s: Slice) -> Round:
    return _producers(runner, s, 2, ioloop=True)


def xthread_burst_8(runner: Runner, s: Slice) -> Round:
    return _producers(runner, s, 8, ioloop=True)


def threadsafe_burst(runner: Runner, s: Slice) -> Round:
    return _producers(runner, s, 2, ioloop=False)


def executor_storm(runner: Runner, s: Slice) -> Round:
    async def main() -> Round:
        loop = asyncio.get_running_loop()

        async def storm(n: int) -> None:
            await asyncio.gather(*(loop.run_in_executor(None, int) for _ in range(n)))

        return await _batches(s, storm)

    return runner(main())


def ping_pong(runner: Runner, s: Slice) -> Round:
    async def main() -> Round:
        from tornado.ioloop import IOLoop

        loop = asyncio.get_running_loop()
        io = IOLoop.current()
        done: asyncio.Future[Round] = loop.create_future()
        pong = threading.Event()

        def producer() -> None:
            ops = 0
            while True:
                n = s.next(ops)
                for _ in range(n):
                    pong.clear()
                    io.add_callback(pong.set)
                    pong.wait()
                ops += n
                elapsed = s.over(start, ops)
                if elapsed is not None:
                    break
            loop.call_soon_threadsafe(done.set_result, Round(elapsed, ops))

        thread = threading.Thread(target=producer)
        start = s.clock()
        thread.start()
        result = await done
        thread.join()
        return result

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


def _echo(runner: Runner, s: Slice, size: int) -> Round:
    async def main() -> Round:
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

        async def trips(n: int) -> None:
            for _ in range(n):
                await client.write(message)
                await peer.write(await peer.read_bytes(size))
                await client.read_bytes(size)

        result = await _batches(s, trips)
        client.close()
        peer.close()
        server.stop()
        return result

    return runner(main())


def echo_64(runner: Runner, s: Slice) -> Round:
    return _echo(runner, s, 64)


def echo_64k(runner: Runner, s: Slice) -> Round:
    return _echo(runner, s, 65536)


def busy_chain(runner: Runner, s: Slice) -> Round:
    with spinning_thread():
        return onloop_chain(runner, s)


def busy_ping_pong(runner: Runner, s: Slice) -> Round:
    with spinning_thread():
        return ping_pong(runner, s)


def busy_echo_64(runner: Runner, s: Slice) -> Round:
    with spinning_thread():
        return echo_64(runner, s)


#: Batches keep a clock read (~60 ns) below 0.1% of the work between two
#: reads, and one batch short against the slice even for an arm 10x slower
#: than the recorded run's; floors are what a round does however slow the arm.
WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            name="onloop-burst",
            description="bursts of add_callback on the loop thread, then run them",
            exercises=("add_callback",),
            unit="callback",
            batch=10_000,
            floor=10_000,
            run=onloop_burst,
            limit=call_soon_burst,
        ),
        Workload(
            name="onloop-chain",
            description="each callback adds the next",
            exercises=("add_callback",),
            unit="callback",
            batch=1_000,
            floor=1_000,
            run=onloop_chain,
            limit=call_soon_chain,
        ),
        Workload(
            name="onloop-mixed",
            description="add_callback alternating with asyncio call_soon "
            "(no two in a row)",
            exercises=("add_callback",),
            unit="callback",
            batch=10_000,
            floor=10_000,
            run=onloop_mixed,
        ),
        Workload(
            name="xthread-burst-2",
            description="2 threads add callbacks",
            exercises=("add_callback", "wakeup"),
            unit="callback",
            batch=1_000,
            floor=10_000,
            run=xthread_burst_2,
        ),
        Workload(
            name="xthread-burst-8",
            description="8 threads add callbacks",
            exercises=("add_callback", "wakeup"),
            unit="callback",
            batch=1_000,
            floor=10_000,
            run=xthread_burst_8,
        ),
        Workload(
            name="xthread-ping-pong",
            description="a thread adds a callback and waits for it, again and again",
            exercises=("add_callback", "wakeup"),
            unit="ping",
            batch=16,
            floor=64,
            run=ping_pong,
        ),
        Workload(
            name="threadsafe-burst",
            description="2 threads call loop.call_soon_threadsafe",
            exercises=("wakeup",),
            unit="call",
            batch=1_000,
            floor=10_000,
            run=threadsafe_burst,
        ),
        Workload(
            name="executor-storm",
            description="bursts of run_in_executor no-ops, all awaited",
            exercises=("wakeup",),
            unit="call",
            batch=1_000,
            floor=1_000,
            run=executor_storm,
        ),
        Workload(
            name="echo-64B",
            description="IOStream echo round trips of 64 bytes",
            exercises=("write_to_fd",),
            unit="round trip",
            batch=64,
            floor=256,
            run=echo_64,
        ),
        Workload(
            name="echo-64KiB",
            description="IOStream echo round trips of 64 KiB",
            exercises=("write_to_fd",),
            unit="round trip",
            batch=8,
            floor=32,
            run=echo_64k,
        ),
        Workload(
            name="busy-chain",
            description="onloop-chain while another thread runs pure Python",
            exercises=("add_callback", "wakeup", "write_to_fd", "poll"),
            unit="callback",
            batch=16,
            floor=32,
            run=busy_chain,
        ),
        Workload(
            name="busy-pingpong",
            description="xthread-ping-pong while another thread runs pure Python",
            exercises=("add_callback", "wakeup", "write_to_fd", "poll"),
            unit="ping",
            batch=1,
            floor=8,
            run=busy_ping_pong,
        ),
        Workload(
            name="busy-echo",
            description="echo-64B while another thread runs pure Python",
            exercises=("add_callback", "wakeup", "write_to_fd", "poll"),
            unit="round trip",
            batch=4,
            floor=16,
            run=busy_echo_64,
        ),
    )
}
