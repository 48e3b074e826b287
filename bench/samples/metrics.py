"""The Prometheus scrape shown in the README, from a real dask worker's /metrics.

    python bench/samples/metrics.py [--out bench/results/metrics.txt]

A LocalCluster with 2 worker processes preloading ``fastloop.dask`` (which
registers ``fastloop.prometheus``), the workers' watchdog on at 100 ms;
2,000 tiny tasks and 500 actor calls, then one worker's ``/metrics`` over
HTTP, fastloop's lines only.
"""

from __future__ import annotations

import argparse
import os
import urllib.request
from pathlib import Path

from distributed import Client, LocalCluster


class Counter:
    n = 0

    def incr(self) -> int:
        self.n += 1
        return self.n


def inc(x: int) -> int:
    return x + 1


def http_port(dask_worker) -> int:
    return dask_worker.http_server.port


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    os.environ["FASTLOOP_BLOCK_MS"] = "100"  # read by the worker processes' .pth
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
        client.gather(client.map(inc, range(2000), pure=False))
        actor = client.submit(Counter, actor=True).result()
        for _ in range(500):
            actor.incr().result()
        address, port = sorted(client.run(http_port).items())[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as response:
            text = response.read().decode()
    lines = [line for line in text.splitlines() if "fastloop_" in line]
    output = f"# GET http://127.0.0.1:{port}/metrics (worker {address})\n"
    output += "\n".join(lines) + "\n"
    print(output, end="")
    if args.out:
        args.out.write_text(output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
