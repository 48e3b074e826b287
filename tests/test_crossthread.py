"""Cross-thread add_callback and coalesced wake-ups: contracts, stress, counters.

Stress scenarios run under stock Tornado too, as the reference: the same
checks must hold there, or the test itself is wrong.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import inspect
import os
import signal
import sys
import threading
import time
import weakref

import pytest
from tornado.ioloop import IOLoop

import fastloop
from tests_support import (
    ThreadSafeHandle314,
    current_loop,
    differential,
    simulate_python_314,
)

BOTH = ["add_callback", "wakeup"]
producer_id: contextvars.ContextVar[int] = contextvars.ContextVar(
    "producer_id", default=-1
)


class LoopThread:
    """An IOLoop running in its own thread, as in dask's workers."""

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(10)

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.io = IOLoop.current()
        self.io.add_callback(self._first_callback)
        self.io.start()
        self.io.close(all_fds=True)

    def _first_callback(self) -> None:
        self.ready.set()

    def call(self, fn, *args):
        """Run fn on the loop thread and wait for its result."""
        box = []
        done = threading.Event()

        def run():
            box.append(fn(*args))
            done.set()

        self.loop.call_soon_threadsafe(run)
        assert done.wait(30), "loop thread did not respond"
        return box[0]

    def stop(self) -> None:
        self.io.add_callback(self.io.stop)
        self.thread.join(30)
        assert not self.thread.is_alive(), "loop thread hung"


class HeldLoopThread(LoopThread):
    """A LoopThread whose loop stays inside a callback until ``release()``.

    The first callback was added before the loop started, with its wake-up
    byte: the first poll sees that byte and queues the self-pipe read behind
    the callback.  The callback queues the holder behind that read, so the
    holder runs once the pipe is drained.  While held, the pipe is empty, no
    wake-up is pending, the ready queue is empty and nothing runs or reads
    the pipe: what producers queue meanwhile is fixed by construction, not
    by how threads are scheduled.
    """

    def __init__(self) -> None:
        self._release = threading.Event()
        super().__init__()

    def _first_callback(self) -> None:
        self.loop.call_soon(self._hold)

    def _hold(self) -> None:
        self.ready.set()
        self._release.wait(120)  # a failing test releases it in its finally

    def release(self) -> None:
        self._release.set()


def record_self_pipe_reads(loop) -> list[int]:
    """The size of every read of ``loop``'s self-pipe, from now on."""
    sizes: list[int] = []
    process = loop._process_self_data

    def process_self_data(data):
        sizes.append(len(data))
        process(data)

    loop._process_self_data = process_self_data
    return sizes


def when_about_to_sleep(loop) -> threading.Event:
    """An event set each time ``loop`` polls with a timeout other than 0."""
    about_to_sleep = threading.Event()
    select = loop._selector.select

    def select_then_sleep(timeout=None):
        if timeout is None or timeout > 0:
            about_to_sleep.set()
        return select(timeout)

    loop._selector.select = select_then_sleep
    return about_to_sleep


def stress(producers: int, per_producer: int):
    """Producers and the loop thread all schedule; return what was observed."""
    runner = LoopThread()
    reads = record_self_pipe_reads(runner.loop)
    seen: list[tuple[int, int, int]] = []
    local = []
    done = threading.Event()
    total = producers * per_producer

    def record(who: int, seq: int) -> None:
        seen.append((who, seq, producer_id.get()))
        if len(seen) == total:
            done.set()

    def local_work(n: int) -> None:  # the loop thread's own traffic meanwhile
        local.append(n)
        if n < 2000 and not done.is_set():
            runner.io.add_callback(local_work, n + 1)

    go = threading.Event()

    def produce(who: int) -> None:
        producer_id.set(who)
        go.wait()
        add = runner.io.add_callback
        for seq in range(per_producer):
            add(record, who, seq)

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(producers)]
    for thread in threads:
        thread.start()
    runner.io.add_callback(local_work, 0)
    go.set()
    for thread in threads:
        thread.join()
    assert done.wait(120), f"only {len(seen)} of {total} callbacks ran"
    runner.stop()
    return seen, local, reads


def check_stress(seen, producers, per_producer):
    assert len(seen) == producers * per_producer  # none lost
    assert len(set((w, s) for w, s, _ in seen)) == len(seen)  # none duplicated
    for who in range(producers):
        sequence = [s for w, s, _ in seen if w == who]
        assert sequence == list(range(per_producer)), f"producer {who} reordered"
    assert all(w == ctx for w, _, ctx in seen)  # producer's context


