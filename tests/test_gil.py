"""The GIL-wait measure: the probe thread, the settings, the report."""

from __future__ import annotations

import threading
import time

import pytest

import fastloop
from fastloop import config
from fastloop.telemetry.live import GIL


@pytest.fixture(autouse=True)
def no_probe():
    yield
    fastloop.configure(gil_probe_ms=None)


def wait_for(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_probe_starts_records_and_stops():
    fastloop.reset_stats()
    fastloop.configure(gil_probe_ms=1)
    assert fastloop.stats().gil.probing
    wait_for(lambda: fastloop.stats().gil.probe.samples >= 5)
    probe = fastloop.stats().gil.probe
    assert probe.elapsed_ns >= probe.samples * 1_000_000
    assert 0.0 <= probe.fraction < 1.0
    assert "GIL wait (probe)" in fastloop.report()
    fastloop.configure(gil_probe_ms=None)
    assert not fastloop.stats().gil.probing
    threads = [t.name for t in threading.enumerate()]
    assert "fastloop-gil-probe" not in threads


def test_probe_sees_a_thread_that_holds_the_gil():
    """A wake-up that comes while another thread holds the GIL waits for it.

    The holder makes one C call (``sum`` over a ``range``) that keeps the
    GIL however long it takes, sized until it costs 20 probe periods of the
    holder's CPU time (wall time is at least that).  No tick runs during
    it, so the first one after it waited nearly all of it; half is asserted,
    the rest covering the few bytecodes around the call, where the GIL may
    change hands.  (A pure-Python spinner hands the GIL over at the switch
    interval only if the waiter is the thread scheduled then: a bound on
    scheduling, not a construction.)
    """
    period_ns = 1_000_000
    fastloop.reset_stats()
    fastloop.configure(gil_probe_ms=period_ns / 1e6)
    wait_for(lambda: fastloop.stats().gil.probe.samples >= 1)
    counted: list[int] = []

    def hold() -> None:
        n = 1 << 16
        while True:
            started = time.thread_time_ns()
            sum(range(n))  # one C call: this thread keeps the GIL throughout
            if time.thread_time_ns() - started >= 20 * period_ns:
                break
            n *= 2
        counted.append(fastloop.stats().gil.probe.samples)

    holder = threading.Thread(target=hold)
    holder.start()
    holder.join()
    # A tick counted after the call: the one right after it has been, by then.
    wait_for(lambda: fastloop.stats().gil.probe.samples > counted[0])
    assert fastloop.stats().gil.probe.max_ns >= 10 * period_ns


def sys_switch_interval_ns() -> int:
    import sys

    return int(sys.getswitchinterval() * 1e9)


def test_setting_from_the_environment_and_bad_values():
    chosen, problems = config.settings_from_environ({"FASTLOOP_GIL_PROBE_MS": "5"})
    assert chosen == {"gil_probe_ms": 5.0} and not problems
    chosen, problems = config.settings_from_environ({"FASTLOOP_GIL_PROBE_MS": "x"})
    assert chosen == {} and "FASTLOOP_GIL_PROBE_MS" in str(problems[0])
    with pytest.raises(ValueError, match="gil_probe_ms"):
        fastloop.configure(gil_probe_ms=0)


def test_snapshot_is_json_able_and_resets():
    GIL.observe("histogram", 2_000, part="probe", elapsed_ns=1_000_000)
    data = fastloop.stats().to_dict()["gil"]
    assert data["probe"]["samples"] >= 1
    assert data["probe"]["histogram"]
    fastloop.reset_stats()
    assert fastloop.stats().gil.probe.samples == 0


def contended() -> None:
    for _ in range(20):
        GIL.observe("histogram", 2_000_000, part="poll")  # 2 ms at each poll


def test_report_advises_a_shorter_switch_interval_under_contention():
    fastloop.reset_stats()
    assert "advice" not in fastloop.report()
    contended()
    text = fastloop.report()
    assert "advice: threads wait for the GIL (p90 2.0 ms" in text
    assert "the switchinterval patch (in FASTLOOP=1)" in text
    assert fastloop.stats().to_dict()["gil"]["advice"].startswith("threads wait")


def test_no_advice_once_switchinterval_is_installed(monkeypatch):
    import sys

    monkeypatch.setattr(sys, "getswitchinterval", lambda: 0.005)
    fastloop.reset_stats()
    contended()
    with fastloop.patched(["switchinterval"]):
        assert "advice" not in fastloop.report()
        assert fastloop.stats().to_dict()["gil"]["advice"] is None


def test_doctor_json_carries_the_gil_section():
    from fastloop.cli import doctor

    fastloop.reset_stats()
    contended()
    report = doctor.diagnose({}, loop="asyncio")
    assert report["gil"]["poll"]["samples"] == 20
    assert report["gil"]["advice"]
    assert "threads wait for the GIL" in doctor.render(report)
