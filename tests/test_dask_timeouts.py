"""A dask scheduler's idle and no-workers checks sleep while they have nothing to see.

In-process scheduler, worker and client on one loop, ``asyncio.run``, under
stock and under the patch: ``idle_since``, the idle timeout and the
no-workers timeout read as stock's.  Skipped without ``distributed``.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

distributed = pytest.importorskip(
    "distributed",
    reason="needs distributed (pip install distributed); .ci/run installs it",
)
pytestmark = pytest.mark.dask

import dask  # noqa: E402
from distributed import Client, Scheduler, Worker  # noqa: E402
from distributed.core import Status  # noqa: E402

import fastloop  # noqa: E402
from fastloop.patches import dask_timeouts  # noqa: E402
from tests_support import STOCK_AND_PATCHED, until  # noqa: E402

#: dask's interval for both checks.
STOCK_MS = 250


def patches(patched: bool) -> list[str]:
    if not patched:
        assert "dask_timeouts" not in fastloop.installed()
        return []
    # Alone: it watches the scheduler, not the loop.
    return ["dask_timeouts"]


def callback_times(scheduler) -> tuple[float, float]:
    pcs = scheduler.periodic_callbacks
    return (
        pcs[dask_timeouts.IDLE].callback_time,
        pcs[dask_timeouts.NO_WORKERS].callback_time,
    )


def asleep(scheduler) -> bool:
    """Both callbacks stretched (each run lands on a timer the loop has
    anyway, within the stretch)."""
    return all(each > STOCK_MS for each in callback_times(scheduler))


#: The task's start, and the test letting it end (the worker shares the
#: process: the task is pickled by reference).
STARTED, RELEASE = threading.Event(), threading.Event()


def task() -> int:
    STARTED.set()
    RELEASE.wait()
    return 1


async def activity_scenario(patched: bool) -> dict:
    """Idle, a task that runs until the test lets it end, idle again."""
    seen: dict = {}
    with fastloop.patched(patches(patched)):
        async with (
            Scheduler(port=0, dashboard_address=":0") as scheduler,
            Worker(scheduler.address, nthreads=1, dashboard_address=":0"),
            Client(scheduler.address, asynchronous=True) as client,
        ):
            interval_s = (
                scheduler.periodic_callbacks[dask_timeouts.IDLE].callback_time / 1000
            )
            await until(lambda: scheduler.idle_since is not None, "idle")
            if patched:
                await until(lambda: asleep(scheduler), "both checks asleep")
            seen["idle"] = asleep(scheduler)
            started, release = STARTED, RELEASE
            started.clear()
            release.clear()
            future = client.submit(task, pure=False)
            await until(started.is_set, "the task started")
            # Stock's check runs within an interval of the task's first
            # transition, which came before it started: by then it has
            # read the scheduler busy.  A sleeping check that missed the
            # transition would read it only a stretch later.
            await asyncio.sleep(interval_s)
            seen["busy_idle_since"] = scheduler.idle_since
            seen["busy"] = callback_times(scheduler)[0]
            # A long task makes no transition: the check, awake, reads its
            # processing, and stays awake.
            await asyncio.sleep(3 * interval_s)
            seen["still_busy_idle_since"] = scheduler.idle_since
            seen["still_busy"] = callback_times(scheduler)[0]
            release.set()
            assert await future == 1
            await until(lambda: scheduler.idle_since is not None, "idle again")
            if patched:
                await until(lambda: asleep(scheduler), "asleep again")
                fastloop.uninstall(["dask_timeouts"])
                await until(
                    lambda: callback_times(scheduler) == (interval_s * 1000,) * 2,
                    "restored",
                )
                pcs = scheduler.periodic_callbacks
                seen["restored_running"] = [
                    pcs[name].is_running()
                    for name in (dask_timeouts.IDLE, dask_timeouts.NO_WORKERS)
                ]
                # The methods bound before uninstall act as stock's: awake.
                await asyncio.sleep(3 * interval_s)
                seen["after_uninstall"] = callback_times(scheduler)
            pcs = dict(scheduler.periodic_callbacks)
    seen["interval"] = interval_s * 1000
    seen["running_after_close"] = [name for name, pc in pcs.items() if pc.is_running()]
    return seen


@STOCK_AND_PATCHED
def test_idle_since_turns_none_with_the_first_transition_and_back_when_idle(patched):
    seen = asyncio.run(activity_scenario(patched))
    interval = seen["interval"]
    assert seen["idle"] == patched
    assert seen["busy_idle_since"] is None
    assert seen["busy"] == interval
    assert seen["still_busy_idle_since"] is None
    assert seen["still_busy"] == interval
    assert seen["running_after_close"] == []
    if patched:
        assert seen["restored_running"] == [True, True]
        assert seen["after_uninstall"] == (interval, interval)


async def idle_timeout_scenario(patched: bool, timeout_s: float) -> dict:
    """A scheduler with an idle timeout, left idle: it closes itself."""
    seen: dict = {"stretched": False}
    with (
        dask.config.set({"distributed.scheduler.idle-timeout": f"{timeout_s}s"}),
        fastloop.patched(patches(patched)),
    ):
        scheduler = await Scheduler(port=0, dashboard_address=":0")
        try:
            pc = scheduler.periodic_callbacks[dask_timeouts.IDLE]
            interval_s = pc.callback_time / 1000
            await until(lambda: scheduler.idle_since is not None, "idle")
            idle_since = scheduler.idle_since
            while scheduler.status not in (Status.closing, Status.closed):
                seen["stretched"] |= pc.callback_time > interval_s * 1000
                seen["last_seen"] = pc.callback_time
                await asyncio.sleep(0.01)
            closed_after = distributed.metrics.time() - idle_since
        finally:
            await scheduler.close()
    seen["closed_after"] = closed_after
    seen["interval"] = interval_s
    return seen


@STOCK_AND_PATCHED
def test_the_idle_timeout_closes_the_scheduler_on_stocks_grid(patched):
    timeout_s = 3 * dask_timeouts.LONGEST_S
    seen = asyncio.run(idle_timeout_scenario(patched, timeout_s))
    # Sleeping only while the deadline is more than a stretch away, the
    # check is back on its interval for the last stretch before it.
    assert seen["stretched"] == patched
    assert seen["last_seen"] == seen["interval"] * 1000
    assert seen["closed_after"] >= timeout_s


async def no_workers_scenario(patched: bool) -> dict:
    """No worker: a task fails once the no-workers timeout, set on the
    running scheduler, passes."""
    seen: dict = {}
    with fastloop.patched(patches(patched)):
        async with (
            Scheduler(port=0, dashboard_address=":0") as scheduler,
            Client(scheduler.address, asynchronous=True) as client,
        ):
            pc = scheduler.periodic_callbacks[dask_timeouts.NO_WORKERS]
            interval = pc.callback_time
            if patched:
                await until(lambda: pc.callback_time > interval, "asleep")
            scheduler.no_workers_timeout = 0.2
            future = client.submit(int, "1", pure=False)
            with pytest.raises(distributed.scheduler.NoWorkerError):
                await future
            seen["after_timeout"] = pc.callback_time
            seen["interval"] = interval
    return seen


@STOCK_AND_PATCHED
def test_a_no_workers_timeout_set_while_it_sleeps_fails_the_task(patched):
    seen = asyncio.run(no_workers_scenario(patched))
    assert seen["after_timeout"] == seen["interval"]


def chains(pc) -> int:
    """The timers pending on the loop that would run ``pc``."""
    loop = asyncio.get_running_loop()
    return sum(
        1
        for handle in loop._scheduled
        if not handle.cancelled()
        and handle._args
        and getattr(getattr(handle._args[0], "func", None), "__self__", None) is pc
    )


async def rewind_scenario() -> dict:
    """``rewind`` in the callback's own run, and between its timer firing
    and its run (from Tornado 6.3 the run starts an iteration later)."""
    from tornado.ioloop import PeriodicCallback

    from fastloop.patches import rewind

    seen: dict = {}
    ran = asyncio.Event()

    def inside() -> None:
        rewind(pc, 100)
        ran.set()

    pc = PeriodicCallback(inside, 50)
    pc.start()
    await ran.wait()
    await asyncio.sleep(0)
    seen["inside"] = chains(pc)
    pc.stop()

    pc = PeriodicCallback(lambda: None, 50)
    pc.start()
    loop = asyncio.get_running_loop()
    # Due just after the callback's timer (Tornado converts its deadline
    # the same way): runs in the iteration that fires it.
    delay = pc._next_timeout - pc.io_loop.time() + 1e-6
    fired = asyncio.Event()

    def between() -> None:
        rewind(pc, 100)
        fired.set()

    loop.call_later(delay, between)
    await fired.wait()
    for _ in range(3):
        await asyncio.sleep(0)
    seen["between"] = chains(pc)
    pc.stop()
    return seen


def test_rewind_never_leaves_two_timer_chains():
    assert asyncio.run(rewind_scenario()) == {"inside": 1, "between": 1}


async def runtime_settings_scenario(patched: bool) -> dict:
    """Timeouts and an interval set on a running, idle scheduler: each check
    reads them as stock's, and none of them is lost to a sleep."""
    seen: dict = {}
    errors: list = []
    with fastloop.patched(patches(patched)):
        async with Scheduler(port=0, dashboard_address=":0") as scheduler:
            asyncio.get_running_loop().set_exception_handler(
                lambda loop, context: errors.append(context)
            )
            pcs = scheduler.periodic_callbacks
            idle, no_workers = pcs[dask_timeouts.IDLE], pcs[dask_timeouts.NO_WORKERS]
            interval = idle.callback_time
            await until(lambda: scheduler.idle_since is not None, "idle")
            if patched:
                await until(lambda: asleep(scheduler), "both checks asleep")
            # Each set queues a look on the loop, which runs before it waits.
            scheduler.no_workers_timeout = 60.0
            scheduler.idle_timeout = 60.0
            await asyncio.sleep(0.001)
            seen["after_timeouts"] = callback_times(scheduler)
            scheduler.no_workers_timeout = None
            scheduler.idle_timeout = None
            if patched:
                await until(lambda: asleep(scheduler), "asleep again")
            # A user's interval, set while it sleeps, survives the wake.
            idle.callback_time = 2 * interval
            scheduler.new_task("x", None, "released")
            scheduler.transitions({"x": "forgotten"}, "test")
            await asyncio.sleep(0.001)
            seen["users_interval"] = idle.callback_time
            if patched:
                # Uninstalled from a callback, behind a queued look.
                asyncio.get_running_loop().call_soon(
                    fastloop.uninstall, ["dask_timeouts"]
                )
                await until(lambda: no_workers.callback_time == interval, "restored")
                for _ in range(3):
                    await asyncio.sleep(0)
    seen["interval"] = interval
    seen["errors"] = errors
    return seen