@pytest.mark.parametrize("patches", [[], BOTH], ids=["stock", "patched"])
def test_stress_8_threads_exactly_once_in_order_in_context(patches):
    """What holds however the threads are scheduled; no claim on coalescing.

    How many callbacks share a batch, and how many wake-ups are written,
    depends on how the producers and the loop interleave: the held-loop
    tests below show coalescing where construction fixes the counts.
    """
    with fastloop.patched(patches):
        fastloop.reset_stats()
        seen, local, reads = stress(producers=8, per_producer=20_000)
        snapshot = fastloop.stats()
    check_stress(seen, 8, 20_000)
    assert local == list(range(len(local)))  # the loop's own chain, undisturbed
    if patches:
        counted, wakeup = snapshot.add_callback, snapshot.wakeup
        # 160,000 plus the harness's own three (start-up, first local_work, stop).
        assert counted.remote_callbacks == 160_003
        assert counted.batched == 160_003  # every one ran in a batch, once
        assert 1 <= counted.batches <= counted.batched
        # Only a new batch asks for a wake-up, and nothing else here does.
        assert wakeup.requested == counted.batches
        assert 1 <= wakeup.written <= wakeup.requested
        # At most one wake-up outstanding: never two bytes in the pipe at once.
        assert reads and max(reads) == 1, f"read {max(reads)} bytes at once"
    else:
        assert snapshot.add_callback.remote_callbacks == 0


