"""dask's loop-health tick sleeps while its loop has no I/O: figures against stock's.

In-process scheduler and worker on one loop, ``asyncio.run``, a small
``admin.tick.limit``.  Skipped without ``distributed``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import time
import types

import pytest

distributed = pytest.importorskip(
    "distributed",
    reason="needs distributed (pip install distributed); .ci/run installs it",
)
pytestmark = pytest.mark.dask

import dask  # noqa: E402
from distributed import Client, Scheduler, Worker, core  # noqa: E402

import fastloop  # noqa: E402
from fastloop.patches import dask_tick  # noqa: E402
from tests_support import STOCK_AND_PATCHED, until  # noqa: E402

#: admin.tick.limit for these tests: the patched tick sleeps half of it.
LIMIT_S = 0.4
#: How long the injected callback holds the loop: well past the limit.
BLOCK_S = 1.0
#: An idle stretch long enough for a few sleeps and cycles.
IDLE_S = 2.5


@pytest.fixture(autouse=True)
def small_limit(monkeypatch):
    # distributed.core reads admin.tick.limit once, at import, into this global.
    monkeypatch.setattr(core, "tick_maximum_delay", LIMIT_S)
    with dask.config.set({"distributed.admin.tick.limit": f"{LIMIT_S}s"}):
        yield


def patches(patched: bool) -> list[str]:
    if not patched:
        assert "dask_tick" not in fastloop.installed()
        return []
    return ["add_callback", "dask_tick"]


def stretched(server) -> bool:
    pc = server.periodic_callbacks["tick"]
    return pc.callback_time > server._tick_interval * 1000


def counted_runs(server) -> list[float]:
    """Count the tick's runs (a bound method still, as the patch checks)."""
    pc = server.periodic_callbacks["tick"]
    callback = pc.callback
    runs: list[float] = []

    def counted(self) -> None:
        runs.append(pc.callback_time)
        callback()

    pc.callback = types.MethodType(counted, server)
    return runs


