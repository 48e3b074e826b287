"""The fastloop page on the dask dashboard, read by a real browser.

A LocalCluster with two worker processes, the preload everywhere, and a
task thread computing in Python on one worker; headless Chromium (Debian's
``chromium``, which ``.ci/run`` installs) loads ``/fastloop`` and the test
reads the page's DOM after its script ran.  Skipped without distributed or
Chromium.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.request

import pytest

distributed = pytest.importorskip(
    "distributed",
    reason="needs distributed (pip install distributed); .ci/run installs it",
)
pytestmark = pytest.mark.dask

from tests_support import scheduler_http_port, spin  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FIGURES = ("gil_wait_p99_ms", "write_p99_ms", "interval_us", "coalesced")


def data(port):
    url = f"http://127.0.0.1:{port}/fastloop.json"
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def rendered(port):
    """The page's DOM once its script has drawn it, as Chromium sees it."""
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
         "--virtual-time-budget=4000", "--dump-dom",
         f"http://127.0.0.1:{port}/fastloop"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def panels(dom):
    """process name -> {figure: the text shown}, from the page's sections."""
    found = {}
    drawn = dom.split('<div id="processes">', 1)[1].split("<script>", 1)[0]
    for name, body in re.findall(
        r'<section class="process" data-process="([^"]+)">(.*?)</section>', drawn, re.S
    ):
        found[name] = dict(re.findall(r'data-figure="(\w+)">([^<]*)<', body))
    return found


@pytest.fixture
def cluster():
    import dask

    with (
        # Every write timed: an idle worker's few writes would rarely be sampled.
        dask.config.set({"fastloop.write-timing": "every"}),
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            preload=["fastloop.dask"],
            scheduler_kwargs={"preload": ["fastloop.dask"]},
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


def test_the_data_has_every_process_and_their_figures_over_time(cluster):
    client = cluster
    port = client.run_on_scheduler(scheduler_http_port)
    workers = set(client.scheduler_info()["workers"])
    busy = client.submit(spin, 20.0, pure=False, workers=[min(workers)])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        processes = data(port)["processes"]
        if all(len(processes.get(w, {}).get("samples", ())) >= 3 for w in workers):
            break
        time.sleep(0.5)
    client.cancel(busy)
    assert set(processes) == {"scheduler", *workers}
    for name in workers:
        process = processes[name]
        assert process["kind"] == "Worker"
        assert "switchinterval" in process["installed"]
        assert len(process["samples"]) >= 3
        latest = process["samples"][-1]
        assert latest["write_p99_ms"] is not None  # heartbeats are writes
        assert latest["interval_us"] > 0
    busy_worker = processes[min(workers)]
    waits = [s["gil_wait_p99_ms"] for s in busy_worker["samples"]]
    assert max(w for w in waits if w is not None) >= 1  # a Python thread holds the GIL


@pytest.mark.skipif(
    CHROMIUM is None, reason="needs chromium (Debian); .ci/run installs it"
)
def test_a_browser_shows_the_figures_of_every_worker(cluster):
    client = cluster
    port = client.run_on_scheduler(scheduler_http_port)
    workers = set(client.scheduler_info()["workers"])
    for worker in workers:  # task threads that end wake each worker's loop
        client.gather(client.map(spin, [0.01] * 20, workers=[worker], pure=False))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        processes = data(port)["processes"]
        if all(len(processes.get(w, {}).get("samples", ())) >= 2 for w in workers):
            break
        time.sleep(0.5)
    shown = panels(rendered(port))
    assert set(shown) == {"scheduler", *workers}
    for name in workers:
        for figure in FIGURES:
            assert shown[name][figure] not in ("", "-"), (name, figure, shown[name])
        assert shown[name]["reason"].startswith("auto, ")  # auto mode's own line