@STOCK_AND_PATCHED
def test_timeouts_and_intervals_set_at_run_time_read_as_stocks(patched):
    seen = asyncio.run(runtime_settings_scenario(patched))
    interval = seen["interval"]
    assert seen["after_timeouts"] == (interval, interval)
    assert seen["users_interval"] == 2 * interval
    assert seen["errors"] == []


async def off_loop_scenario(patched: bool, looks: list) -> dict:
    """An idle scheduler whose worker heartbeats every 20 ms, then an idle
    timeout set from another thread: heartbeats give the checks nothing to
    see, and the idle check reads the timeout within stock's interval."""
    seen: dict = {}
    with fastloop.patched(patches(patched)):
        async with (
            Scheduler(port=0, dashboard_address=":0") as scheduler,
            Worker(
                scheduler.address,
                nthreads=1,
                dashboard_address=":0",
                heartbeat_interval="20ms",
            ),
        ):
            interval = callback_times(scheduler)[0]
            await until(lambda: scheduler.idle_since is not None, "idle")
            if patched:
                await until(lambda: asleep(scheduler), "both checks asleep")
            (worker,) = scheduler.workers.values()
            heard = worker.last_seen
            await asyncio.sleep(0.5)
            seen["heartbeats_heard"] = worker.last_seen > heard
            seen["asleep_through_heartbeats"] = asleep(scheduler)
            seen["looks_through_heartbeats"] = len(looks)
            setter = threading.Thread(
                target=setattr, args=(scheduler, "idle_timeout", 60.0)
            )
            setter.start()
            setter.join()
            await asyncio.sleep(interval / 1000)
            seen["idle_check"] = callback_times(scheduler)[0]
            seen["looks_after_set"] = len(looks)
            seen["interval"] = interval
            pcs = dict(scheduler.periodic_callbacks)
    # Closing sets the status: a check still asleep wakes.
    seen["after_close"] = tuple(
        pcs[name].callback_time
        for name in (dask_timeouts.IDLE, dask_timeouts.NO_WORKERS)
    )
    return seen


