"""The blocked-loop watchdog: one episode per block, with its stack, nothing else."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
import time

import pytest
from tornado.ioloop import IOLoop

import fastloop
from fastloop.cli import doctor
from fastloop.observers import _ticker, watchdog
from tests_support import require_installed_pth


@pytest.fixture(autouse=True)
def no_thread_left_behind():
    fastloop.reset_stats()
    yield
    leftover = [t.name for t in threading.enumerate() if t.name.startswith("fastloop")]
    assert leftover == []


async def until(condition, deadline_s=20.0):
    """Let the loop run until ``condition()``; fail the test after a long while."""
    give_up = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < give_up, "condition never became true"
        await asyncio.sleep(0.005)


def watchdog_records(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "fastloop"]


class WatchdogClock:
    """The watchdog's clock: 1 ns per read, or 10 ms per read while ``flowing``.

    Heartbeat lag is then a few nanoseconds however the machine schedules
    the loop and watchdog threads: only the stretches where a test makes
    time flow (blocking a loop, or keeping one stopped) can look like a
    block, and each read while flowing is a watchdog tick seeing time pass.
    """

    STEP_NS = 10_000_000

    def __init__(self) -> None:
        self.now = 10**12
        self.flowing = False
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            self.now += self.STEP_NS if self.flowing else 1
            return self.now

    def advance(self, ns: int) -> None:
        with self._lock:
            self.now += ns

    def flow_for(self, ns: int) -> None:
        """Let ``ns`` pass as the watchdog's ticks see it; blocks this thread."""
        target = self.now + ns
        self.flowing = True
        try:
            give_up = time.monotonic() + 30
            while self.now < target and time.monotonic() < give_up:
                time.sleep(0.001)
        finally:
            self.flowing = False


@pytest.fixture
def clock(monkeypatch):
    fake = WatchdogClock()
    monkeypatch.setattr(watchdog, "_clock", fake)
    return fake


def sleeping_handler_for_the_test(clock, caplog):
    # Blocks the loop while time flows, until the watchdog has reported it:
    # however late the watchdog thread gets to run, the block is long enough.
    clock.flowing = True
    try:
        give_up = time.monotonic() + 30
        while time.monotonic() < give_up:
            if any("blocked for" in line for line in watchdog_records(caplog)):
                break
            time.sleep(0.005)
    finally:
        clock.flowing = False


def uvloop_run(coroutine):
    uvloop = pytest.importorskip("uvloop")
    return uvloop.run(coroutine)


@pytest.mark.parametrize("runner", [asyncio.run, uvloop_run], ids=["asyncio", "uvloop"])
def test_a_blocking_callback_gives_one_episode_with_it_in_the_stack(
    caplog, runner, clock
):
    caplog.set_level(logging.WARNING, logger="fastloop")

    async def main():
        io = IOLoop.current()  # watch() with no loop watches every IOLoop
        with fastloop.watch(threshold_ms=50):
            await until(lambda: fastloop.stats().watchdog.beats >= 2)
            io.add_callback(sleeping_handler_for_the_test, clock, caplog)
            await until(lambda: fastloop.stats().watchdog.episodes >= 1)
            beats = fastloop.stats().watchdog.beats
            await until(lambda: fastloop.stats().watchdog.beats >= beats + 3)

    runner(main())
    watched = fastloop.stats().watchdog
    assert watched.episodes == 1
    assert watched.max_blocked_ns == watched.blocked_ns > 50_000_000
    assert watched.max_lag_ns >= watched.max_blocked_ns
    assert not watched.watching
    blocked, recovered = watchdog_records(caplog)
    assert "event loop on thread 'MainThread' blocked for" in blocked
    assert "sleeping_handler_for_the_test" in blocked
    assert "time.sleep(0.005)" in blocked  # the line it is blocked at
    assert __file__ in blocked
    assert "responsive again after" in recovered
    assert "blocked episodes              1" in fastloop.report()


