"""A dask worker's memory monitor sleeps while only its loop can change its memory.

A scheduler in this process and a worker started by a Nanny, in a process
of its own as a deployment's is (``FASTLOOP=1`` there, or not), with a
memory limit the tests allocate past.  Every reading of the worker's
memory goes through ``worker.monitor.get_process_memory``, dask's own hook
for tests, which the worker records.  Skipped without ``distributed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import time
from collections.abc import AsyncIterator
from typing import Any
from unittest import mock

import pytest

distributed = pytest.importorskip(
    "distributed",
    reason="needs distributed (pip install distributed); .ci/run installs it",
)
pytestmark = pytest.mark.dask

import dask  # noqa: E402
from distributed import Client, Nanny, Scheduler  # noqa: E402
from distributed.core import Status  # noqa: E402

from fastloop.patches import dask_memory  # noqa: E402
from tests_support import (  # noqa: E402
    PATIENCE_S,
    STOCK_AND_PATCHED,
    require_installed_pth,
    until,
)

MiB = 2**20
#: The worker's memory limit; it pauses above 80% (320 MiB), spills above
#: 70%, and is never terminated (the nanny's check is off).
LIMIT = 400 * MiB
#: What a test allocates: past the pause threshold from a fresh worker's
#: 100-150 MiB.
BALLAST = 300 * MiB
#: The patched monitor's interval, stock's default.
INTERVAL_MS = 100.0


def record_readings(dask_worker: Any) -> None:
    """Each memory reading: the memory, the callback's interval, whether the
    patched monitor slept, the worker's status, and who read (``"stock"``,
    stock's check; ``"look"``, the patch's look after it or a probe's)."""
    read = dask_worker.monitor.get_process_memory
    pc = dask_worker.periodic_callbacks["memory_monitor"]
    readings: list[Any] = []

    def recorded() -> int:
        memory = read()
        sleeper = getattr(dask_worker.memory_manager, "_fastloop_memory", None)
        asleep = bool(sleeper is not None and sleeper.asleep)
        caller = sys._getframe(1).f_code.co_name
        who = "look" if caller == "quiet" else "stock"
        readings.append(
            (memory, pc.callback_time, asleep, dask_worker.status.name, who)
        )
        return memory

    dask_worker.monitor.get_process_memory = recorded
    dask_worker.fastloop_test_readings = readings


def readings_of(dask_worker: Any) -> list[Any]:
    return list(dask_worker.fastloop_test_readings)


def asleep(dask_worker: Any) -> bool:
    sleeper = getattr(dask_worker.memory_manager, "_fastloop_memory", None)
    return bool(sleeper is not None and sleeper.asleep)


def allocate(dask_worker: Any, *, after: float = 0.0) -> None:
    """After ``after`` seconds, hold BALLAST (written, so resident); both
    moments marked among the readings."""
    dask_worker.fastloop_test_readings.append("started")
    time.sleep(after)
    dask_worker.fastloop_test_ballast = b"\x01" * BALLAST
    dask_worker.fastloop_test_readings.append("allocated")


#: How long a computing thread waits before it allocates: a few intervals.
THINK_S = 0.3


def allocate_in_a_task() -> None:
    from distributed import get_worker

    allocate(get_worker(), after=THINK_S)


def allocate_in_an_unknown_thread(dask_worker: Any) -> None:
    """A thread dask knows nothing of."""
    threading.Thread(
        target=allocate, args=(dask_worker,), kwargs={"after": THINK_S}, daemon=True
    ).start()


def allocate_in_a_timer(dask_worker: Any) -> None:
    """A timer callback of the worker's loop: an iteration with no I/O,
    once the loop has gone back to waiting."""
    dask_worker.loop.asyncio_loop.call_later(THINK_S, allocate, dask_worker)


def free(dask_worker: Any) -> None:
    del dask_worker.fastloop_test_ballast


ALLOCATIONS = {
    "task": lambda client: client.submit(allocate_in_a_task, pure=False),
    "unknown thread": lambda client: client.run(allocate_in_an_unknown_thread),
    "timer": lambda client: client.run(allocate_in_a_timer),
}


