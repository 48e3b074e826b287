"""The ``switchinterval`` patch: auto by default, fixed on request, never fought.

The decisions of auto mode are tested apart, with made-up samples
(``test_switch_policy.py``); here, the patch around them: what it sets and
restores, when its controller thread runs, and that it stops for good when
the application sets its own interval.  Waits below are for a condition,
with a generous deadline, never for a time.
"""

from __future__ import annotations

import _thread
import asyncio
import contextlib
import os
import socket
import sys
import threading
import time
import types
import warnings
from collections.abc import Callable, Iterator

import pytest
from tornado.ioloop import IOLoop

import fastloop
from fastloop import config
from fastloop.patches import (
    _switch_controller,
    _switch_policy,
    registry,
    switchinterval,
)
from fastloop.patches.switchinterval import SwitchInterval
from fastloop.runtime.dormancy import IDLE
from fastloop.telemetry.schema_gil import WAKE_SOURCES

DEFAULT_S = switchinterval.CPYTHON_DEFAULT_S


@pytest.fixture(autouse=True)
def cpython_default():
    sys.setswitchinterval(DEFAULT_S)
    before = config.settings.switch_interval_us
    yield
    fastloop.uninstall()
    config.settings.switch_interval_us = before
    sys.setswitchinterval(DEFAULT_S)


def controller() -> switchinterval.Controller | None:
    change = registry.applied_change("switchinterval", SwitchInterval)
    return change.controller if change is not None else None


def auto() -> bool:
    change = registry.applied_change("switchinterval", SwitchInterval)
    return change is not None and change.auto


def until(condition: Callable[[], object], what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds:g} s: {what}")
        time.sleep(0.01)


@contextlib.contextmanager
def spinning(threads: int = 1) -> Iterator[list[threading.Thread]]:
    """Threads that run pure Python until the block ends."""
    stop = [False]

    def spin() -> None:
        while not stop[0]:
            pass

    pool = [threading.Thread(target=spin, daemon=True) for _ in range(threads)]
    for thread in pool:
        thread.start()
    try:
        yield pool
    finally:
        stop[0] = True
        for thread in pool:
            thread.join()


def run_loop_until(
    condition: Callable[[], object], what: str, loop_factory=None
) -> None:
    """Run an IOLoop (auto mode serves running loops; add_callback'ed once,
    so that patch wraps its loop) until ``condition``: every iteration a
    timer and a byte through a socket pair, handled by the loop."""

    async def main() -> None:
        ioloop = IOLoop.current()
        ioloop.add_callback(lambda: None)
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        ioloop.add_handler(ours, lambda fd, events: ours.recv(64), IOLoop.READ)
        try:
            deadline = time.monotonic() + 60
            while not condition():
                if time.monotonic() > deadline:
                    raise AssertionError(f"not within 60 s: {what}")
                theirs.send(b"x")
                await asyncio.sleep(0.005)
        finally:
            ioloop.remove_handler(ours)
            ours.close()
            theirs.close()

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main())


def test_in_the_default_set_and_auto_by_default():
    assert config.settings.switch_interval_us == config.AUTO
    assert "switchinterval" in fastloop.install()
    snapshot = fastloop.stats().switchinterval
    assert snapshot.auto and not snapshot.engaged
    # Nothing waits: the interval is CPython's.
    assert sys.getswitchinterval() == DEFAULT_S


def test_fixed_interval_sets_and_uninstall_restores():
    fastloop.configure(switch_interval_us=200)
    assert fastloop.install(["switchinterval"]) == {"switchinterval"}
    assert sys.getswitchinterval() == pytest.approx(0.0002)
    assert not fastloop.stats().switchinterval.auto
    assert controller() is None
    fastloop.uninstall(["switchinterval"])
    assert sys.getswitchinterval() == DEFAULT_S


def test_configure_switches_between_fixed_and_auto_while_installed():
    fastloop.install(["switchinterval"])
    fastloop.configure(switch_interval_us=250)
    assert sys.getswitchinterval() == pytest.approx(0.00025)
    assert (auto(), controller()) == (False, None)
    fastloop.configure(switch_interval_us="auto")
    assert sys.getswitchinterval() == DEFAULT_S  # auto starts from the found one
    assert auto()
    fastloop.uninstall()
    assert sys.getswitchinterval() == DEFAULT_S