class Lines(logging.Handler):
    """The unresponsive-loop lines logged, as (server type, duration)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[str, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("Event loop was unresponsive"):
            assert isinstance(record.args, tuple)
            self.lines.append((record.args[0], record.args[1]))


async def blocked_scenario(patched: bool) -> dict:
    """Idle (asleep, patched), then a callback holds the loop for BLOCK_S."""
    seen: dict = {"stretched": []}
    lines = Lines()
    logger = logging.getLogger("distributed.core")
    logger.addHandler(lines)
    try:
        with fastloop.patched(patches(patched)):
            async with (
                Scheduler(port=0, dashboard_address=":0") as scheduler,
                Worker(scheduler.address, nthreads=1, dashboard_address=":0"),
            ):
                await until(lambda: scheduler._tick_counter > 5, "ticks")
                blocked = asyncio.Event()

                def block() -> None:
                    # A heartbeat may wake the tick between the test's look
                    # and this callback: block only while it sleeps.
                    if patched and not stretched(scheduler):
                        return
                    seen["stretched"].append(stretched(scheduler))
                    time.sleep(BLOCK_S)
                    blocked.set()

                for _ in range(20):
                    if patched:
                        await until(lambda: stretched(scheduler), "a tick asleep")
                    # A timer callback: no I/O in the iteration that runs it.
                    asyncio.get_running_loop().call_later(0.001, block)
                    await asyncio.sleep(0.005)
                    if blocked.is_set():
                        break
                await until(blocked.is_set, "the block")
                await until(
                    lambda: any(who == "Scheduler" for who, _ in lines.lines),
                    "the scheduler's unresponsive line",
                )
                seen["interval"] = scheduler._tick_interval
                pcs = [scheduler.periodic_callbacks["tick"]]
            # Closed, asleep or not: never started again.
            seen["running_after_close"] = [pc for pc in pcs if pc.is_running()]
    finally:
        logger.removeHandler(lines)
    seen["lines"] = lines.lines
    return seen


@STOCK_AND_PATCHED
def test_a_blocked_loop_logs_the_unresponsive_line_with_stocks_duration(patched):
    seen = asyncio.run(blocked_scenario(patched))
    assert seen["stretched"] == [patched]
    assert seen["running_after_close"] == []
    (duration,) = [d for who, d in seen["lines"] if who == "Scheduler"]
    # Stock logs the block plus the part of an interval since its last tick
    # (and whatever ran before the block in its iteration); patched, the gap
    # between iterations plus part of an interval.  The slack is for handles
    # run beside the block on a loaded machine, not for the measure.
    assert BLOCK_S <= duration <= BLOCK_S + seen["interval"] + 0.3


async def idle_scenario(patched: bool) -> dict:
    """An idle stretch: what the scheduler's figures read at its end."""
    seen: dict = {}
    with fastloop.patched(patches(patched)):
        async with (
            Scheduler(port=0, dashboard_address=":0") as scheduler,
            Worker(scheduler.address, nthreads=1, dashboard_address=":0"),
            Client(scheduler.address, asynchronous=True) as client,
        ):
            runs = counted_runs(scheduler)
            await until(lambda: len(runs) > 5, "ticks")
            if patched:
                await until(lambda: stretched(scheduler), "a tick asleep")
            counter, last = scheduler._tick_counter, scheduler._last_tick
            total = scheduler.digests_total["tick-duration"]
            first_run = len(runs)
            await asyncio.sleep(IDLE_S)
            # A message: the scheduler handles it on the loop, after the
            # iteration that read it (which wakes a sleeping tick).
            seen["on_message"] = await client.run_on_scheduler(
                lambda dask_scheduler: (
                    dask_scheduler.periodic_callbacks["tick"].callback_time
                )
            )
            seen["counted"] = scheduler._tick_counter - counter
            seen["elapsed"] = scheduler._last_tick - last
            seen["total"] = scheduler.digests_total["tick-duration"] - total
            seen["runs"] = len(runs) - first_run
            seen["observed"] = scheduler._tick_interval_observed
            seen["interval"] = scheduler._tick_interval
            assert await client.submit(int, "1", pure=False) == 1
            seen["after_submit"] = scheduler.periodic_callbacks["tick"].callback_time
            seen["wakes"] = getattr(scheduler, "_fastloop_tick", None) and (
                scheduler._fastloop_tick.wakes
            )
            if patched:
                await until(lambda: stretched(scheduler), "asleep again")
                fastloop.uninstall(["dask_tick"])
                await until(lambda: not stretched(scheduler), "restored")
                seen["restored_running"] = scheduler.periodic_callbacks[
                    "tick"
                ].is_running()
                # The method bound before uninstall acts as stock: awake.
                restored = len(runs)
                await until(lambda: len(runs) >= restored + 15, "runs after")
                seen["after_uninstall"] = set(runs[restored + 1 :])
            pcs = dict(scheduler.periodic_callbacks)
    seen["running_after_close"] = [name for name, pc in pcs.items() if pc.is_running()]
    return seen


@STOCK_AND_PATCHED
def test_an_idle_stretch_reads_stocks_tick_figures(patched):
    seen = asyncio.run(idle_scenario(patched))
    interval = seen["interval"]
    # Each tick's duration adds to the total and moves _last_tick by as
    # much, in both arms: the total is the time the ticks stand for.
    assert seen["total"] == pytest.approx(seen["elapsed"], abs=1e-6)
    # Ticks per interval elapsed: one by construction, patched; stock skips
    # the runs a late loop missed, so it reads under one on a busy machine.
    per_interval = seen["counted"] * interval / seen["elapsed"]
    assert 0.75 <= per_interval <= 1.05
    if patched:
        assert per_interval >= 0.95
    # What a worker's heartbeat carries: the interval, or over it when late.
    assert interval * 0.95 <= seen["observed"] <= interval * 1.5
    if patched:
        # Asleep most of the stretch: far fewer runs than ticks counted.
        assert seen["runs"] < seen["counted"] / 3
        assert seen["wakes"] >= 1
    else:
        assert seen["runs"] == seen["counted"]
    # A message brings the tick back to its interval at once.
    assert seen["on_message"] == interval * 1000
    assert seen["after_submit"] == interval * 1000
    assert seen.get("restored_running", False) is patched
    if patched:
        assert seen["after_uninstall"] == {interval * 1000}
    assert "tick" not in seen["running_after_close"]