@STOCK_AND_PATCHED
def test_heartbeats_leave_the_checks_asleep_and_a_set_off_the_loop_wakes_them(
    patched, monkeypatch
):
    looks: list = []
    look = dask_timeouts.Checks.look

    def counted(self, sleeper) -> None:
        looks.append(sleeper)
        look(self, sleeper)

    monkeypatch.setattr(dask_timeouts.Checks, "look", counted)
    seen = asyncio.run(off_loop_scenario(patched, looks))
    assert seen["heartbeats_heard"]
    assert seen["asleep_through_heartbeats"] == patched
    assert seen["looks_through_heartbeats"] == 0
    assert seen["idle_check"] == seen["interval"]
    assert seen["looks_after_set"] == (1 if patched else 0)
    assert seen["after_close"] == (seen["interval"], seen["interval"])


def pending_when(pc) -> float:
    """When the loop will next run ``pc`` (the loop's clock)."""
    loop = asyncio.get_running_loop()
    (when,) = [
        handle.when()
        for handle in loop._scheduled
        if not handle.cancelled()
        and handle._args
        and getattr(getattr(handle._args[0], "func", None), "__self__", None) is pc
    ]
    return when


async def stretch_scenario() -> dict:
    """``stretch`` from a callback's run, beside a timer the loop has in the
    second half of the stretch, with none there, beside one due sooner than
    the callback's own interval, and with the wall clock stepped back."""
    from tornado.ioloop import PeriodicCallback

    from fastloop.patches import SHARE_S, stretch

    loop = asyncio.get_running_loop()
    seen: dict = {}
    ran = asyncio.Event()
    case: dict = {}

    def stretched() -> None:
        # Tornado's deadlines are wall-clock time: a clock stepped back
        # leaves this run's deadline ahead of the clock.
        pc._next_timeout += case["stepped_back_s"]
        case["callback_time"] = stretch(pc, 1.0, case["interval_s"])
        ran.set()

    cases = {
        "shared": (0.8, 0.02, 0.0),
        "alone": (None, 0.02, 0.0),
        "not_before_interval": (0.6, 0.8, 0.0),
        "stepped_back": (None, 0.02, 5.0),
    }
    for name, (other_in, interval_s, stepped_back_s) in cases.items():
        case.update(interval_s=interval_s, stepped_back_s=stepped_back_s)
        ran.clear()
        pc = PeriodicCallback(stretched, 20)
        pc.start()
        # The other timer lands that long after the run.
        other = loop.call_later(0.02 + other_in, lambda: None) if other_in else None
        await ran.wait()
        await asyncio.sleep(0)
        now, when = loop.time(), pending_when(pc)
        seen[name] = when - (other.when() if name == "shared" else now)
        seen[f"{name}_callback_time"] = case["callback_time"]
        if other is not None:
            other.cancel()
        pc.stop()
    seen["share_s"] = SHARE_S
    return seen


def test_a_stretched_callback_lands_just_after_a_timer_the_loop_has_anyway():
    seen = asyncio.run(stretch_scenario())
    # Just after the other timer: within the clocks' conversion (Tornado's
    # deadlines are wall-clock time, asyncio's monotonic).
    assert 0 < seen["shared"] < seen["share_s"] + 1e-4
    # No timer to share: the whole stretch, from the end of the run.
    assert 0.9 < seen["alone"] <= 1.0
    # Never sooner than the callback's own interval.
    assert 0.8 <= seen["not_before_interval"] <= 1.0
    # A clock stepped back: the whole stretch from now, never a negative
    # callback_time (which Tornado would repeat at every iteration).
    assert seen["stepped_back_callback_time"] > 0
    assert 0.9 < seen["stepped_back"] <= 1.0
