"""dask's profilers sleep while nothing runs: each arm against stock's outcomes.

Skipped without ``distributed``; ``.ci/run`` installs it and runs these.
"""

from __future__ import annotations

import asyncio
import itertools
import threading

import pytest

distributed = pytest.importorskip(
    "distributed",
    reason="needs distributed (pip install distributed); .ci/run installs it",
)
pytestmark = pytest.mark.dask

from distributed import Client, Scheduler, Worker, profile  # noqa: E402

import fastloop  # noqa: E402
from tests_support import PATIENCE_S, STOCK_AND_PATCHED, until  # noqa: E402

#: Released by the test once the profile has seen a task or actor call block.
RELEASE = threading.Event()


def blocked_in_a_task() -> int:
    RELEASE.wait(PATIENCE_S)
    return 1


class Blocker:
    def blocked_in_an_actor(self) -> int:
        RELEASE.wait(PATIENCE_S)
        return 2


def parked_on_the_watched_thread(release: threading.Event) -> None:
    release.wait(PATIENCE_S)


def functions_in(state: dict) -> set[str]:
    """Every function name in a profile state (``profile.create()``'s tree)."""
    names = set()
    stack = [state]
    while stack:
        node = stack.pop()
        if "identifier" in node and node["identifier"] != "root":
            names.add(node["description"]["name"])
        stack.extend(node["children"].values())
    return names


def watched_log(patched: bool, monkeypatch: pytest.MonkeyPatch, entries: int):
    """``profile.watch`` on a thread parked in a known function, until the log
    holds ``entries``; returns the log, the sleeps the watcher took, and
    whether its thread ended once asked to stop."""
    sleeps: list[float] = []
    real_sleep = profile.sleep

    def counted_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(profile, "sleep", counted_sleep)
    release, stopped, enough = threading.Event(), threading.Event(), threading.Event()
    parked = threading.Thread(target=parked_on_the_watched_thread, args=(release,))
    parked.start()
    logs: list = []

    def stop() -> bool:
        if logs and len(logs[0]) >= entries:
            enough.set()
        return stopped.is_set()

    before = set(threading.enumerate())
    with fastloop.patched(["dask_loop_profile"] if patched else []):
        log = profile.watch(
            thread_id=parked.ident,
            interval="5ms",
            cycle="100ms",
            maxlen=None,
            stop=stop,
        )
        logs.append(log)
        (watcher,) = set(threading.enumerate()) - before
        assert enough.wait(PATIENCE_S)
        stopped.set()
        watcher.join(PATIENCE_S)
    release.set()
    parked.join()
    return list(log)[:entries], len(sleeps), not watcher.is_alive()


@STOCK_AND_PATCHED
def test_the_loop_profiler_logs_one_sample_a_cycle_of_the_watched_thread(
    patched, monkeypatch
):
    log, _, ended = watched_log(patched, monkeypatch, entries=4)
    assert ended
    for _, state in log:
        assert state["count"] == 1
        assert "parked_on_the_watched_thread" in functions_in(state)
    times = [at for at, _ in log]
    assert all(later - earlier >= 0.1 for earlier, later in itertools.pairwise(times))


@STOCK_AND_PATCHED
def test_the_loop_profiler_sleeps_once_a_sample_where_stock_sleeps_each_interval(
    patched, monkeypatch
):
    entries = 4
    _, sleeps, _ = watched_log(patched, monkeypatch, entries)
    # Stock sleeps 5 ms until 100 ms have passed: some 20 times a sample
    # (fewer only if each sleep overran by 30 ms); patched, once a sample, or
    # twice where the wall clock lags the sleep's.
    if patched:
        assert sleeps <= 2 * (entries + 1)
    else:
        assert sleeps > 3 * entries


def trigger_calls(worker: Worker) -> list[bool]:
    """Count the profile callback's calls: True where a thread was computing."""
    pc = worker.periodic_callbacks["profile"]
    calls: list[bool] = []
    callback = pc.callback

    def counted() -> None:
        calls.append(bool(worker.active_threads))
        callback()

    pc.callback = counted
    return calls


async def task_profile_scenario(patched: bool) -> dict:
    """A worker idle, then a task and an actor call that block until their
    samples are in the worker's profile, then idle again."""
    RELEASE.clear()
    seen: dict = {}
    with fastloop.patched(["dask_task_profile"] if patched else []):
        async with (
            Scheduler(port=0, dashboard_address=":0") as scheduler,
            Worker(scheduler.address, nthreads=1, dashboard_address=":0") as worker,
            Client(scheduler.address, asynchronous=True) as client,
        ):
            pc = worker.periodic_callbacks["profile"]
            calls = trigger_calls(worker)
            await until(lambda: len(calls) >= 3 or not pc.is_running(), "idle calls")
            seen["idle_running"] = pc.is_running()

            task = client.submit(blocked_in_a_task, pure=False)
            await until(
                lambda: worker.profile_keys["blocked_in_a_task"]["count"] > 0,
                "a sample of the task",
            )
            seen["task"] = functions_in(worker.profile_keys["blocked_in_a_task"])
            RELEASE.set()
            assert await task == 1

            RELEASE.clear()
            actor = await client.submit(Blocker, actor=True)
            call = actor.blocked_in_an_actor()
            await until(
                lambda: worker.profile_keys["Blocker.blocked_in_an_actor"]["count"] > 0,
                "a sample of the actor call",
            )
            seen["actor"] = functions_in(
                worker.profile_keys["Blocker.blocked_in_an_actor"]
            )
            RELEASE.set()
            assert await call == 2

            computing = sum(calls)
            idle_after = len(calls)
            await until(
                lambda: len(calls) >= idle_after + 3 or not pc.is_running(),
                "idle calls after",
            )
            seen["idle_again_running"] = pc.is_running()
            seen["sampled"] = computing > 0
            seen["recent"] = worker.profile_recent["count"] > 0
            if patched:
                fastloop.uninstall(["dask_task_profile"])
                await until(pc.is_running, "the callback started by uninstall")
                seen["after_uninstall_running"] = True
    return seen


@STOCK_AND_PATCHED
def test_task_and_actor_profiles_hold_their_samples(patched):
    seen = asyncio.run(task_profile_scenario(patched))
    assert "blocked_in_a_task" in seen["task"]
    assert "blocked_in_an_actor" in seen["actor"]
    assert seen["sampled"] and seen["recent"]
    # Stock's callback runs on while idle; patched, it stops, and restarts
    # for each call and when uninstalled.
    assert seen["idle_running"] is not patched
    assert seen["idle_again_running"] is not patched
    assert seen.get("after_uninstall_running", False) is patched