def test_an_application_value_set_after_install_is_kept():
    fastloop.configure(switch_interval_us=200)
    fastloop.install(["switchinterval"])
    sys.setswitchinterval(0.002)
    fastloop.configure(switch_interval_us=100)  # does not fight it either
    assert sys.getswitchinterval() == pytest.approx(0.002)
    fastloop.configure(switch_interval_us="auto")
    assert sys.getswitchinterval() == pytest.approx(0.002)
    assert fastloop.stats().switchinterval.overridden
    fastloop.uninstall()
    assert sys.getswitchinterval() == pytest.approx(0.002)


def test_an_application_value_set_before_install_declines(caplog):
    sys.setswitchinterval(0.001)
    assert "application chose it" in (fastloop.available()["switchinterval"] or "")
    with caplog.at_level("WARNING", logger="fastloop"):
        assert fastloop.install(["switchinterval"]) == frozenset()
    assert sys.getswitchinterval() == pytest.approx(0.001)
    assert len(caplog.records) == 1
    assert "switchinterval" in caplog.records[0].getMessage()


def test_a_free_threaded_build_declines(monkeypatch):
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
    reason = fastloop.available()["switchinterval"] or ""
    assert "no GIL in this build" in reason
    assert "switchinterval" not in fastloop.install()
    assert sys.getswitchinterval() == DEFAULT_S


def test_the_controller_starts_with_another_thread_and_is_not_one_of_threadings():
    alone = threading.active_count() == 1
    fastloop.install(["switchinterval"])
    assert auto()
    if alone:  # made with the second thread: a process of one loads none of it
        assert controller() is None
    threads = threading.active_count()
    with spinning():
        ours = controller()
        assert ours is not None
        until(lambda: ours.running, "the controller runs beside a second thread")
        # The spinner only: applications' thread-leak checks never see it.
        assert threading.active_count() == threads + 1
    fastloop.uninstall()
    assert not ours.running  # uninstall ends it