async def no_listener_scenario() -> dict:
    seen: dict = {}
    with fastloop.patched(["dask_tick"]):
        async with Scheduler(port=0, dashboard_address=":0") as scheduler:
            runs = counted_runs(scheduler)
            await until(lambda: len(runs) > 20, "ticks")
            seen["stretched"] = any(
                run > scheduler._tick_interval * 1000 for run in runs
            )
    return seen


async def add_callback_leaves_scenario() -> bool:
    with fastloop.patched(["add_callback", "dask_tick"]):
        async with Scheduler(port=0, dashboard_address=":0") as scheduler:
            await until(lambda: stretched(scheduler), "a tick asleep")
            fastloop.uninstall(["add_callback"])
            await until(lambda: not stretched(scheduler), "stock again")
            return scheduler.periodic_callbacks["tick"].is_running()


def test_a_sleeping_tick_is_stock_again_once_add_callback_leaves():
    if "add_callback" in fastloop.installed():
        pytest.skip("add_callback is installed for the whole session")
    assert asyncio.run(add_callback_leaves_scenario())


def test_a_loop_add_callback_does_not_watch_keeps_stocks_tick():
    if "add_callback" in fastloop.installed():
        pytest.skip("add_callback is installed for the whole session")
    assert not asyncio.run(no_listener_scenario())["stretched"]


class Server:
    """What the accounting reads and writes of a dask server."""

    def __init__(self, interval: float, last: float) -> None:
        self._tick_interval = interval
        self._last_tick = last
        self._tick_counter = 0
        self.durations: list[float] = []

    def digest_metric(self, name: str, value: float) -> None:
        assert name == "tick-duration"
        self.durations.append(value)


@pytest.mark.parametrize(
    ("ran", "intervals", "counted", "moved"),
    [(True, 10.3, 10, 10.3), (True, 10.7, 11, 10.7), (False, 10.7, 10, 10)],
    ids=["ran-rounded-down", "ran-rounded-up", "woken-whole-intervals"],
)
def test_a_sleep_is_accounted_as_the_ticks_stock_would_have_run(
    ran, intervals, counted, moved
):
    from fastloop.patches.dask_tick import Tick, Ticks

    interval = 0.02
    server = Server(interval, last=100.0)
    now = 100.0 + intervals * interval
    Ticks(core).account(server, Tick(server), now, ran=ran)
    assert server._tick_counter == counted
    assert server.durations[:-1] == [interval] * (counted - 1)
    # The durations add up to the time _last_tick moved on, as stock's do.
    assert sum(server.durations) == pytest.approx(moved * interval)
    assert server._last_tick == pytest.approx(100.0 + moved * interval)


def test_a_block_seen_while_asleep_is_one_tick_logged_with_its_gap(caplog):
    from fastloop.patches.dask_tick import Tick, Ticks

    interval = 0.02
    server = Server(interval, last=100.0)
    tick = Tick(server)
    tick.blocked = 1.0  # the gap the listener saw between two iterations
    caplog.set_level(logging.INFO, logger="distributed.core")
    Ticks(core).account(server, tick, 101.5, ran=True)
    (record,) = [r for r in caplog.records if r.msg.startswith("Event loop")]
    # The half second before the block: regular ticks; then one tick of the
    # gap plus what is left of an interval.
    assert record.args == ("Server", server.durations[-1])
    assert 1.0 <= server.durations[-1] < 1.0 + interval
    assert server._tick_counter == len(server.durations)
    assert sum(server.durations) == pytest.approx(1.5)
    assert server._last_tick == 101.5 and tick.blocked == 0.0