@contextlib.asynccontextmanager
async def cluster(patched: bool) -> AsyncIterator[tuple[Client, Any, str]]:
    """A client, the scheduler's view of the worker, and its address; the
    patched worker's monitor asleep to begin with."""
    if patched:
        require_installed_pth()
    config = {
        "distributed.worker.memory.terminate": False,
        "distributed.worker.memory.monitor-interval": f"{INTERVAL_MS}ms",
    }
    # The worker's interpreter reads FASTLOOP as it starts (the Nanny's own
    # env= is set later, inside it): it inherits this process's environment.
    environ = {k: v for k, v in os.environ.items() if k != "FASTLOOP"}
    if patched:
        environ["FASTLOOP"] = "1"
    with dask.config.set(config), mock.patch.dict(os.environ, environ, clear=True):
        async with (
            Scheduler(port=0, dashboard_address=":0") as scheduler,
            Nanny(
                scheduler.address,
                nthreads=1,
                memory_limit=LIMIT,
                dashboard_address=":0",
            ) as nanny,
            Client(scheduler.address, asynchronous=True) as client,
        ):
            address = nanny.worker_address
            await client.run(record_readings)
            if patched:
                # Each look is a message: a burst of the worker's work.
                for _ in range(PATIENCE_S * 20):
                    if (await client.run(asleep))[address]:
                        break
                    await asyncio.sleep(0.05)
                else:
                    raise AssertionError("the patched monitor never slept")
            yield client, scheduler.workers[address], address


