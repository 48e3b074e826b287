"""Idle counts of fastloop's own threads (bench/_idle_counts.py), and their tables.

Counts only (no timed run): the threads are told by their OS names, each
one's wake-ups are its voluntary context switches, and a results file
written before they were counted renders as it did.
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
from tornado import ioloop  # noqa: F401  (the switchinterval patch's target)

import fastloop
from fastloop.patches import _switch_controller
from tests_support import bench_module

needs_proc = pytest.mark.skipif(
    not os.path.isdir("/proc/self/task"), reason="reads /proc (Linux)"
)


@needs_proc
def test_auto_modes_controller_is_told_by_its_thread_name():
    idle = bench_module("_idle_counts")
    done = threading.Event()
    helper = threading.Thread(target=done.wait, daemon=True)
    try:
        with fastloop.patched(["switchinterval"]):
            helper.start()  # the second thread starts the controller
            deadline = time.monotonic() + 30
            while True:
                names = [name for name, _ in idle.thread_wakeups(os.getpid()).values()]
                if _switch_controller.THREAD_NAME in names:
                    break
                assert time.monotonic() < deadline, names
                time.sleep(0.01)
    finally:
        done.set()
        helper.join()
    assert names.count(_switch_controller.THREAD_NAME) == 1
    assert _switch_controller.THREAD_NAME.startswith(idle.OURS)


def test_fastloops_threads_wakeups_are_counted_thread_by_thread():
    idle = bench_module("_idle_counts")
    before = ({}, {10: ("dask worker", 500), 11: ("fastloop-auto", 40)})
    after = ({}, {10: ("dask worker", 900), 11: ("fastloop-auto", 40),
                   12: ("fastloop-auto", 6), 13: ("fastloop-watchd", 20)})  # fmt: skip
    # The controller ended and started again (11, then 12): one name.
    assert idle.ours_per_s(before, after, 2.0) == {
        "fastloop-auto": 3.0,
        "fastloop-watchd": 10.0,
    }
    assert idle.ours_median([{"fastloop-auto": 4.0}, {}, {"fastloop-auto": 0.0}]) == {
        "fastloop-auto": 0.0
    }


def test_cpu_is_counted_thread_by_thread_over_the_window():
    idle = bench_module("_idle_counts")
    # 10 ran 3 ms; 11 ended (its earlier time is not taken off); 12 started
    # during the window and ran 1 ms.
    before = ({10: 5_000_000, 11: 9_000_000}, {})
    after = ({10: 8_000_000, 12: 1_000_000}, {})
    figures = idle.per_process(before, after, 2.0)
    assert figures["cpu_percent"] == pytest.approx(100 * 0.004 / 2.0)


@needs_proc
def test_this_process_cpu_reads_what_it_ran():
    idle = bench_module("_idle_counts")
    before = idle.reading({"me": os.getpid()})["me"]
    spent = time.thread_time_ns()
    while time.thread_time_ns() - spent < 50_000_000:
        pass
    after = idle.reading({"me": os.getpid()})["me"]
    ran = idle.per_process(before, after, 1.0)["cpu_percent"] / 100
    assert ran >= 0.05


def _rendered(tmp_path, counted: bool) -> str:
    """The committed results, with fastloop's threads counted if asked."""
    render = bench_module("_render_dask")
    data = json.loads((render.RESULTS / "dask_idle.json").read_text())
    for arm, row in data["rows"].items():
        for process in ("scheduler", "nanny", "worker"):
            if counted:
                ours = "FASTLOOP=1" in arm and process != "scheduler"
                row[process]["fastloop_wakeups_per_s"] = (
                    {"fastloop-auto": 0.0} if ours else {}
                )
            else:
                row[process].pop("fastloop_wakeups_per_s", None)
    (tmp_path / "dask_idle.json").write_text(json.dumps(data))
    return "\n".join(render.idle(tmp_path))


def test_fastloops_threads_render_where_the_file_counted_them(tmp_path):
    text = _rendered(tmp_path, counted=True)
    assert "| fastloop's threads |" in text
    assert "| nanny `fastloop-auto` 0.0, worker `fastloop-auto` 0.0 |" in text
    render = bench_module("_render_dask")
    arms = json.loads((render.RESULTS / "dask_idle.json").read_text())["rows"]
    # The arms without fastloop: stock and the configuration floor.
    assert text.count("| none |") == sum("FASTLOOP" not in arm for arm in arms) == 2


def test_a_file_that_did_not_count_them_renders_as_before(tmp_path):
    assert "fastloop's threads" not in _rendered(tmp_path, counted=False)
