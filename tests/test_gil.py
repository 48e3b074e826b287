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
    """Beside a pure-Python spinner, waking up waits for the GIL hand-over."""
    stop = [False]

    def spin() -> None:
        while not stop[0]:
            pass

    fastloop.reset_stats()
    fastloop.configure(gil_probe_ms=1)
    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        wait_for(lambda: fastloop.stats().gil.probe.samples >= 20)
    finally:
        stop[0] = True
        spinner.join()
    probe = fastloop.stats().gil.probe
    # A spinner drops the GIL only when a waiter has asked for a whole switch
    # interval: some wake-up waited at least that long.
    assert probe.max_ns >= sys_switch_interval_ns() // 2


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
    assert "FASTLOOP=all,switchinterval" in text
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