async def scenario(patched: bool, how: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    async with cluster(patched) as (client, worker, address):
        await ALLOCATIONS[how](client)
        await until(lambda: worker.status == Status.paused, "the pause")
        seen["paused"] = True
        await client.run(free)
        await until(lambda: worker.status == Status.running, "the resume")
        seen["readings"] = (await client.run(readings_of))[address]
    return seen


@STOCK_AND_PATCHED
@pytest.mark.parametrize("how", list(ALLOCATIONS))
def test_a_worker_that_grows_past_pause_is_paused_as_promptly_as_stock(patched, how):
    seen = asyncio.run(scenario(patched, how))
    readings = seen["readings"]
    started, at = readings.index("started"), readings.index("allocated")
    before, thinking, after = (
        readings[:started],
        readings[started + 1 : at],
        readings[at + 1 :],
    )
    # Both arms: paused by a reading past the threshold (then resumed once
    # freed, which the scenario waited for).
    assert seen["paused"]
    assert any(memory > 0.8 * LIMIT for memory, *_ in after)
    stock_checks = [r for r in after if r[4] == "stock"]
    if not patched:
        assert {(r[1], r[2], r[4]) for r in before + after} == {
            (INTERVAL_MS, False, "stock")
        }
        return
    # The monitor slept before the allocation: the test took the path.
    assert any(r[2] for r in before)
    first = after[0]
    if how == "timer":
        # The loop's own callback: read before the loop waited again, by a
        # sleeping monitor's probe, which woke it.
        assert first[4] == "look" and first[2] is True
        assert first[0] > 0.8 * LIMIT
    else:
        # A thread computing (a task's, or one dask does not know) woke the
        # monitor before it allocated: stock's check on its grid meanwhile.
        checks = [r for r in thinking if r[4] == "stock"]
        assert len(checks) >= 2
        assert all(r[1] == INTERVAL_MS and not r[2] for r in checks)
        assert first[4] == "look" or first[1] == INTERVAL_MS
    # After the allocation stock's check ran only on its own grid, never
    # stretched, until the pause.
    paused = next(i for i, r in enumerate(stock_checks) if r[3] == "paused")
    assert stock_checks[:paused]
    assert all(r[1] == INTERVAL_MS for r in stock_checks[:paused])


def test_threads_dask_parks_and_ones_it_does_not():
    """The frames the patch reads as parked, and a few it must not."""
    from distributed.threadpoolexecutor import ThreadPoolExecutor

    threads = dask_memory.Threads()
    pool = ThreadPoolExecutor(1)
    stop = threading.Event()
    try:
        pool.submit(int).result()
        user = threading.Thread(target=stop.wait, name="waits on an event")
        user.start()
        idents = {thread.ident: thread for thread in threading.enumerate()}
        pooled = next(t for t in pool._threads)
        # dask's executor thread on its empty queue: parked.
        frames = dask_memory.sys._current_frames()
        for _ in range(PATIENCE_S * 100):
            if threads.thread_parked(frames[pooled.ident], None, {}, {}):
                break
            time.sleep(0.01)
            frames = dask_memory.sys._current_frames()
        else:
            raise AssertionError("dask's idle executor thread is not parked")
        # A thread of the application's waiting on an Event (it may time
        # out or be set by anything): not parked.
        assert not threads.thread_parked(frames[user.ident], None, {}, {})
        assert idents[user.ident] is user
        # A queued job: the executor thread is no longer parked.
        hold = threading.Event()
        pool.submit(hold.wait)
        frames = dask_memory.sys._current_frames()
        assert not threads.thread_parked(frames[pooled.ident], None, {}, {})
        hold.set()
    finally:
        stop.set()
        pool.shutdown()


def uninstall_memory(dask_worker: Any) -> float:
    import fastloop

    fastloop.uninstall(["dask_memory"])
    return float(dask_worker.periodic_callbacks["memory_monitor"].callback_time)


def callback_time(dask_worker: Any) -> float:
    return float(dask_worker.periodic_callbacks["memory_monitor"].callback_time)


def test_a_thread_of_a_c_queue_pool_is_parked_once_its_cpu_time_stands_still():
    """concurrent.futures' threads (asyncio's default executor) wait inside
    C: parked on an empty queue only when their CPU time did not move
    between two looks."""
    import concurrent.futures

    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        pool.submit(int).result()
        (pooled,) = pool._threads
        native = pooled.native_id
        threads = dask_memory.Threads()
        looks = []
        for _ in range(PATIENCE_S * 100):
            cpu = {native: dask_memory.thread_cpu_ns(native)}
            frames = dask_memory.sys._current_frames()
            seen: dict[int, int] = {}
            looks.append(threads.thread_parked(frames[pooled.ident], native, cpu, seen))
            threads.cpu = seen
            if looks[-1]:
                break
            time.sleep(0.01)
        # The first look has nothing to compare with: never parked.
        assert looks[0] is False
        assert looks[-1] is True
        hold = threading.Event()
        pool.submit(hold.wait)
        cpu = {native: dask_memory.thread_cpu_ns(native)}
        frames = dask_memory.sys._current_frames()
        assert not threads.thread_parked(frames[pooled.ident], native, cpu, {})
        hold.set()
    finally:
        pool.shutdown()


def test_a_thread_python_does_not_know_of_keeps_the_worker_awake(monkeypatch):
    """More threads in the kernel's count than Python has frames for (a C
    library's): whatever they do, not parked."""
    frames = len(dask_memory.sys._current_frames())
    monkeypatch.setattr(dask_memory, "threads_of_process", lambda: frames + 1)
    assert dask_memory.Threads().parked() is False


def test_uninstall_puts_a_sleeping_callback_back_to_its_interval():
    async def main() -> tuple[float, float]:
        async with cluster(patched=True) as (client, _, address):
            stretched = (await client.run(uninstall_memory))[address]
            # The undo runs on the worker's loop, after the call returns.
            for _ in range(PATIENCE_S * 20):
                restored = (await client.run(callback_time))[address]
                if restored != stretched:
                    break
                await asyncio.sleep(0.05)
            return stretched, restored

    stretched, restored = asyncio.run(main())
    assert stretched > INTERVAL_MS
    assert restored == INTERVAL_MS


TWO_WORKERS = """
import asyncio, dask, fastloop
from distributed import Scheduler, Worker

async def main():
    with dask.config.set({"distributed.worker.memory.terminate": False}):
        fastloop.install(["add_callback", "dask_memory"])
        async with Scheduler(port=0, dashboard_address=":0") as s:
            workers = [
                Worker(s.address, nthreads=1, memory_limit="4GiB",
                       dashboard_address=":0")
                for _ in range(2)
            ]
            await asyncio.gather(*workers)
            state = s.io_loop._fastloop_state
            for _ in range(600):
                if all(w.memory_manager._fastloop_memory.asleep for w in workers
                       if hasattr(w.memory_manager, "_fastloop_memory")) and all(
                       hasattr(w.memory_manager, "_fastloop_memory") for w in workers):
                    break
                await asyncio.sleep(0.05)
            else:
                print("never asleep")
                return
            first = state.iteration
            await asyncio.sleep(2)
            print("iterations", state.iteration - first)
            await asyncio.gather(*(w.close() for w in workers))

asyncio.run(main())
"""


def test_two_sleeping_workers_on_one_loop_let_it_wait():
    """Two workers of one process share a loop (LocalCluster(processes=False)):
    one probe serves both, and neither keeps queueing behind the other's."""
    import subprocess

    result = subprocess.run(
        [sys.executable, "-c", TWO_WORKERS],
        capture_output=True,
        text=True,
        timeout=PATIENCE_S * 4,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (line,) = [x for x in result.stdout.splitlines() if x.startswith(("iter", "never"))]
    # An idle loop of two workers and a scheduler: a few hundred iterations
    # in 2 s; probes queueing behind each other made it hundreds of thousands.
    assert line.startswith("iterations"), line
    assert int(line.split()[1]) < 5000