def test_a_block_that_ends_as_the_loop_closes_is_one_episode(caplog, clock):
    caplog.set_level(logging.WARNING, logger="fastloop")

    async def main():
        IOLoop.current()
        await until(lambda: fastloop.stats().watchdog.beats >= 2)
        sleeping_handler_for_the_test(clock, caplog)  # then the loop stops, closes

    with fastloop.watch(threshold_ms=50):
        asyncio.run(main())
        give_up = time.monotonic() + 20
        while fastloop.stats().watchdog.episodes < 1 and time.monotonic() < give_up:
            time.sleep(0.01)
    assert fastloop.stats().watchdog.episodes == 1
    blocked, recovered = watchdog_records(caplog)
    assert "sleeping_handler_for_the_test" in blocked
    assert "responsive again after" in recovered


def test_a_loop_closed_between_two_ticks_mid_episode_ends_the_episode(caplog):
    # The race the end-to-end test above rarely hits: between two ticks the
    # blocked loop finishes, stops, and IOLoop.close() drops it from
    # Tornado's registry.  Driven tick by tick on a stopped watchdog.
    caplog.set_level(logging.WARNING, logger="fastloop")
    dog = fastloop.watch(threshold_ms=50)
    dog.stop()
    io = IOLoop(make_current=False)
    blocked = watchdog._Watched(io.asyncio_loop)
    blocked.posted_ns = watchdog._clock() - 80_000_000
    blocked.blocked = True
    dog._watched = {id(io.asyncio_loop): blocked}
    io.close()
    assert dog._tick()
    assert dog._watched == {}
    assert fastloop.stats().watchdog.episodes == 1
    assert fastloop.stats().watchdog.blocked_ns >= 80_000_000
    (recovered,) = watchdog_records(caplog)
    assert "responsive again after" in recovered


def test_a_busy_but_responsive_loop_has_no_episode(caplog, clock):
    caplog.set_level(logging.WARNING, logger="fastloop")

    async def main():
        io = IOLoop.current()
        finished = asyncio.get_running_loop().create_future()
        left = [300]

        def two_ms_of_work():
            time.sleep(0.002)
            clock.advance(2_000_000)  # as the watchdog sees it, too
            left[0] -= 1
            if left[0]:
                io.add_callback(two_ms_of_work)
            else:
                finished.set_result(None)

        with fastloop.watch(threshold_ms=300):
            io.add_callback(two_ms_of_work)
            await finished
            await until(lambda: fastloop.stats().watchdog.beats >= 5)

    asyncio.run(main())
    assert fastloop.stats().watchdog.episodes == 0
    assert watchdog_records(caplog) == []


def test_loops_in_several_threads_each_get_their_own_episodes(caplog, clock):
    """Two loops running in their threads; the watchdog driven tick by tick."""
    caplog.set_level(logging.WARNING, logger="fastloop")
    dog = fastloop.watch(threshold_ms=50)
    dog.stop()
    names = ("blocking-loop", "healthy-loop")
    ioloops = {}
    running = threading.Barrier(3)
    release = threading.Event()

    def run_loop(name):
        async def main():
            ioloops[name] = IOLoop.current()
            running.wait()
            await asyncio.get_running_loop().run_in_executor(None, release.wait)

        asyncio.run(main())

    def heartbeat_ran(*which):
        give_up = time.monotonic() + 30
        for name in which:
            watched = dog._watched[id(ioloops[name].asyncio_loop)]
            while watched.ran_ns is None:
                assert time.monotonic() < give_up, f"{name} never ran a heartbeat"
                time.sleep(0.001)

    entered, unblock = threading.Event(), threading.Event()

    def blocked_by_the_test():
        entered.set()
        unblock.wait(30)

    threads = [threading.Thread(target=run_loop, args=(n,), name=n) for n in names]
    for thread in threads:
        thread.start()
    try:
        running.wait()
        dog._tick()  # a heartbeat to each loop
        heartbeat_ran(*names)
        ioloops["blocking-loop"].add_callback(blocked_by_the_test)
        assert entered.wait(30)
        dog._tick()  # lags taken; new heartbeats, one stuck behind the block
        heartbeat_ran("healthy-loop")
        clock.advance(80_000_000)
        dog._tick()  # 80 ms > 50 ms: blocking-loop's episode, with its stack
        unblock.set()
        heartbeat_ran(*names)
        dog._tick()  # it answered: the episode ends
    finally:
        unblock.set()
        release.set()
        for thread in threads:
            thread.join()
    assert fastloop.stats().watchdog.episodes == 1
    blocked, recovered = watchdog_records(caplog)
    assert "thread 'blocking-loop' blocked" in blocked
    assert "blocked_by_the_test" in blocked
    assert "thread 'blocking-loop' responsive again after 80.0 ms" in recovered


