"""fastloop's metrics on distributed's own /metrics, scraped over HTTP.

A LocalCluster with worker processes and the ``fastloop.dask`` preload;
the scheduler runs in this process, each worker in its own.  Skipped
without ``distributed`` (a plain ``pytest``); ``.ci/run`` installs it.
"""

from __future__ import annotations

import time
import urllib.request

import pytest

pytest.importorskip(
    "distributed",
    reason="needs distributed (pip install distributed); .ci/run installs it",
)
pytest.importorskip("prometheus_client")
pytestmark = pytest.mark.dask

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from fastloop.telemetry.schema import Snapshot  # noqa: E402
from tests_support import declared_metrics  # noqa: E402

FAMILIES = set(declared_metrics(Snapshot)) - {"fastloop_patch_installed"}
PAYLOAD = 1_000_000


def payload(n):
    return b"x" * n


def worker_http_port(dask_worker):
    return dask_worker.http_server.port


def scheduler_http_port(dask_scheduler):
    return dask_scheduler.http_server.port


def scrape(port):
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=60) as response:
        text = response.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def value(families, name, sample, **labels):
    (found,) = [
        s.value
        for s in families[name].samples
        if s.name == sample and s.labels == labels
    ]
    return found


def counts(families):
    return {
        "writes": value(
            families,
            "fastloop_write_to_fd_seconds",
            "fastloop_write_to_fd_seconds_count",
        ),
        "written": value(
            families,
            "fastloop_write_to_fd_written_bytes",
            "fastloop_write_to_fd_written_bytes_total",
        ),
        "wakeups": value(
            families, "fastloop_wakeups_requested", "fastloop_wakeups_requested_total"
        ),
    }


def check_families(families):
    assert set(families) >= FAMILIES
    for patch in ("add_callback", "wakeup", "write_to_fd"):
        assert (
            value(
                families,
                "fastloop_patch_installed",
                "fastloop_patch_installed",
                patch=patch,
            )
            == 1
        )
    writes = families["fastloop_write_to_fd_seconds"].samples
    buckets = [s.value for s in writes if s.name.endswith("_bucket")]
    assert buckets == sorted(buckets)
    assert buckets[-1] == counts(families)["writes"] > 0


def test_scheduler_and_worker_processes_serve_fastloop_metrics(monkeypatch):
    from distributed import Client, LocalCluster

    # Worker processes start a watchdog at interpreter start (the .pth).
    monkeypatch.setenv("FASTLOOP_BLOCK_MS", "1000")
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            preload=["fastloop.dask"],
            scheduler_kwargs={"preload": ["fastloop.dask"]},
        ) as cluster,
        Client(cluster) as client,
    ):
        workers = client.run(worker_http_port)
        ports = {"scheduler": client.run_on_scheduler(scheduler_http_port), **workers}
        before = {process: scrape(port) for process, port in ports.items()}
        for address in workers:
            future = client.submit(payload, PAYLOAD, workers=[address], pure=False)
            assert len(future.result()) == PAYLOAD
        after = {process: scrape(port) for process, port in ports.items()}
        for process in ports:
            check_families(after[process])
            old, new = counts(before[process]), counts(after[process])
            assert new["writes"] > old["writes"], process
            assert new["written"] > old["written"], process
        for address in workers:
            old, new = counts(before[address]), counts(after[address])
            # Each worker sent its result to the client, and its executor
            # thread woke the loop when the task finished.
            assert new["written"] - old["written"] >= PAYLOAD
            assert new["wakeups"] > old["wakeups"]
            assert_watchdog_beats(ports[address])


def assert_watchdog_beats(port):
    deadline = time.monotonic() + 60
    while True:
        families = scrape(port)
        running = value(
            families, "fastloop_watchdog_running", "fastloop_watchdog_running"
        )
        beats = value(
            families, "fastloop_loop_lag_seconds", "fastloop_loop_lag_seconds_count"
        )
        if beats > 0 or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    assert running == 1
    assert beats > 0
