"""The screenshot of the fastloop page on the dask dashboard, for the docs.

    python bench/samples/dashboard.py [--out bench/results/dashboard.png]

A LocalCluster with 2 worker processes, the ``fastloop.dask`` preload on the
scheduler and the workers, and dask's config asking for the watchdog at
100 ms (``fastloop.block-ms``).  One worker runs a task that computes in
Python for the whole run (``--seconds``), and the client makes 1 ms actor
calls on the other; halfway, that worker's loop is blocked for 300 ms.  Then headless Chromium
(Debian's ``chromium``) takes the page's picture.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import time
from pathlib import Path

import dask
from distributed import Client, LocalCluster


class Counter:
    def work(self) -> int:
        end = time.thread_time() + 0.001
        while time.thread_time() < end:
            pass
        return 1


def spin(seconds: float) -> int:
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    return n


def scheduler_http_port(dask_scheduler) -> int:  # type: ignore[no-untyped-def]
    return int(dask_scheduler.http_server.port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/dashboard.png"))
    parser.add_argument("--seconds", type=float, default=40.0)
    args = parser.parse_args(argv)
    chromium = shutil.which("chromium")
    if chromium is None:
        print("bench/samples/dashboard.py needs chromium (apt-get install chromium)")
        return 2
    with (
        dask.config.set({"fastloop.block-ms": 100}),
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
        busy, idle = sorted(client.scheduler_info()["workers"])
        computing = client.submit(spin, args.seconds + 10, workers=[busy], pure=False)
        actor = client.submit(Counter, workers=[idle], actor=True).result()
        end = time.monotonic() + args.seconds
        blocked = False
        while time.monotonic() < end:
            actor.work().result()
            time.sleep(0.02)
            if not blocked and time.monotonic() > end - args.seconds / 2:
                client.run(time.sleep, 0.3, workers=[idle])  # on its event loop
                blocked = True
        port = client.run_on_scheduler(scheduler_http_port)
        subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu",
             "--hide-scrollbars", "--window-size=1100,1250",
             "--virtual-time-budget=4000", f"--screenshot={args.out.resolve()}",
             f"http://127.0.0.1:{port}/fastloop"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        client.cancel(computing)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