def test_time_outside_a_stopped_loop_is_not_a_block(caplog, clock):
    caplog.set_level(logging.WARNING, logger="fastloop")
    io = IOLoop(make_current=False)
    try:
        with fastloop.watch(threshold_ms=50, loop=io):
            for _ in range(3):
                io.run_sync(lambda: asyncio.sleep(0.05))
                # The loop is not running: 200 ms pass, as the watchdog's
                # ticks see it, and there is nothing to report.
                clock.flow_for(200_000_000)
    finally:
        io.close()
    assert fastloop.stats().watchdog.episodes == 0
    assert watchdog_records(caplog) == []


def test_watching_one_loop_ends_when_it_closes():
    io = IOLoop(make_current=False)
    dog = fastloop.watch(threshold_ms=20, loop=io)
    io.run_sync(lambda: until(lambda: fastloop.stats().watchdog.beats >= 1))
    io.close()
    give_up = time.monotonic() + 20
    while dog.running and time.monotonic() < give_up:
        time.sleep(0.01)
    assert not dog.running
    assert fastloop.stats().watchdog.beats >= 1
    dog.stop()  # idempotent


@pytest.mark.parametrize("bad", [0, -5, "abc", float("nan"), float("inf"), None])
def test_bad_thresholds_are_refused_clearly(bad):
    with pytest.raises(ValueError, match=r"threshold_ms=.*expected a number"):
        fastloop.watch(threshold_ms=bad)
    with pytest.raises(ValueError, match=r"block_ms.*expected a number > 0"):
        fastloop.configure(block_ms=bad if bad is not None else "none")


def test_configure_block_ms_starts_and_stops_the_process_watchdog():
    fastloop.configure(block_ms=75)
    try:
        assert fastloop.stats().watchdog.watching
        assert "on, threshold 75 ms" in doctor.render(doctor.diagnose({}))
        fastloop.configure(block_ms=40)  # re-threshold: still exactly one thread
        names = [t.name for t in threading.enumerate()]
        assert names.count("fastloop-watchdog") == 1
    finally:
        fastloop.configure(block_ms=None)
    assert not fastloop.stats().watchdog.watching
    assert "off: set FASTLOOP_BLOCK_MS" in doctor.render(doctor.diagnose({}))


BLOCKING_APP = """
import asyncio, time
from tornado.ioloop import IOLoop

def parse_a_huge_message():
    time.sleep(0.3)

async def main():
    await asyncio.sleep(0.3)
    IOLoop.current().add_callback(parse_a_huge_message)
    await asyncio.sleep(0.5)
    print("app ran")

asyncio.run(main())
"""