def test_a_finalizer_starting_a_thread_inside_start_starts_one_controller(
    monkeypatch,
):
    # The Thread.start hook calls Controller.start, and an allocation under
    # its lock can run a finalizer that starts a thread on the same thread:
    # start() again, while the outer call holds the lock.  Simulated exactly:
    # the first lock start() allocates runs the "finalizer".
    ours = _switch_controller.Controller(DEFAULT_S * 1e6, lambda us: True)
    pending = ["the finalizer"]
    started = []

    def allocate_lock():
        if pending:
            pending.pop()
            ours.start()
        return _thread.allocate_lock()

    shim = types.SimpleNamespace(
        allocate_lock=allocate_lock,
        start_new_thread=lambda run, args: started.append(args),
    )
    monkeypatch.setattr(_switch_controller, "_thread", shim)
    worker = threading.Thread(target=ours.start, daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "Controller.start deadlocked on its own lock"
    # One thread, the one stop() can end: a second would run unstoppable.
    assert started == [(ours._run,)]
    assert ours.running


def test_threading_thread_start_is_stock_again_after_uninstall():
    stock = threading.Thread.start
    fastloop.install(["switchinterval"])
    assert threading.Thread.start is not stock
    assert threading.Thread.start.__wrapped__ is stock  # type: ignore[attr-defined]
    fastloop.uninstall()
    assert threading.Thread.start is stock


def test_waits_beside_a_compute_thread_shorten_it_and_it_lets_go_after():
    fastloop.install(["switchinterval"])
    with spinning():
        run_loop_until(
            lambda: fastloop.stats().switchinterval.engaged,
            "auto mode engages beside a pure-Python thread",
        )
        shortened = sys.getswitchinterval()
        snapshot = fastloop.stats().switchinterval
        assert shortened < DEFAULT_S
        assert snapshot.engagements >= 1
        assert snapshot.interval_us == pytest.approx(shortened * 1e6)
    run_loop_until(
        lambda: not fastloop.stats().switchinterval.engaged,
        "auto mode lets go once the thread ended",
    )
    assert sys.getswitchinterval() == DEFAULT_S
    text = fastloop.report()
    assert "auto, 5000 us now, the interval it found" in text


def test_auto_mode_stops_for_good_when_the_application_sets_its_own():
    fastloop.install(["switchinterval"])
    with spinning():
        run_loop_until(
            lambda: fastloop.stats().switchinterval.engaged, "auto mode engages"
        )
        sys.setswitchinterval(0.003)
        until(lambda: not controller().running, "the controller stops")
        assert fastloop.stats().switchinterval.overridden
        assert "set by the application: auto mode stopped" in fastloop.report()
        assert sys.getswitchinterval() == pytest.approx(0.003)
    fastloop.uninstall()
    assert sys.getswitchinterval() == pytest.approx(0.003)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_starts_from_the_interval_found():
    fastloop.install(["switchinterval"])
    with spinning():
        run_loop_until(
            lambda: fastloop.stats().switchinterval.engaged, "auto mode engages"
        )
        read, write = os.pipe()
        with warnings.catch_warnings():
            # Forking beside running threads (3.12+ warns) is the case tested.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: no controller runs, the interval is the found one
            ok = sys.getswitchinterval() == DEFAULT_S and not controller().running
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
        os.close(write)
        assert os.read(read, 1) == b"1"
        os.close(read)
        os.waitpid(pid, 0)


def test_patched_restores_the_prior_interval():
    fastloop.configure(switch_interval_us=200)
    with fastloop.patched(["switchinterval"]):
        assert sys.getswitchinterval() < DEFAULT_S
    assert sys.getswitchinterval() == DEFAULT_S


@pytest.mark.parametrize("bad", ["0", "-5", "fast", "inf"])
def test_bad_values_are_refused(bad):
    with pytest.raises(ValueError, match="switch_interval_us"):
        fastloop.configure(switch_interval_us=bad)
    chosen, problems = config.settings_from_environ(
        {"FASTLOOP_SWITCH_INTERVAL_US": bad}
    )
    assert chosen == {}
    assert "FASTLOOP_SWITCH_INTERVAL_US" in str(problems[0])


@pytest.mark.parametrize("bad", ["-0.1", "0.9", "lots"])
def test_bad_budgets_are_refused(bad):
    with pytest.raises(ValueError, match="switch_budget"):
        fastloop.configure(switch_budget=bad)
    assert config.settings_from_environ({"FASTLOOP_SWITCH_BUDGET": bad})[0] == {}


def test_thread_shares_count_threads_that_compute_and_leave_out_the_loops():
    from fastloop.patches._switch_controller import COMPUTE_SHARE, ThreadShares

    shares = ThreadShares()
    idle = threading.Event()
    sleeper = threading.Thread(target=idle.wait)
    sleeper.start()
    try:
        with spinning() as (spinner,):
            assert shares.compute_shares(set(), time.perf_counter_ns()) is None
            time.sleep(0.05)  # the spinner computes; the sleeper and we do not
            (ran,) = shares.compute_shares(set(), time.perf_counter_ns()) or [None]
            assert ran is not None and ran >= COMPUTE_SHARE
            time.sleep(0.05)
            now = time.perf_counter_ns()
            assert shares.compute_shares({spinner.ident}, now) == []  # a loop's
    finally:
        idle.set()
        sleeper.join()


def test_thread_shares_are_smoothed_over_ticks_and_start_afresh(monkeypatch):
    """Fed made-up CPU clocks: one fast tick's share moves the smoothed one
    by ``SMOOTHING``, a longer tick by as much as the fast ticks it spans,
    and ``forget()`` drops the history."""
    from types import SimpleNamespace

    from fastloop.patches import _switch_controller as controller

    cpu: dict[int, int] = {}

    def read(clock: int) -> int:
        if clock not in cpu:  # another test's thread: as if it had ended
            raise OSError(clock)
        return cpu[clock]

    fake = SimpleNamespace(
        pthread_getcpuclockid=lambda ident: ident, clock_gettime_ns=read
    )
    monkeypatch.setattr(controller, "time", fake)
    idle = threading.Event()
    other = threading.Thread(target=idle.wait)
    other.start()
    try:
        me, them = threading.get_ident(), other.ident
        assert them is not None
        shares = controller.ThreadShares()
        tick = controller._switch_policy.FAST_TICK_NS
        cpu.update({me: 0, them: 0})
        assert shares.compute_shares(set(), 0) is None  # no last reading
        cpu[me] += tick  # this thread ran the whole tick, the other none
        assert shares.compute_shares(set(), tick) == [1.0]
        cpu[them] += tick  # now the other way round
        got = sorted(shares.compute_shares(set(), 2 * tick) or [])
        weight = controller.SMOOTHING
        assert got == pytest.approx(sorted([1.0 - weight, weight]))
        # A tick of rest decays the other's share; a loop's thread is left out.
        assert shares.compute_shares({me}, 3 * tick) == [
            pytest.approx((1 - weight) * weight)
        ]
        # A tick five times as long weighs as five: one rate in time.
        cpu[them] += 5 * tick
        kept = (1 - weight) ** 5
        assert shares.compute_shares({me}, 8 * tick) == [
            pytest.approx(1 - kept + kept * (1 - weight) * weight)
        ]
        shares.forget()
        assert shares.compute_shares(set(), 9 * tick) is None
        cpu[them] += tick
        assert shares.compute_shares(set(), 10 * tick) == [1.0]  # afresh
        # A thread that runs a loop keeps no history for when it stops.
        cpu[them] += tick
        assert shares.compute_shares({them}, 11 * tick) == []
        cpu[them] += tick
        assert shares.compute_shares(set(), 12 * tick) == [1.0]
    finally:
        idle.set()
        other.join()


# --- the CPUs the controller counts: affinity, and a container's quota ---------


def _cgroups(tmp_path, entries, files):
    (tmp_path / "cgroup").write_text("".join(f"{e}\n" for e in entries))
    for name, text in files.items():
        path = tmp_path / "fs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(tmp_path / "cgroup"), str(tmp_path / "fs")


@pytest.mark.parametrize(
    ("entries", "files", "quota"),
    [
        # cgroup v1, a container's group with 1.5 CPUs
        (["4:cpu,cpuacct:/pod/c1"],
         {"cpu,cpuacct/pod/c1/cpu.cfs_quota_us": "150000",
          "cpu,cpuacct/pod/c1/cpu.cfs_period_us": "100000"}, 1.5),
        # v1 without a quota
        (["1:cpu:/"], {"cpu/cpu.cfs_quota_us": "-1",
                       "cpu/cpu.cfs_period_us": "100000"}, None),
        # v1: the parent's quota is the tighter one
        (["1:cpu:/a/b"],
         {"cpu/a/cpu.cfs_quota_us": "50000", "cpu/a/cpu.cfs_period_us": "100000",
          "cpu/a/b/cpu.cfs_quota_us": "300000",
          "cpu/a/b/cpu.cfs_period_us": "100000"}, 0.5),
        # cgroup v2
        (["0::/k8s/pod"], {"k8s/pod/cpu.max": "200000 100000"}, 2.0),
        (["0::/"], {"cpu.max": "max 100000"}, None),
        # v2 beside v1 controllers (the "hybrid" layout)
        (["1:memory:/x", "0::/x"], {"unified/x/cpu.max": "250000 100000"}, 2.5),
        # nothing to read
        (["0::/gone"], {}, None),
    ],
)  # fmt: skip
def test_the_quota_is_read_from_either_cgroup_version(tmp_path, entries, files, quota):
    assert _switch_controller.quota_cpus(*_cgroups(tmp_path, entries, files)) == quota


def test_a_process_without_cgroups_has_no_quota(tmp_path):
    assert _switch_controller.quota_cpus(str(tmp_path / "none"), str(tmp_path)) is None


@pytest.mark.parametrize(
    ("quota", "counted"), [(None, 8), (2.0, 2), (1.5, 1), (0.5, 1), (64.0, 8)]
)
def test_the_cpus_counted_are_the_fewer_of_affinity_and_quota(
    monkeypatch, quota, counted
):
    monkeypatch.setattr(
        _switch_controller.os, "sched_getaffinity", lambda _: set(range(8))
    )
    monkeypatch.setattr(_switch_controller, "quota_cpus", lambda: quota)
    assert _switch_controller.allowed_cpus() == 8
    assert _switch_controller.cpus(_switch_controller.allowed_cpus()) == counted


@pytest.mark.parametrize(
    ("others", "left"),
    [(None, 2), (0.0, 2), (0.2, 2), (0.25, 2), (0.3, 1), (1.0, 1), (1.3, 1), (5, 1)],
)
def test_a_cpu_other_processes_use_past_a_quarter_is_theirs(others, left):
    assert _switch_controller.cpus_left(2, others) == left


def _stat(path, busy_ticks: dict[int, int]) -> None:
    """A /proc/stat whose CPUs have been busy this many clock ticks each
    (user 1/2, system 1/4, steal 1/4), beside a large idle and I/O wait."""
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
    for n, busy in busy_ticks.items():
        user, system = busy // 2, busy // 4
        steal = busy - user - system
        lines.append(f"cpu{n} {user} 0 {system} 99999 777 0 0 {steal} 0 0")
    path.write_text("\n".join([*lines, "intr 1 2 3", "ctxt 9"]) + "\n")


def test_others_use_is_the_affinitys_busy_time_less_this_process(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    monkeypatch.setattr(_switch_controller.os, "sched_getaffinity", lambda _: {0, 1})
    monkeypatch.setattr(_switch_controller.os, "sysconf", lambda _: 100)
    mine = iter([0, 300_000_000, 600_000_000])  # 0.3 s of CPU a second
    monkeypatch.setattr(_switch_controller.time, "process_time_ns", lambda: next(mine))
    others = _switch_controller.OthersUse(str(stat))
    # cpu2 is outside the affinity: its time is nobody's concern here.
    _stat(stat, {0: 1000, 1: 1000, 2: 0})
    assert others.read(0) is None
    # A second later: 130 ticks busy on the two CPUs (1.3 s), 0.3 s of it ours.
    _stat(stat, {0: 1100, 1: 1030, 2: 5000})
    assert others.read(1_000_000_000) == pytest.approx(1.0)
    _stat(stat, {0: 1200, 1: 1060, 2: 9000})
    assert others.read(2_000_000_000) == pytest.approx(1.0)


def test_others_use_is_unknown_where_proc_stat_cannot_be_read(tmp_path):
    others = _switch_controller.OthersUse(str(tmp_path / "none"))
    assert others.read(0) is None
    assert others.read(10**9) is None


# --- asleep while there is nothing to decide ------------------------------------

needs_proc = pytest.mark.skipif(
    not os.path.isdir("/proc/self/task"), reason="reads a thread's /proc status"
)


@pytest.fixture
def quick_to_sleep(monkeypatch):
    """Fewer calm ticks before it sleeps: the same rule, sooner."""
    monkeypatch.setattr(_switch_policy, "DORMANT_TICKS", 3)
    fastloop.reset_stats()


def asleep() -> bool:
    return bool(fastloop.stats().switchinterval.dormant)


def wakes() -> dict[str, int]:
    snapshot = fastloop.stats().switchinterval
    return {source: getattr(snapshot, f"wakes_{source}") for source in WAKE_SOURCES}


def voluntary_switches(native_id: int) -> int:
    """How often a thread has slept and woken so far (Linux)."""
    with open(f"/proc/self/task/{native_id}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches line")


@contextlib.contextmanager
def parked() -> Iterator[threading.Thread]:
    """A thread that waits until the block ends: the process has two."""
    done = threading.Event()
    thread = threading.Thread(target=done.wait, daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        done.set()
        thread.join()


@needs_proc
def test_idle_it_sleeps_and_its_thread_wakes_no_more(quick_to_sleep):
    """Timers and I/O on the loop, a second thread parked: nothing to decide."""
    fastloop.install()
    with parked():
        ours = controller()
        assert ours is not None
        seen: dict[str, int] = {}

        def asleep_then_200_iterations() -> bool:
            if not seen:
                if asleep():
                    seen["ticks"] = fastloop.stats().switchinterval.wait_samples
                    seen["switches"] = voluntary_switches(ours._native_id)
                    seen["left"] = 200  # iterations with a timer and I/O each
                return False
            seen["left"] -= 1
            return seen["left"] == 0

        run_loop_until(asleep_then_200_iterations, "it sleeps, then 200 iterations")
        assert ours.running  # asleep, not ended: the process has two threads
        assert asleep()
        assert fastloop.stats().switchinterval.wait_samples == seen["ticks"]
        assert voluntary_switches(ours._native_id) == seen["switches"]
        assert set(wakes().values()) == {0}
    assert "asleep now: nothing to decide" in fastloop.report()
    with open(f"/proc/self/task/{ours._native_id}/comm", encoding="ascii") as comm:
        assert comm.read().strip() == _switch_controller.THREAD_NAME


def test_a_thread_that_starts_computing_beside_a_loop_wakes_it_and_is_seen(
    quick_to_sleep,
):
    """A task thread already started (a pool's) gets work and computes."""
    fastloop.install()
    go, stop = threading.Event(), [False]

    def task() -> None:
        go.wait()
        while not stop[0]:
            pass

    thread = threading.Thread(target=task, daemon=True)
    thread.start()

    def asleep_then_engaged() -> bool:
        if not go.is_set():
            if asleep():
                go.set()  # the task's work arrives
            return False
        return fastloop.stats().switchinterval.engaged

    try:
        run_loop_until(asleep_then_engaged, "it sleeps, then engages beside the task")
        # Only compute wakes it; how many times depends on scheduling (on a
        # loaded machine the task may not have run enough before the
        # controller's next decision, and it sleeps and wakes once more).
        woken = wakes()
        assert woken.pop("compute") >= 1
        assert woken == {"thread": 0, "ioloop": 0, "alone": 0, "uninstall": 0}
        assert fastloop.stats().switchinterval.competitors == 1
    finally:
        stop[0] = True
        thread.join()


def test_a_thread_that_starts_wakes_it_and_it_sleeps_again(quick_to_sleep):
    fastloop.install()
    with parked():
        until(asleep, "the controller sleeps (no loop: nothing to decide)")
        with parked():
            until(lambda: not asleep(), "a new thread wakes it")
            assert wakes()["thread"] == 1
            until(asleep, "it sleeps again")


def test_an_ioloop_made_wakes_it(quick_to_sleep):
    fastloop.install()
    with parked():
        until(asleep, "the controller sleeps")

        async def make() -> None:
            IOLoop.current()

        asyncio.run(make())
        until(lambda: wakes()["ioloop"] == 1, "a new IOLoop wakes it")


@pytest.mark.parametrize("patches", ["all", ["switchinterval", "add_callback"]])
def test_uninstall_while_it_sleeps_ends_it(quick_to_sleep, patches):
    fastloop.install(None if patches == "all" else patches)
    with parked():
        ours = controller()
        run_loop_until(asleep, "the controller sleeps")
        fastloop.uninstall()
        assert ours is not None and not ours.running
        assert not IDLE.asleep and not asleep()


@pytest.mark.parametrize("kind", ["add_callback off", "uvloop"])
def test_where_a_loop_cannot_wake_it_it_never_sleeps(quick_to_sleep, kind):
    """No loop iteration reports to it: asleep, a thread that starts to
    compute beside the loop would go unseen."""
    loop_factory = None
    if kind == "uvloop":
        loop_factory = pytest.importorskip("uvloop").new_event_loop
    fastloop.install(["switchinterval"] if kind == "add_callback off" else None)
    ticks = 4 * _switch_policy.DORMANT_TICKS
    with parked():

        def ticked() -> bool:
            assert not asleep()
            return fastloop.stats().switchinterval.wait_samples >= ticks

        run_loop_until(ticked, f"{ticks} ticks", loop_factory=loop_factory)
    assert set(wakes().values()) == {0}


def test_add_callback_uninstalled_while_it_sleeps_wakes_it_for_good(quick_to_sleep):
    fastloop.install()
    ticks = 4 * _switch_policy.DORMANT_TICKS
    with parked():
        uninstalled_at: list[int] = []

        def asleep_then_uninstalled_then_ticks() -> bool:
            now = fastloop.stats().switchinterval.wait_samples
            if not uninstalled_at:
                if asleep():
                    fastloop.uninstall(["add_callback"])
                    uninstalled_at.append(now)
                return False
            return now >= uninstalled_at[0] + ticks

        run_loop_until(
            asleep_then_uninstalled_then_ticks, f"asleep, then {ticks} ticks"
        )
        assert not asleep()
    assert wakes() == {"compute": 0, "thread": 0, "ioloop": 0, "alone": 0,
                       "uninstall": 1}  # fmt: skip
