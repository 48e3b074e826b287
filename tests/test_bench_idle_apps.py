"""bench/idle_apps.py: its applications start as users start them; its table renders.

Counts only (no timed run): a short window of the idle Tornado application
under stock and under ``FASTLOOP=1``, and the rendering of a results file.
"""

from __future__ import annotations

import json
import os

import pytest

from tests_support import bench_module

needs_proc = pytest.mark.skipif(
    not os.path.isdir("/proc/self/task"), reason="reads /proc (Linux)"
)


@needs_proc
@pytest.mark.parametrize("arm", ["stock", "FASTLOOP=1"])
def test_the_idle_tornado_application_runs_and_is_counted(arm):
    apps = bench_module("idle_apps")
    figures = apps.one_run(apps.tornado_app, arm, settle=0.5, window=1.0)
    # Its 100 ms cache refresh alone wakes its loop about ten times in a
    # second; fastloop's threads sleep while one thread runs.
    assert figures["wakeups_per_s"] >= 5
    assert figures["cpu_percent"] > 0
    assert all(rate == 0 for rate in figures["fastloop_wakeups_per_s"].values())


def test_the_idle_apps_table_names_each_application_and_arm(tmp_path):
    apps = bench_module("idle_apps")
    render = bench_module("_render_apps")
    run = {"cpu_percent": 0.5, "wakeups_per_s": 11.0, "fastloop_wakeups_per_s": {}}
    runs = {
        "Tornado application / stock": [run, run],
        "Tornado application / FASTLOOP=1": [
            {**run, "fastloop_wakeups_per_s": {"fastloop-auto": 0.0}},
            run,
        ],
    }
    rows = apps.summarize(runs)
    data = {"python": "3.11.7", "tornado": "6.6.1", "rounds": 2, "settle_s": 8.0,
            "window_s": 20.0, "rows": rows}  # fmt: skip
    (tmp_path / "idle_apps.json").write_text(json.dumps(data))
    lines = render.idle_apps(tmp_path)
    table = [line for line in lines if line.startswith("| Tornado")]
    assert [line.split(" | ")[1] for line in table] == ["stock", "FASTLOOP=1"]
    assert "`fastloop-auto` 0.0" in table[1]
    assert "1.00 [1.00, 1.00]" in table[1]


def test_an_application_that_never_wakes_has_no_ratio(tmp_path):
    apps = bench_module("idle_apps")
    render = bench_module("_render_apps")
    asleep = {"cpu_percent": 0.0, "wakeups_per_s": 0.0, "fastloop_wakeups_per_s": {}}
    runs = {
        "Jupyter Server / stock": [asleep, asleep],
        "Jupyter Server / FASTLOOP=1": [asleep, {**asleep, "wakeups_per_s": 0.05}],
    }
    rows = apps.summarize(runs)
    assert rows["Jupyter Server / FASTLOOP=1"]["wakeups_per_s_vs_stock"] is None
    data = {"python": "3.11.7", "tornado": "6.6.1", "rounds": 2, "settle_s": 8.0,
            "window_s": 20.0, "rows": rows}  # fmt: skip
    (tmp_path / "idle_apps.json").write_text(json.dumps(data))
    (row,) = [line for line in render.idle_apps(tmp_path) if "| FASTLOOP=1 |" in line]
    assert row.count("none: stock at 0") == 2
