"""fastloop.prometheus: the collector, a Tornado app serving it, and life without it."""

from __future__ import annotations

import asyncio
import logging
import math
import sys

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from tornado.httpclient import AsyncHTTPClient
from tornado.httpserver import HTTPServer
from tornado.ioloop import IOLoop
from tornado.netutil import bind_sockets
from tornado.web import Application, RequestHandler

import fastloop
from fastloop import prometheus
from fastloop.telemetry import prometheus as collector
from fastloop.telemetry.histogram import Buckets
from fastloop.telemetry.schema import Snapshot
from fastloop.telemetry.schema_gil import INTERVALS_US
from tests_support import declared_metrics, default_set


def families(registry: CollectorRegistry) -> dict:
    text = generate_latest(registry).decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def sample(family, suffix: str = "", **labels) -> float:
    (value,) = [
        s.value
        for s in family.samples
        if s.name == family.name + suffix and s.labels == labels
    ]
    return value


def check_histogram(family, count: int, total_ns: int) -> None:
    buckets = [s for s in family.samples if s.name.endswith("_bucket")]
    bounds = [float(s.labels["le"]) for s in buckets]
    assert bounds == sorted(bounds) and bounds[-1] == math.inf
    cumulative = [s.value for s in buckets]
    assert cumulative == sorted(cumulative)  # cumulative counts never drop
    assert sample(family, "_count") == cumulative[-1] == count
    assert sample(family, "_sum") == pytest.approx(total_ns * 1e-9)