def run_app(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
    return subprocess.run(
        [sys.executable, "-c", BLOCKING_APP],
        env=environ | env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_fastloop_block_ms_alone_watches_an_unchanged_app():
    require_installed_pth()
    result = run_app({"FASTLOOP_BLOCK_MS": "100"})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "app ran\n"
    # Real time here: a machine that stalls this process for 100 ms makes an
    # episode of its own, with another stack.  The 300 ms block is exactly one.
    episodes = result.stderr.split("fastloop: event loop on thread ")[1:]
    blocked = [e for e in episodes if " blocked for " in e.split("\n")[0]]
    assert len([e for e in blocked if "parse_a_huge_message" in e]) == 1
    assert result.stderr.count("responsive again after") == len(blocked)


def test_a_malformed_fastloop_block_ms_gets_one_line_and_the_app_runs_on():
    require_installed_pth()
    result = run_app({"FASTLOOP_BLOCK_MS": "soon"})
    assert result.returncode == 0
    assert result.stdout == "app ran\n"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "FASTLOOP_BLOCK_MS" in lines[0]
    assert "soon" in lines[0]
    assert "a number > 0" in lines[0]


def test_a_heartbeat_left_queued_in_a_stopped_loop_is_neither_block_nor_lag(caplog):
    # Driven tick by tick: the heartbeat is posted while the loop runs, the
    # loop stops before running it and stays stopped for four thresholds.
    caplog.set_level(logging.WARNING, logger="fastloop")
    dog = fastloop.watch(threshold_ms=50, loop=None)
    dog.stop()
    io = IOLoop(make_current=False)
    dog._only = io.asyncio_loop

    def post_then_stop():
        dog._tick()  # the loop is running: a heartbeat goes in its queue
        io.stop()  # and this iteration is its last

    try:
        io.add_callback(post_then_stop)
        io.start()
        (watched,) = dog._watched.values()
        assert watched.posted_ns is not None and watched.ran_ns is None
        time.sleep(0.2)
        assert dog._tick()  # stopped, not blocked
        assert watched.stale
        io.run_sync(lambda: asyncio.sleep(0))  # the heartbeat runs, 200 ms late
        assert dog._tick()
    finally:
        io.close()
    watched_stats = fastloop.stats().watchdog
    assert watched_stats.episodes == 0
    assert watched_stats.max_lag_ns < 200_000_000  # the stale one is not lag
    assert watchdog_records(caplog) == []


def test_a_watched_loop_that_closes_mid_episode_ends_the_episode(caplog):
    caplog.set_level(logging.WARNING, logger="fastloop")
    io = IOLoop(make_current=False)
    dog = fastloop.watch(threshold_ms=50, loop=io)
    dog.stop()
    blocked = watchdog._Watched(io.asyncio_loop)
    blocked.posted_ns = watchdog._clock() - 80_000_000
    blocked.blocked = True
    dog._watched = {id(io.asyncio_loop): blocked}
    io.close()
    assert not dog._tick()  # its only loop closed: the watchdog ends
    assert fastloop.stats().watchdog.episodes == 1
    (recovered,) = watchdog_records(caplog)
    assert "responsive again after" in recovered


def test_configure_with_the_same_block_ms_keeps_the_running_watchdog():
    fastloop.configure(block_ms=60)
    try:
        first = watchdog.process_watchdog()
        fastloop.configure(block_ms=60)
        assert watchdog.process_watchdog() is first
        assert first is not None and first.running
    finally:
        fastloop.configure(block_ms=None)


def test_a_tick_that_keeps_failing_is_logged_once_not_every_tick(caplog):
    caplog.set_level(logging.ERROR, logger="fastloop")
    calls = []

    def broken_tick():
        calls.append(1)
        raise RuntimeError("internals moved")

    ticker = _ticker.Ticker("fastloop-test-ticker", 0.001, broken_tick)
    ticker.start()
    give_up = time.monotonic() + 20
    while len(calls) < 20 and time.monotonic() < give_up:
        time.sleep(0.005)
    ticker.stop()
    assert len(calls) >= 20
    (record,) = [r for r in caplog.records if r.name == "fastloop"]
    assert "fastloop-test-ticker failed (1 times so far)" in record.getMessage()
    assert record.exc_info is not None


FORKING_APP = """
import asyncio, os, sys, time
import fastloop
from tornado.ioloop import IOLoop

fastloop.configure(block_ms=50)

async def main():
    IOLoop.current()
    await asyncio.sleep(0.2)
    pid = os.fork()
    if pid == 0:  # the child's copy of this loop never runs again
        time.sleep(0.4)
        watched = fastloop.stats().watchdog
        print("child", watched.watching, watched.episodes, flush=True)
        os._exit(0)
    # Waited for off the loop: the child may be slow to end.
    await asyncio.get_running_loop().run_in_executor(None, os.waitpid, pid, 0)
    print("parent", fastloop.stats().watchdog.episodes, flush=True)

asyncio.run(main())
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_watches_its_own_loops_not_the_parents_copies():
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
    result = subprocess.run(
        [sys.executable, "-c", FORKING_APP],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "blocked for" not in result.stderr
    assert sorted(result.stdout.split("\n")[:2]) == ["child True 0", "parent 0"]
