"""fastloop's metrics on distributed's own /metrics, scraped over HTTP.

A LocalCluster with worker processes and the ``fastloop.dask`` preload;
the scheduler runs in this process, each worker in its own.  Skipped
without ``distributed`` (a plain ``pytest``); ``.ci/run`` installs it.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip(
    "distributed",
    reason="needs distributed (pip install distributed); .ci/run installs it",
)
pytest.importorskip("prometheus_client")
pytestmark = pytest.mark.dask

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from fastloop.telemetry.schema import Snapshot  # noqa: E402
from tests_support import (  # noqa: E402
    declared_metrics,
    metrics_text,
    scheduler_http_port,
    worker_http_port,
)

FAMILIES = set(declared_metrics(Snapshot)) - {"fastloop_patch_installed"}
PAYLOAD = 1_000_000
PROMETHEUS = shutil.which("prometheus")


def payload(n):
    return b"x" * n


def scrape(port):
    families = text_string_to_metric_families(metrics_text(port))
    return {family.name: family for family in families}


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
            # Each worker sent its result to the client, and (before 3.14,
            # whose asyncio copies a job already done without waking the
            # loop) its executor thread woke the loop when the task finished.
            assert new["written"] - old["written"] >= PAYLOAD
            if sys.version_info < (3, 14):
                assert new["wakeups"] > old["wakeups"]
            assert new["wakeups"] >= old["wakeups"]
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


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _query(base, path, **params):
    url = f"{base}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=30) as response:
        answer = json.loads(response.read())
    assert answer["status"] == "success", answer
    return answer["data"]


def _until(what, deadline_s=90):
    deadline = time.monotonic() + deadline_s
    while True:
        found = what()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def _docs_promql():
    """The PromQL examples of docs/prometheus.md, a line each."""
    page = Path(__file__).resolve().parents[1] / "docs" / "prometheus.md"
    block = page.read_text().split("```promql\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line and not line.startswith("#")]


@contextlib.contextmanager
def _prometheus(tmp_path, targets):
    """A real Prometheus (Debian's package) scraping ``targets`` every second,
    with fastloop's rules, on a port of 127.0.0.1; yields its base URL."""
    from fastloop.rules import PROMETHEUS as RULES

    port = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        json.dumps(  # yaml is a superset of JSON
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [RULES],
                "scrape_configs": [
                    {
                        "job_name": "dask",
                        "scrape_timeout": "1s",
                        "static_configs": [{"targets": targets}],
                    }
                ],
            }
        )
    )
    log = tmp_path / "prometheus.log"  # a file: a pipe nobody reads can fill
    server = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}",
         f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=log.open("w"),
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:

        def ready():
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{base}/-/ready", timeout=5),
            ):
                return True
            assert server.poll() is None, log.read_text()[-3000:]
            return False

        assert _until(ready, 60)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(30)


@pytest.mark.skipif(
    PROMETHEUS is None, reason="needs prometheus (Debian); .ci/run installs it"
)
def test_a_real_prometheus_scrapes_the_cluster_and_the_rules_work(
    tmp_path, monkeypatch
):
    """Every family reaches Prometheus, the docs' PromQL answers, and a
    blocked loop sets its alert pending."""
    import dask
    from distributed import Client, LocalCluster

    with (
        dask.config.set({"fastloop.block-ms": 100}),  # the workers' watchdog
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            preload=["fastloop.dask"],
            scheduler_kwargs={"preload": ["fastloop.dask"]},
        ) as cluster,
        Client(cluster) as client,
    ):
        (port,) = client.run(worker_http_port).values()
        scheduler = client.run_on_scheduler(scheduler_http_port)
        targets = [f"127.0.0.1:{port}", f"127.0.0.1:{scheduler}"]
        with _prometheus(tmp_path, targets) as base:

            def scraped_twice():
                samples = _query(base, "/api/v1/query", query="count_over_time(up[1m])")
                return len(samples["result"]) == 2 and all(
                    float(s["value"][1]) >= 2 for s in samples["result"]
                )

            assert _until(scraped_twice)
            names = set(_query(base, "/api/v1/label/__name__/values"))
            missing = [
                family
                for family in FAMILIES | {"fastloop_patch_installed"}
                if not {family, f"{family}_total", f"{family}_count"} & names
            ]
            assert missing == []
            by_target = _query(
                base,
                "/api/v1/query",
                query='count by (instance) ({__name__=~"fastloop_.+"})',
            )["result"]
            assert {r["metric"]["instance"] for r in by_target} == set(targets)
            for expression in _docs_promql():
                result = _query(base, "/api/v1/query", query=expression)["result"]
                assert result, expression

            client.run(time.sleep, 2.5)  # on the worker's event loop: it blocks

            def pending():
                alerts = _query(base, "/api/v1/alerts")["alerts"]
                return [
                    a
                    for a in alerts
                    if a["labels"]["alertname"] == "FastloopLoopBlocked"
                ]

            [alert] = _until(pending)
            assert alert["state"] == "pending"  # its `for` is 2 minutes
            assert alert["labels"]["instance"] == targets[0]