def held_loop_burst(calls: int, threads: int, use_ioloop: bool):
    """Producers call while the loop is held, then the loop runs it all.

    Returns the counters as the producers left them (the loop still held),
    the size of each self-pipe read until the loop had run every callback,
    and the counters once one more wake-up was asked for after that.
    """
    runner = HeldLoopThread()
    ran = []
    all_ran = threading.Event()

    def tick():
        ran.append(1)
        if len(ran) == calls:
            # The self-pipe read of this iteration is queued behind the
            # callbacks: this runs in the next one, once the pipe is drained.
            runner.loop.call_soon(all_ran.set)

    add = runner.io.add_callback if use_ioloop else runner.loop.call_soon_threadsafe

    def produce():
        for _ in range(calls // threads):
            add(tick)

    try:
        reads = record_self_pipe_reads(runner.loop)
        fastloop.reset_stats()
        workers = [threading.Thread(target=produce) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        queued = fastloop.stats()
    finally:
        runner.release()
    assert all_ran.wait(60)
    read = list(reads)
    # The loop has drained the pipe since: a new wake-up is written.
    runner.call(lambda: None)
    after = fastloop.stats()
    runner.stop()
    assert len(ran) == calls
    return queued, read, after


def test_counters_show_coalescing_while_the_loop_is_busy():
    with fastloop.patched(BOTH):
        queued, reads, after = held_loop_burst(10_000, 4, use_ioloop=True)
    # While the loop is held its ready queue is empty and no wake-up is
    # pending: the first callback opens a batch and writes the one byte,
    # the 9,999 others join that batch, from whichever of the 4 threads.
    assert queued.add_callback.remote_callbacks == 10_000
    assert (queued.wakeup.requested, queued.wakeup.written) == (1, 1)
    assert queued.add_callback.batches == 0  # counted when they run
    assert (after.add_callback.batches, after.add_callback.batched) == (1, 10_000)
    assert reads == [1]
    # runner.call's call_soon_threadsafe: the flag was cleared by the drain.
    assert (after.wakeup.requested, after.wakeup.written) == (2, 2)


def test_call_soon_threadsafe_writes_once_per_pending_wakeup():
    with fastloop.patched(["wakeup"]):
        queued, reads, after = held_loop_burst(3_000, 3, use_ioloop=False)
    # Nothing drains the pipe while the loop is held: one byte for 3,000 calls.
    assert (queued.wakeup.requested, queued.wakeup.written) == (3_000, 1)
    assert reads == [1]
    assert (after.wakeup.requested, after.wakeup.written) == (3_001, 2)


def test_call_soon_threadsafe_of_3_14s_shape_still_writes_once(monkeypatch):
    """gh-128340: 3.14 appends a _ThreadSafeHandle itself, then wakes; same flag."""
    simulate_python_314(monkeypatch)
    assert fastloop.available()["wakeup"] is None  # the shape is recognised
    made = ThreadSafeHandle314.made
    with fastloop.patched(["wakeup"]) as active:
        assert "wakeup" in active
        queued, reads, after = held_loop_burst(3_000, 3, use_ioloop=False)
    # The 3.14 path ran: the burst, plus the harness's start, call and stop.
    assert ThreadSafeHandle314.made - made == 3_003
    assert (queued.wakeup.requested, queued.wakeup.written) == (3_000, 1)
    assert reads == [1]
    assert (after.wakeup.requested, after.wakeup.written) == (3_001, 2)


@pytest.mark.parametrize("patches", [[], ["wakeup"]], ids=["stock", "patched"])
def test_call_soon_threadsafe_of_3_14s_shape_runs_all_in_order(monkeypatch, patches):
    """Producers queue while the loop is held: each handle runs once, in order."""
    simulate_python_314(monkeypatch)
    producers, per_producer = 3, 500
    with fastloop.patched(patches):
        runner = HeldLoopThread()
        seen: list[tuple[int, int, int]] = []
        all_ran = threading.Event()

        def record(who: int, seq: int) -> None:
            seen.append((who, seq, producer_id.get()))
            if len(seen) == producers * per_producer:
                all_ran.set()

        def produce(who: int) -> None:
            producer_id.set(who)
            for seq in range(per_producer):
                runner.loop.call_soon_threadsafe(record, who, seq)

        try:
            threads = [
                threading.Thread(target=produce, args=(who,))
                for who in range(producers)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            runner.release()
        assert all_ran.wait(60)
        runner.stop()
    check_stress(seen, producers, per_producer)


def test_stock_reference_writes_once_per_call():
    # Few enough calls that the kernel keeps every byte (asyncio drops a
    # write to a full self-pipe silently).
    queued, reads, after = held_loop_burst(60, 3, use_ioloop=False)
    assert queued.wakeup.written == after.wakeup.written == 0  # stock counts nothing
    assert sum(reads) == 60  # one byte per call


def test_a_handle_between_callbacks_splits_the_batch_and_shares_the_wakeup():
    def scenario():
        runner = HeldLoopThread()
        order = []
        done = threading.Event()

        def produce():
            for name in ("a1", "a2", "a3"):
                runner.io.add_callback(order.append, name)
            runner.loop.call_soon_threadsafe(order.append, "handle")
            for name in ("b1", "b2"):
                runner.io.add_callback(order.append, name)
            # Runs on the loop after this iteration's self-pipe read.
            runner.io.add_callback(runner.loop.call_soon, done.set)

        try:
            reads = record_self_pipe_reads(runner.loop)
            fastloop.reset_stats()
            producer = threading.Thread(target=produce)
            producer.start()
            producer.join()
            queued = fastloop.stats()
        finally:
            runner.release()
        assert done.wait(60)
        after = fastloop.stats()
        read = list(reads)
        runner.stop()
        return order, queued.wakeup, after.add_callback, read

    stock, patched = differential(scenario, BOTH)
    order, wakeup, counted, reads = patched
    assert stock[0] == order == ["a1", "a2", "a3", "handle", "b1", "b2"]
    assert sum(stock[3]) == 7  # stock: one byte per call
    # The handle ends the first batch; the second one opens behind it.
    # Three wake-ups asked for (two batches, the handle), one written.
    assert (wakeup.requested, wakeup.written) == (3, 1)
    assert (counted.batches, counted.batched, counted.remote_callbacks) == (2, 6, 6)
    assert reads == [1]


@pytest.mark.parametrize("patches", [[], BOTH], ids=["stock", "patched"])
def test_close_races_never_raise_or_hang(patches):
    errors = []
    with fastloop.patched(patches):
        for _ in range(200):
            runner = LoopThread()
            stop = threading.Event()

            def produce(io=runner.io, stop=stop):
                try:
                    while not stop.is_set():
                        io.add_callback(lambda: None)
                except BaseException as exc:
                    errors.append(exc)

            workers = [threading.Thread(target=produce, daemon=True) for _ in range(2)]
            for worker in workers:
                worker.start()
            try:
                runner.stop()  # stop + close while producers are still adding
                time.sleep(0.001)
            finally:
                stop.set()
            for worker in workers:
                worker.join(10)
                assert not worker.is_alive(), "producer hung"
    assert errors == []


def test_close_frees_callbacks_queued_off_loop_and_later_calls_do_nothing():
    class Payload:
        pass

    def scenario():
        with current_loop() as (_, io):
            payload = Payload()
            probe = weakref.ref(payload)
            io.add_callback(print, payload)  # the loop is not running: queued
            del payload
            io.close()
            io.add_callback(print, "after close")  # no error, and never runs
            gc.collect()
            return probe() is None

    stock, patched = differential(scenario, BOTH)
    assert stock is patched is True


def test_fifo_with_handles_scheduled_between_before_start_and_from_one_thread():
    def scenario():
        with current_loop() as (loop, io):
            order = []
            io.add_callback(order.append, "a")  # set-up code, loop not running
            loop.call_soon(order.append, "b")
            io.add_callback(order.append, "c")

            def producer():
                io.add_callback(order.append, "d")
                loop.call_soon_threadsafe(order.append, "e")
                io.add_callback(order.append, "f")
                io.add_callback(io.stop)

            thread = threading.Thread(target=producer)
            thread.start()
            thread.join()
            io.start()
            io.close()
            return order

    stock, patched = differential(scenario, BOTH)
    assert stock == patched == ["a", "b", "c", "d", "e", "f"]


def test_read_interrupted_by_keyboard_interrupt_leaves_the_loop_wakeable():
    with fastloop.patched(["wakeup"]):
        loop = asyncio.new_event_loop()
        original = loop._process_self_data
        interrupted = []

        def process_self_data(data):
            if not interrupted:
                interrupted.append(True)
                raise KeyboardInterrupt
            original(data)

        loop._process_self_data = process_self_data
        try:
            loop.call_soon_threadsafe(lambda: None)  # a byte: the read raises
            with pytest.raises(KeyboardInterrupt):
                loop.run_forever()
            fastloop.reset_stats()
            got = []
            timed_out = []
            # Reached only if the wake-up below is lost.
            watchdog = loop.call_later(
                30, lambda: (timed_out.append(True), loop.stop())
            )
            about_to_sleep = when_about_to_sleep(loop)

            def later():
                assert about_to_sleep.wait(30), "the loop never went to sleep"
                loop.call_soon_threadsafe(lambda: (got.append("woken"), loop.stop()))

            thread = threading.Thread(target=later)
            thread.start()
            loop.run_forever()
            thread.join()
            watchdog.cancel()
            wakeup = fastloop.stats().wakeup
        finally:
            loop.close()
    assert timed_out == []  # woken by the thread, not by the watchdog
    assert got == ["woken"]
    assert (wakeup.requested, wakeup.written) == (1, 1)  # the flag was cleared


def test_a_wakeup_asked_for_while_the_pipe_drains_is_not_lost():
    """The flag is cleared after the drain, never before (the wakeup contract).

    A wake-up asked for mid-drain is not written (one is still pending),
    and its handle runs without one; had the flag been cleared before the
    drain, that request would write a byte the same drain swallows, leaving
    the flag set and the pipe empty: the next request would be skipped and
    the loop would sleep through it.
    """
    with fastloop.patched(["wakeup"]):
        loop = asyncio.new_event_loop()
        original = loop._process_self_data
        order = []

        def process_self_data(data):  # runs inside _read_from_self's drain
            if "drain" not in order:
                order.append("drain")
                loop.call_soon_threadsafe(order.append, "asked mid-drain")
            original(data)

        loop._process_self_data = process_self_data
        timed_out = []
        watchdog = loop.call_later(30, lambda: (timed_out.append(True), loop.stop()))
        about_to_sleep = when_about_to_sleep(loop)

        def later():
            assert about_to_sleep.wait(30), "the loop never went to sleep"
            loop.call_soon_threadsafe(lambda: (order.append("woken"), loop.stop()))

        try:
            fastloop.reset_stats()
            loop.call_soon_threadsafe(order.append, "first")  # a byte: a drain
            thread = threading.Thread(target=later)
            thread.start()
            loop.run_forever()
            thread.join()
            watchdog.cancel()
            wakeup = fastloop.stats().wakeup
        finally:
            loop.close()
    assert timed_out == []
    assert order == ["first", "drain", "asked mid-drain", "woken"]
    # Three asked for: the first and the last written, the mid-drain one not.
    assert (wakeup.requested, wakeup.written) == (3, 2)


@pytest.mark.parametrize("exception", [KeyboardInterrupt, SystemExit])
def test_keyboard_interrupt_mid_batch_loses_nothing(exception):
    def interrupt():
        raise exception()

    def scenario():
        with current_loop() as (loop, io):
            order = []

            def produce():
                for item in ("a", interrupt, "b", "c"):
                    if callable(item):
                        io.add_callback(item)
                    else:
                        io.add_callback(order.append, item)

            thread = threading.Thread(target=produce)
            thread.start()
            thread.join()
            with pytest.raises(exception):
                loop.run_forever()
            order.append("interrupted")
            loop.call_soon(loop.stop)
            loop.run_forever()
            io.close()
            return order

    stock, patched = differential(scenario, BOTH)
    assert stock == patched == ["a", "interrupted", "b", "c"]


def test_uninstall_with_callbacks_still_queued_runs_them():
    with fastloop.patched(BOTH):
        runner = LoopThread()
        fastloop.reset_stats()
        release = threading.Event()
        ran = []
        runner.loop.call_soon_threadsafe(release.wait)
        producer = threading.Thread(
            target=lambda: [runner.io.add_callback(ran.append, i) for i in range(100)]
        )
        producer.start()
        producer.join()
        assert fastloop.stats().add_callback.remote_callbacks == 100
    assert fastloop.installed() == frozenset()
    release.set()
    runner.call(lambda: None)
    runner.stop()
    assert ran == list(range(100))


def test_several_loops_in_several_threads_stay_independent():
    with fastloop.patched(BOTH):
        runners = [LoopThread() for _ in range(3)]
        seen = {i: [] for i in range(3)}
        finished = threading.Barrier(4)

        def produce(i):
            for n in range(5_000):
                runners[i].io.add_callback(
                    lambda i=i, n=n: seen[i].append((n, threading.get_ident()))
                )
            runners[i].io.add_callback(lambda: None)
            finished.wait()

        producers = [threading.Thread(target=produce, args=(i,)) for i in range(3)]
        for producer in producers:
            producer.start()
        finished.wait()
        for runner in runners:
            runner.call(lambda: None)  # a later callback: all before it ran
        for runner in runners:
            runner.stop()
    for i, runner in enumerate(runners):
        assert [n for n, _ in seen[i]] == list(range(5_000))
        assert {ident for _, ident in seen[i]} == {runner.thread.ident}


def test_signals_still_wake_a_sleeping_loop():
    if not hasattr(signal, "SIGUSR1"):
        pytest.skip("needs SIGUSR1")
    with fastloop.patched(BOTH):
        loop = asyncio.new_event_loop()
        got = []
        loop.add_signal_handler(
            signal.SIGUSR1, lambda: (got.append("signal"), loop.stop())
        )
        # A pending coalesced wake-up first, then the signal while asleep.
        loop.call_soon_threadsafe(lambda: got.append("threadsafe"))
        about_to_sleep = when_about_to_sleep(loop)

        def kill_once_asleep():
            assert about_to_sleep.wait(30), "the loop never went to sleep"
            os.kill(os.getpid(), signal.SIGUSR1)

        killer = threading.Thread(target=kill_once_asleep)
        killer.start()
        watchdog = loop.call_later(30, loop.stop)  # reached only if the signal is lost
        loop.run_forever()
        watchdog.cancel()
        loop.remove_signal_handler(signal.SIGUSR1)
        loop.close()
        killer.join()
    assert got == ["threadsafe", "signal"]


def test_loop_created_before_install_keeps_writing_every_time():
    loop = asyncio.new_event_loop()  # its self-pipe reader is the stock one
    try:
        with fastloop.patched(["wakeup"]):
            fastloop.reset_stats()
            for _ in range(10):
                loop.call_soon_threadsafe(lambda: None)
            written = fastloop.stats().wakeup.written
            loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()
    assert written == 10


def test_run_in_executor_storm_completes():
    async def storm():
        loop = asyncio.get_running_loop()
        return await asyncio.gather(
            *(loop.run_in_executor(None, pow, i, 2) for i in range(2_000))
        )

    with fastloop.patched(BOTH):
        fastloop.reset_stats()
        assert asyncio.run(storm()) == [i * i for i in range(2_000)]
        snapshot = fastloop.stats()
    assert snapshot.wakeup.written <= snapshot.wakeup.requested
    if sys.version_info < (3, 14):
        # From 3.14 asyncio copies a job already finished when its future is
        # chained on the loop thread, without a wake-up; before, each woke it.
        assert snapshot.wakeup.requested >= 2_000
    else:
        assert 0 < snapshot.wakeup.requested <= 2_001


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_starts_clean():
    with fastloop.patched(BOTH):
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        io = IOLoop.current()
        parent_ran = []
        # Leave a queued callback and a pending wake-up behind in the parent.
        thread = threading.Thread(
            target=io.add_callback, args=(parent_ran.append, "parent")
        )
        thread.start()
        thread.join()
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            code = 1
            try:
                loop._ready.clear()  # the parent's queued batch is the parent's
                ran = []

                def produce():
                    io.add_callback(ran.append, "child")
                    io.add_callback(io.stop)

                threading.Thread(target=produce).start()
                timeout = loop.call_later(10, io.stop)
                io.start()
                timeout.cancel()
                code = 0 if ran == ["child"] else 2
            finally:
                os.write(write_end, str(code).encode())
                os._exit(0)
        os.close(write_end)
        os.waitpid(pid, 0)
        child_code = os.read(read_end, 16)
        os.close(read_end)
        loop.call_soon(io.stop)
        io.start()
        io.close()
        asyncio.set_event_loop(None)
        loop.close()
    assert child_code == b"0"
    assert parent_ran == ["parent"]


def test_a_finalizer_that_adds_a_callback_mid_call_neither_deadlocks_nor_loses_it(
    monkeypatch,
):
    # distributed's Future.__del__ calls add_callback, and a task thread's
    # allocation inside add_callback can run it (seen as a hang of
    # test_actor.py::test_worker_actions): the nested call comes on the same
    # thread while the outer one holds the batch lock.  Simulated exactly:
    # the batch's own allocation runs the "finalizer".
    from fastloop.patches import add_callback as patch

    ran: list[str] = []
    held = HeldLoopThread()
    try:
        with fastloop.patched(["add_callback"]):

            class FinalizingBatch(patch.RemoteBatch):
                __slots__ = ()
                nested = True

                def __init__(self, *args, **kwargs):
                    if FinalizingBatch.nested:
                        FinalizingBatch.nested = False
                        held.io.add_callback(ran.append, "from the finalizer")
                    super().__init__(*args, **kwargs)

            monkeypatch.setattr(patch, "RemoteBatch", FinalizingBatch)
            producer = threading.Thread(
                target=held.io.add_callback, args=(ran.append, "outer"), daemon=True
            )
            producer.start()
            producer.join(30)
            assert not producer.is_alive(), "add_callback deadlocked on its own lock"
            held.release()
            assert held.call(lambda: list(ran)) == ["from the finalizer", "outer"]
    finally:
        held.release()
        held.stop()


def pause_at(code, marker: str, reached: threading.Event, resume: threading.Event):
    """A trace function that holds this thread before ``code``'s line holding
    ``marker`` runs, setting ``reached``, until ``resume`` is set."""
    lines, first = inspect.getsourcelines(code)
    target = {first + i for i, line in enumerate(lines) if marker in line}
    assert target, f"{marker!r} is not in {code.co_name}"

    def local(frame, event, arg):
        if event == "line" and frame.f_lineno in target:
            reached.set()
            assert resume.wait(30)
        return local

    def trace(frame, event, arg):
        return local if frame.f_code is code else None

    return trace


def test_a_producer_paused_across_uninstall_and_install_loses_nothing():
    """A producer that read the tail under a new install's lock while the loop
    starts a batch queued under the old one: the interleaving forced by
    holding the producer just before it appends."""

    def scenario():
        ran: list[int] = []
        with current_loop() as (loop, io):
            io.add_callback(ran.append, 1)  # queued off the loop, not running yet
            if fastloop.installed():
                fastloop.uninstall()
                fastloop.install(["add_callback"])
            reached, resume = threading.Event(), threading.Event()
            add_callback = type(io).add_callback

            def produce():
                try:
                    if hasattr(add_callback, "__wrapped__"):
                        code = add_callback.__code__
                        marker = "tail._items += item"
                        sys.settrace(pause_at(code, marker, reached, resume))
                    io.add_callback(ran.append, 2)
                finally:
                    sys.settrace(None)
                    reached.set()

            producer = threading.Thread(target=produce)
            producer.start()
            try:
                assert reached.wait(30)
                loop.call_soon(loop.stop)
                loop.run_forever()  # one iteration: the first batch runs
            finally:
                resume.set()
                producer.join(30)
            for _ in range(3):
                loop.call_soon(loop.stop)
                loop.run_forever()
        return ran

    stock, patched = differential(scenario, ["add_callback"])
    assert stock == patched == [1, 2]
