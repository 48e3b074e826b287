"""The ``cluster_stats`` sample shown in the README, from a real dask cluster.

    python bench/samples/cluster_stats.py [--out bench/results/cluster_stats.txt]

A LocalCluster with 2 worker processes, the scheduler and workers started
with ``--preload fastloop.dask``'s equivalent; 2,000 tiny tasks and 500
actor calls, then ``fastloop.dask.cluster_stats(client)``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from distributed import Client, LocalCluster

from fastloop.dask import cluster_stats


class Counter:
    n = 0

    def incr(self) -> int:
        self.n += 1
        return self.n


def inc(x: int) -> int:
    return x + 1


def table(result: dict) -> str:
    """One row per process; "off" where a patch is not active in that process."""
    rows = [
        ("scheduler", result["scheduler"]),
        *sorted(result["workers"].items()),
        ("total", result["total"]),
    ]
    lines = [
        f"{'process':<24}{'writes':>8}{'bytes written':>15}{'p99 write':>11}"
        f"{'max write':>11}{'on-loop cbs/batches':>22}{'xthread cbs':>13}"
        f"{'wakeups asked/written':>23}"
    ]
    for name, snap in rows:
        w, a, k = snap["write_to_fd"], snap["add_callback"], snap["wakeup"]
        active = snap["installed"]
        writes = (
            f"{w['calls']:>8,}{w['bytes_written']:>15,}{w['p99_ns'] / 1e3:>9.0f}us"
            f"{w['max_ns'] / 1e3:>9.0f}us"
            if "write_to_fd" in active
            else f"{'off':>8}{'':>15}{'':>11}{'':>11}"
        )
        callbacks = (
            f"{a['onloop_callbacks']:>13,} / {a['onloop_batches']:<6,}"
            f"{a['remote_callbacks']:>13,}"
            if "add_callback" in active
            else f"{'off':>22}{'off':>13}"
        )
        wakeups = (
            f"{k['requested']:>13,} / {k['written']:<8,}"
            if "wakeup" in active
            else f"{'off':>13}"
        )
        lines.append(f"{name:<24}{writes}{callbacks}{wakeups}".rstrip())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            preload=["fastloop.dask"],
            scheduler_kwargs={"preload": ["fastloop.dask"]},
        ) as cluster,
        Client(cluster) as client,
    ):
        client.gather(client.map(inc, range(2000), pure=False))
        actor = client.submit(Counter, actor=True).result()
        for _ in range(500):
            actor.incr().result()
        result = cluster_stats(client)
    text = table(result)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