async def lone_io_scenario(tries: int) -> list[int]:
    """A scheduler alone, its tick asleep; one readable byte at a time on a
    socket its loop watches (I/O, and nothing else): how many of the tick's
    runs are awake before it sleeps again, each time."""
    awake = []
    with fastloop.patched(patches(True)):
        async with Scheduler(port=0, dashboard_address=":0") as scheduler:
            runs = counted_runs(scheduler)
            interval_ms = scheduler._tick_interval * 1000
            reader, writer = socket.socketpair()
            loop = asyncio.get_running_loop()
            loop.add_reader(reader, reader.recv, 1)
            try:
                for _ in range(tries):
                    await until(lambda: stretched(scheduler), "asleep")
                    tick = scheduler._fastloop_tick
                    wakes, first = tick.wakes, len(runs)
                    writer.send(b"x")
                    await until(
                        lambda tick=tick, wakes=wakes: tick.wakes > wakes,
                        "woken by the byte",
                    )
                    await until(lambda: stretched(scheduler), "asleep again")
                    awake.append(sum(each == interval_ms for each in runs[first:]))
            finally:
                loop.remove_reader(reader)
                reader.close()
                writer.close()
    return awake


def test_a_lone_io_burst_keeps_the_tick_awake_for_one_run():
    # The woken tick watches from the I/O that woke it: its next run finds
    # no more and sleeps again (watching only from that run would take two).
    awake = asyncio.run(lone_io_scenario(tries=5))
    assert min(awake) == 1, awake


async def late_run_scenario() -> tuple[list[float], float]:
    """A scheduler alone, its tick asleep; a byte wakes it and the same
    iteration holds the loop for the stretch and more (under the limit):
    the deadlines of the tick's sleeping runs, and how long it may sleep."""
    with fastloop.patched(patches(True)):
        async with Scheduler(port=0, dashboard_address=":0") as scheduler:
            pc = scheduler.periodic_callbacks["tick"]
            callback = pc.callback
            deadlines: list[float] = []

            def recorded(self) -> None:
                # A run begins at its deadline, which it then moves on.
                tick = getattr(scheduler, "_fastloop_tick", None)
                if tick is not None and tick.asleep:
                    deadlines.append(pc._next_timeout)
                callback()

            pc.callback = types.MethodType(recorded, scheduler)
            await until(lambda: stretched(scheduler), "asleep")
            # The patch's bound: whole intervals, at most half the limit.
            interval = scheduler._tick_interval
            longest = int(min(dask_tick.LONGEST_S, LIMIT_S / 2) / interval) * interval
            reader, writer = socket.socketpair()
            loop = asyncio.get_running_loop()
            loop.add_reader(
                reader, lambda: (reader.recv(1), time.sleep(0.75 * LIMIT_S))
            )
            try:
                writer.send(b"x")
                before = len(deadlines)
                await until(lambda: len(deadlines) > before + 4, "four sleeping runs")
            finally:
                loop.remove_reader(reader)
                reader.close()
                writer.close()
    return deadlines, longest


def test_each_sleeping_run_lands_the_next_within_the_stretch():
    # A run that stretched the tick from late (after the block) set a
    # callback_time that holds the lateness (a quarter of a second here);
    # the runs after it land anew, each a stretch from when it ran (its
    # wake-up's latency after its deadline aside).
    deadlines, longest = asyncio.run(late_run_scenario())
    gaps = [after - before for before, after in itertools.pairwise(deadlines)]
    assert max(gaps) < longest + 0.05, gaps
