"""fastloop.dask: the preload in real dask processes, and cluster-wide stats.

Skipped without ``distributed`` (a plain ``pytest``); ``.ci/run`` installs it
and runs these.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time

import pytest

distributed = pytest.importorskip(
    "distributed",
    reason="needs distributed (pip install distributed); .ci/run installs it",
)
pytestmark = pytest.mark.dask

from fastloop.dask import cluster_stats  # noqa: E402
from tests_support import (  # noqa: E402
    default_set,
    metrics_text,
    spin,
    worker_http_port,
)

ALL = default_set(dask=True)


class Counter:
    n = 0

    def incr(self):
        self.n += 1
        return self.n


def inc(x):
    return x + 1


def installed():
    import fastloop

    return sorted(fastloop.installed())


def exercise(client):
    assert client.gather(client.map(inc, range(200), pure=False)) == list(range(1, 201))
    actor = client.submit(Counter, actor=True).result()
    for _ in range(50):
        actor.incr().result()


def check(result, workers):
    assert len(result["workers"]) == workers
    for snapshot in result["workers"].values():
        writes = snapshot["write_to_fd"]
        assert (
            writes["calls"] > 0 and writes["bytes_written"] > 0
        )  # real TCP comm writes
    total = result["total"]["write_to_fd"]
    parts = [result["scheduler"], *result["workers"].values()]
    assert total["bytes_written"] == sum(
        p["write_to_fd"]["bytes_written"] for p in parts
    )
    # Counts are exact and add; the histogram holds weighted (estimated)
    # counts of the timed calls, and those add too.
    for key in ("calls", "timed_calls"):
        assert total[key] == sum(p["write_to_fd"][key] for p in parts)
    assert sum(n for _, n in total["histogram"]) == sum(
        n for p in parts for _, n in p["write_to_fd"]["histogram"]
    )
    assert 0 < total["timed_calls"] <= total["calls"]
    assert 0 < total["p50_ns"] <= total["p99_ns"] <= total["max_ns"]
    # Each process says what it runs; the total counts processes per patch.
    assert result["total"]["processes"] == len(parts)
    assert result["total"]["installed"] == dict.fromkeys(ALL, len(parts))
    assert all(p["installed"] == ALL for p in parts)
    # GIL waits merge like the write times: counts add, percentiles recomputed.
    waits = result["total"]["gil"]["poll"]
    assert waits["samples"] == sum(p["gil"]["poll"]["samples"] for p in parts)
    assert waits["samples"] == sum(n for _, n in waits["histogram"])
    assert waits["p50_ns"] <= waits["p99_ns"] <= waits["max_ns"]
    assert "advice" in result["total"]["gil"]


def test_local_cluster_with_worker_processes_and_the_preload():
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            preload=["fastloop.dask"],
            scheduler_kwargs={"preload": ["fastloop.dask"], "dashboard": False},
        ) as cluster,
        Client(cluster) as client,
    ):
        assert set(map(tuple, client.run(installed).values())) == {tuple(ALL)}
        exercise(client)
        result = cluster_stats(client)
    check(result, workers=2)
    assert result["scheduler"]["write_to_fd"]["calls"] > 0


def test_preload_through_dask_config():
    import dask
    from distributed import Client, LocalCluster

    settings = {
        "distributed.scheduler.preload": ["fastloop.dask"],
        "distributed.worker.preload": ["fastloop.dask"],
    }
    with (
        dask.config.set(settings),
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        assert list(client.run(installed).values()) == [ALL]
        assert client.run_on_scheduler(installed) == ALL
        exercise(client)
        check(cluster_stats(client), workers=1)


def _settings_and_sources():
    from fastloop import config

    names = ("block_ms", "switch_budget", "poll_us")
    return (
        {name: getattr(config.settings, name) for name in names},
        {name: config.sources.get(name) for name in names},
    )


def test_settings_from_dask_config_preload_arguments_and_variables(monkeypatch):
    """In worker processes: a variable beats a preload argument beats dask config."""
    import dask
    from distributed import Client, LocalCluster

    monkeypatch.setenv("FASTLOOP_POLL_US", "3")  # the worker processes inherit it
    section = {
        "fastloop.patches": ["add_callback", "write_to_fd"],
        "fastloop.block-ms": 4000,
        "fastloop.switch-budget": 0.02,
        "fastloop.poll-us": 1,
    }
    with (
        dask.config.set(section),  # the nanny passes its config to the worker
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            preload=["fastloop.dask"],
            preload_argv=["--switch-budget", "0.03"],
        ) as cluster,
        Client(cluster) as client,
    ):
        assert list(client.run(installed).values()) == [["add_callback", "write_to_fd"]]
        [(values, sources)] = client.run(_settings_and_sources).values()
    assert values == {"block_ms": 4000.0, "switch_budget": 0.03, "poll_us": 3.0}
    assert sources == {
        "block_ms": "dask config fastloop.block-ms",
        "switch_budget": "preload argument --switch-budget",
        "poll_us": "FASTLOOP_POLL_US",
    }


def test_separate_scheduler_and_worker_processes_over_tcp(tmp_path):
    from distributed import Client

    scheduler_file = tmp_path / "scheduler.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
    # The worker unpickles this module's functions: let it import them.
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")]))
    preload = ["--preload", "fastloop.dask"]
    scheduler = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dask",
            "scheduler",
            "--host",
            "127.0.0.1",
            "--no-dashboard",
            "--scheduler-file",
            str(scheduler_file),
            *preload,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    worker = None
    try:
        deadline = time.monotonic() + 60
        address = None
        while address is None and time.monotonic() < deadline:
            time.sleep(0.1)
            with contextlib.suppress(OSError, ValueError):  # not yet, or half written
                address = json.loads(scheduler_file.read_text())["address"]
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dask",
                "worker",
                address,
                "--nthreads",
                "1",
                "--no-dashboard",
                "--host",
                "127.0.0.1",
                "--preload",
                "fastloop.dask.cli",  # the preload that takes arguments there
                "--switch-budget",
                "0.03",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        with Client(scheduler_file=str(scheduler_file), timeout=60) as client:
            client.wait_for_workers(1, timeout=60)
            assert list(client.run(installed).values()) == [ALL]
            assert client.run_on_scheduler(installed) == ALL
            [(values, _)] = client.run(_settings_and_sources).values()
            assert values["switch_budget"] == 0.03
            exercise(client)
            result = cluster_stats(client)
        check(result, workers=1)
        assert result["scheduler"]["write_to_fd"]["bytes_written"] > 0
    finally:
        for process in (worker, scheduler):
            if process is not None:
                process.terminate()
                process.wait(30)


def test_worker_under_a_nanny_stopped_by_sigterm_leaves_report_and_profile(tmp_path):
    """As Kubernetes stops a pod: SIGTERM to ``dask worker`` (nanny and worker)."""
    import signal

    from distributed import Client

    scheduler_file = tmp_path / "scheduler.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")]))
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1",
         "--port", "0", "--no-dashboard", "--scheduler-file", str(scheduler_file)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    worker = None
    try:
        deadline = time.monotonic() + 60
        while not scheduler_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        worker = subprocess.Popen(
            [sys.executable, "-m", "fastloop", "run",
             "--report", str(tmp_path / "report.{pid}.json"),
             "--profile", str(tmp_path / "worker.collapsed"), "--",
             sys.executable, "-m", "dask", "worker", "--nanny", "--nthreads", "1",
             "--no-dashboard", "--host", "127.0.0.1", "--preload", "fastloop.dask",
             "--scheduler-file", str(scheduler_file)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        with Client(scheduler_file=str(scheduler_file), timeout=60) as client:
            client.wait_for_workers(1, timeout=60)
            (pid,) = client.run(os.getpid).values()
            exercise(client)
            worker.send_signal(signal.SIGTERM)
            _, log = worker.communicate(timeout=120)
    finally:
        for process in (worker, scheduler):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(30)
    # dask's own log shows the preload line, from the worker process.
    assert "distributed.preloading - INFO - fastloop: preload in Worker: " in log
    assert f"patches {', '.join(ALL)} active" in log
    reports = {p.name: json.loads(p.read_text()) for p in tmp_path.glob("report.*")}
    nanny = worker.pid  # fastloop run became the command
    # (multiprocessing's resource tracker, a Python process too, writes one more)
    assert {f"report.{nanny}.json", f"report.{pid}.json"} <= set(reports), log
    assert reports[f"report.{pid}.json"]["write_to_fd"]["calls"] > 0
    assert reports[f"report.{pid}.json"]["installed"] == ALL
    profiles = sorted(p.name for p in tmp_path.glob("worker*.collapsed"))
    assert {"worker.collapsed", f"worker.{pid}.collapsed"} <= set(profiles), log
    assert "thread:MainThread" in (tmp_path / f"worker.{pid}.collapsed").read_text()


def _actor_calls(direct: bool, calls: int):
    """``calls`` actor calls from this process, whose scheduler it is: a
    LocalCluster's, with its worker in a process of its own (an actor in this
    process would be called directly)."""
    import fastloop

    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster, direct_to_workers=direct) as client,
    ):
        actor = client.submit(Counter, actor=True).result()
        before = fastloop.stats().dask.actor_calls_proxied
        for _ in range(calls):
            actor.incr().result()
        dask = fastloop.stats().dask
        return dask.actor_calls_proxied - before, dask, fastloop.report()


def test_proxied_actor_calls_are_counted_and_the_report_says_what_to_do():
    proxied, dask, report = _actor_calls(direct=False, calls=20)
    assert proxied == 20
    assert "Client(direct_to_workers=True)" in report
    assert (
        dask.direct_to_workers and "must be able to connect" in dask.direct_to_workers
    )


def test_direct_actor_calls_skip_the_proxy_and_the_advice():
    proxied, _, report = _actor_calls(direct=True, calls=20)
    assert proxied == 0
    assert "Client(direct_to_workers=True)" not in report


def test_uvloop_unused_is_seen_while_a_server_runs_on_asyncio():
    pytest.importorskip("uvloop")
    import fastloop

    _, dask, report = _actor_calls(direct=True, calls=1)
    assert dask.uvloop_unused
    assert "distributed.admin.event-loop: uvloop" in report
    assert not fastloop.stats().dask.uvloop_unused  # the cluster has closed


def test_the_scheduler_preload_logs_proxied_calls_once(monkeypatch, caplog):
    import fastloop.dask.advice

    monkeypatch.setattr(fastloop.dask.advice, "PROXY_CHECK_MS", 20)
    caplog.set_level("INFO", logger="distributed.preloading")
    with (
        distributed.LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            dashboard_address=None,
            scheduler_kwargs={"preload": ["fastloop.dask"]},
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        actor = client.submit(Counter, actor=True).result()
        for _ in range(5):
            actor.incr().result()
        deadline = time.monotonic() + 30
        said = []
        while not said and time.monotonic() < deadline:
            said = [r for r in caplog.records if "through the scheduler" in r.message]
            time.sleep(0.05)
        time.sleep(0.2)  # several more periods: it must not say it again
        said = [r for r in caplog.records if "through the scheduler" in r.message]
    assert len(said) == 1


def test_doctor_gives_the_dask_settings_and_their_measured_gains():
    import dask.config

    from fastloop import _measured
    from fastloop.cli import doctor

    with dask.config.set({"distributed.client.direct-to-workers": None}):
        advised = doctor.render(doctor.diagnose({}, loop="asyncio"))
    assert "direct-to-workers None" in advised
    assert _measured.DIRECT_TO_WORKERS in advised
    with dask.config.set(
        {
            "distributed.client.direct-to-workers": True,
            "distributed.admin.event-loop": "uvloop",
        }
    ):
        settled = doctor.diagnose({}, loop="asyncio")["dask"]
    assert settled == {"direct_to_workers": True, "event_loop": "uvloop", "advice": []}


def gil_contention_source(dask_worker):
    return type(dask_worker.monitor._gilknocker).__name__


def heartbeat_contention(dask_scheduler):
    return [ws.metrics.get("gil_contention") for ws in dask_scheduler.workers.values()]


def test_gil_contention_reaches_dask_without_gilknocker(tmp_path, monkeypatch, caplog):
    """dask's monitor, its heartbeat metrics (the dashboard's GIL plots) and
    its own Prometheus counter get fastloop's figure when gilknocker is absent."""
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "gilknocker.py").write_text("raise ImportError('hidden by the test')\n")
    # Spawned workers start from this process's sys.path (multiprocessing).
    monkeypatch.syspath_prepend(str(hidden))
    with (
        distributed.LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=True,
            dashboard_address=None,
            preload=["fastloop.dask"],
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        assert list(client.run(gil_contention_source).values()) == ["TickContention"]
        calm = client.run_on_scheduler(heartbeat_contention)
        # Two threads holding the GIL by turns: beside one, auto mode's short
        # interval would soon leave little to wait for.
        busy = [client.submit(spin, 30.0, pure=False) for _ in range(2)]
        deadline = time.monotonic() + 25
        seen = calm
        while time.monotonic() < deadline:
            seen = client.run_on_scheduler(heartbeat_contention)
            if seen[0] is not None and seen[0] > 0.3:
                break
            time.sleep(0.25)
        (port,) = client.run(worker_http_port).values()
        metrics = metrics_text(port)
        client.cancel(busy)
    assert calm[0] is not None and calm[0] < 0.3
    assert seen[0] > 0.3  # a thread waking every ms would wait much of the time
    total = [line for line in metrics.splitlines() if line.startswith(
        "dask_worker_gil_contention")]  # fmt: skip
    assert total and float(total[0].split()[-1]) > 0, metrics[:2000]