class MetricsHandler(RequestHandler):
    def initialize(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def get(self) -> None:
        self.set_header("Content-Type", "text/plain; version=0.0.4")
        self.write(generate_latest(self.registry))


def test_a_tornado_app_serves_live_stats_on_each_scrape():
    registry = CollectorRegistry()
    prometheus.register(registry)
    fastloop.install(["write_to_fd"])
    fastloop.reset_stats()

    async def scrape_twice() -> list[str]:
        app = Application([("/metrics", MetricsHandler, {"registry": registry})])
        server = HTTPServer(app)
        [sock] = bind_sockets(0, "127.0.0.1")
        server.add_sockets([sock])
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/metrics"
        client = AsyncHTTPClient(force_instance=True)
        try:
            return [(await client.fetch(url)).body.decode() for _ in range(2)]
        finally:
            client.close()
            server.stop()

    first, second = (
        {f.name: f for f in text_string_to_metric_families(text)}
        for text in asyncio.run(scrape_twice())
    )
    # The first response (and its request) were written between the scrapes.
    for name, suffix in [
        ("fastloop_write_to_fd_calls", "_total"),
        ("fastloop_write_to_fd_written_bytes", "_total"),
    ]:
        assert sample(second[name], suffix) > sample(first[name], suffix) > 0
    # Nothing writes now: the collector reports exactly what stats() says.
    now = families(registry)
    writes = fastloop.stats().write_to_fd
    # Calls are exact; the histogram counts each timed call for the calls it
    # stands for (a sample of them), so its _count estimates the calls.
    check_histogram(
        now["fastloop_write_to_fd_seconds"], writes.histogram.total, writes.total_ns
    )
    assert sample(now["fastloop_write_to_fd_calls"], "_total") == writes.calls
    assert sample(now["fastloop_write_to_fd_timed_calls"], "_total") == (
        writes.timed_calls
    )
    assert sample(now["fastloop_write_to_fd_offered_bytes"], "_total") == (
        writes.bytes_offered
    )
    assert sample(now["fastloop_patch_installed"], patch="write_to_fd") == 1
    assert sample(now["fastloop_patch_installed"], patch="wakeup") == 0


def test_watchdog_heartbeats_make_the_loop_lag_histogram():
    fastloop.reset_stats()

    async def beat() -> None:
        IOLoop.current()  # the watchdog watches IOLoops
        with fastloop.watch(threshold_ms=20):
            for _ in range(2000):
                if fastloop.stats().watchdog.beats >= 3:
                    break
                await asyncio.sleep(0.005)

    asyncio.run(beat())
    registry = CollectorRegistry()
    prometheus.register(registry)
    now = families(registry)
    lags = fastloop.stats().watchdog
    assert lags.beats >= 3 and lags.lag_ns > 0
    check_histogram(now["fastloop_loop_lag_seconds"], lags.beats, lags.lag_ns)
    assert sample(now["fastloop_watchdog_running"]) == 0


def test_log2_buckets_become_cumulative_seconds_buckets():
    # fastloop bucket i (upper bound 2**i - 1 ns) lands under le = 2**i ns;
    # below 2**10 ns in the first bound, above 2**34 ns only in +Inf.
    histogram = [[0, 1], [511, 2], [1023, 3], [2047, 4], [(1 << 40) - 1, 5]]
    buckets = collector.cumulative_buckets(Buckets.from_pairs(histogram).counts)
    assert buckets[0] == ("1.024e-06", 6.0)
    assert buckets[1] == ("2.048e-06", 10.0)
    assert buckets[-2] == (buckets[-2][0], 10.0)
    assert float(buckets[-2][0]) == 2**34 * 1e-9
    assert buckets[-1] == ("+Inf", 15.0)
    assert len(buckets) == len(collector.BOUND_BITS) + 1


def test_every_stats_key_is_exported_or_left_out_on_purpose():
    # Every figure the schema gives a metric is in a scrape, and nothing else.
    registry = CollectorRegistry()
    prometheus.register(registry)
    assert set(families(registry)) == set(declared_metrics(Snapshot))
    # Top-level plain keys: the active patches (fastloop_patch_installed).
    snapshot = fastloop.stats().to_dict()
    assert {k for k, v in snapshot.items() if not isinstance(v, dict)} == {"installed"}


def test_names_units_and_help_follow_prometheus_conventions():
    registry = CollectorRegistry()
    prometheus.register(registry)
    found = families(registry)
    assert len(found) == len(declared_metrics(Snapshot))
    for name, family in found.items():
        assert name.startswith("fastloop_") and "_ns" not in name
        assert len(family.documentation) > 20, name
        if family.type == "counter":
            assert {s.name for s in family.samples} == {name + "_total"}
        if family.type == "histogram":
            assert name.endswith("_seconds")
    expected = {
        "fastloop_write_to_fd_seconds",
        "fastloop_loop_lag_seconds",
        "fastloop_gil_wait_at_poll_seconds",
        "fastloop_gil_wait_probe_seconds",
        "fastloop_switch_interval_wakeup_wait_seconds",
    }
    assert {n for n, f in found.items() if f.type == "histogram"} == expected


def test_the_time_at_each_switch_interval_is_one_labelled_counter():
    registry = CollectorRegistry()
    prometheus.register(registry)
    family = families(registry)["fastloop_switch_interval_seconds"]
    assert family.type == "counter"
    labels = [s.labels["interval_us"] for s in family.samples]
    assert labels == [*map(str, INTERVALS_US), "found"]


def test_register_is_idempotent_and_defaults_to_the_global_registry():
    registry = CollectorRegistry()
    collector = prometheus.register(registry)
    assert prometheus.register(registry) is collector
    assert generate_latest(registry).count(b"# HELP fastloop_write_to_fd_seconds ") == 1
    assert prometheus.register() is prometheus.register(REGISTRY)
    assert "fastloop_write_to_fd_seconds" in families(REGISTRY)


@pytest.fixture
def without_prometheus_client(monkeypatch):
    for name in [n for n in sys.modules if n.partition(".")[0] == "prometheus_client"]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "fastloop.telemetry.prometheus")
    monkeypatch.delattr(fastloop.telemetry, "prometheus")


@pytest.mark.usefixtures("without_prometheus_client")
def test_without_prometheus_client_register_names_the_extra():
    extra = r"pip install 'tornado-fastloop\[prometheus\]'"
    with pytest.raises(ImportError, match=extra):
        prometheus.register()


@pytest.mark.usefixtures("without_prometheus_client")
def test_without_prometheus_client_the_dask_preload_logs_one_line_and_goes_on(
    caplog,
):
    from fastloop.dask import setup

    # The preload speaks on dask's own logger, the one dask's logs show.
    with caplog.at_level(logging.INFO, logger="distributed.preloading"):
        setup(object())
    assert sorted(fastloop.installed()) == default_set(
        dask="distributed" in sys.modules
    )
    [line] = [r.getMessage() for r in caplog.records if "Prometheus" in r.getMessage()]
    assert "tornado-fastloop[prometheus]" in line
