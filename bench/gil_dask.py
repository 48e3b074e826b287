"""A dask worker whose task threads compute in Python: 1 ms actor calls beside them.

    python bench/gil_dask.py [--threads 0,1,2,4] [--rounds N] [--seconds S]
                             [--rate R] [--json PATH] [--plot PATH]

Needs distributed (``pip install '.[dask]'``).  One worker process of T
task threads (at least one), each running a task that counts in pure
Python for the whole run, plus dask's own actor thread; the client calls an
actor method that computes for 1 ms of its thread's CPU time (a method that
spins until a wall-clock deadline does less work the more the task threads
preempt it, which made the short intervals look cheaper: beside one task
thread at 150 calls a second, 50 us kept 1.060 [1.012, 1.088] of 1000 us's
compute that way, and 1.001 [0.977, 1.049] with 1 ms of CPU), ``--rate``
times a second, by default 20 divided by the task threads
(``default_rate``): sparse enough that stock keeps up, so every arm does
the same request work (an arm that cannot keep up makes fewer calls, which
the results show).  Measured: the calls' p50 and p90 round trip, and the
task threads' compute rate, paired per round against stock.  The client's
process (the load generator, and the scheduler) runs on CPU 1; the worker
keeps every core.  Arms
(``_arms.gil_arms``): stock, stock on uvloop, every fixed switch interval, and
``FASTLOOP=1`` (auto); the cluster is started fresh for every arm of every
round, and the worker picks fastloop up from the environment, not from
code.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import _results
from _arms import gil_arms, without_fastloop
from _machines import MACHINES, machine
from _pinning import PIN_THREADS
from fastloop import ab
from fastloop.cli.bench import min_rounds

#: The worker's work, spliced into this benchmark's script and
#: bench/dask_gil_contention.py's after their imports (``time`` among them).
WORKLOAD = r"""
class Counter:
    def work(self):
        end = time.thread_time() + 0.001  # 1 ms of this thread's CPU
        while time.thread_time() < end:
            pass
        return 1

def count(seconds):
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    return n

def calls(actor, rate, seconds):
    # the round trips of 1 ms actor calls, ``rate`` a second for ``seconds``
    trips = []
    start = due = time.perf_counter()
    while (now := time.perf_counter()) < start + seconds:
        if now < due:
            time.sleep(due - now)
        due += 1 / rate
        began = time.perf_counter()
        actor.work().result()
        trips.append(time.perf_counter() - began)
    return trips

def calls_beside_tasks(client, actor, threads, rate, seconds):
    # 1 ms actor calls beside ``threads`` tasks counting in Python all along
    counting_s = seconds + 1.5
    tasks = [client.submit(count, counting_s, pure=False) for _ in range(threads)]
    time.sleep(0.75)  # the tasks run, and auto mode has seen them
    trips = calls(actor, rate, seconds)
    counted = client.gather(tasks)
    trips.sort()
    return {"p50_s": trips[len(trips) // 2], "p90_s": trips[int(len(trips) * 0.9)],
            "calls": len(trips), "compute_per_s": sum(counted) / counting_s}
"""

SCRIPT = (
    PIN_THREADS
    + r"""
import json, sys, time
from distributed import Client, LocalCluster
"""
    + WORKLOAD
    + r"""
def switchinterval():
    fastloop = sys.modules.get("fastloop")
    if fastloop is None:
        return {"installed": [], "switchinterval": None}
    return {"installed": sorted(fastloop.installed()),
            "switchinterval": fastloop.stats().switchinterval.to_dict()}

if __name__ == "__main__":
    threads, rate, seconds = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    with LocalCluster(n_workers=1, threads_per_worker=max(threads, 1), processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        actor = client.submit(Counter, actor=True).result()
        pin_threads({1})  # the load generator; the worker keeps every core
        for _ in range(5):
            actor.work().result()
        measured = calls_beside_tasks(client, actor, threads, rate, seconds)
        worker = list(client.run(switchinterval).values())[0]
        print(json.dumps({**measured, **worker}))
"""
)


def default_rate(threads: int) -> float:
    """Calls a second beside ``threads`` task threads: stock keeps up.

    Stock serves one call at a time, and each task thread makes every call
    slower: at 20 a second it made 68 of 81 calls beside 2 threads and 29
    of 81 beside 4 (bench/results/gil_dask.json before this rule), while
    the short intervals made all 81, so their extra request work (1 ms of
    Python a call, and the comm's) counted against their compute.
    """
    return 20.0 / max(threads, 1)


def one_run(
    env: dict[str, str],
    threads: int,
    rate: float,
    seconds: float,
    prefix: Sequence[str] = (),
) -> dict[str, Any]:
    """One fresh cluster's figures; ``prefix`` runs it on another machine
    (``bench/_machines.py``)."""
    out = subprocess.run(
        [*prefix, sys.executable, "-c", SCRIPT, str(threads), str(rate), str(seconds)],
        env={**without_fastloop(dict(os.environ)), **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def summarize(
    runs: dict[str, list[dict[str, Any]]], threads: int
) -> dict[str, dict[str, Any]]:
    rows = {}
    for arm, mine in runs.items():
        row: dict[str, Any] = {
            key: statistics.median(r[key] for r in mine)
            for key in ("p50_s", "p90_s", "calls", "compute_per_s")
        }
        for key in ("p50_s", "p90_s") + (("compute_per_s",) if threads else ()):
            row[f"{key}_vs_stock"] = ab.paired(
                [r[key] for r in runs["stock"]],
                [r[key] for r in mine],
                name=f"{arm} {key}",
                b_label=arm,
            ).to_dict()
        rows[arm] = row
    if "auto" in runs:
        for arm, row in rows.items():
            row["dominates_auto"] = dominates(runs["auto"], runs[arm], threads > 0)
    return rows


def dominates(
    auto: list[dict[str, Any]], other: list[dict[str, Any]], computing: bool
) -> bool:
    """Whether ``other`` is better than auto on p50 and compute at once, shown
    by both 95% intervals of the paired ratios (a median alone is not shown)."""
    if len(auto) < min_rounds(0.95):  # too few rounds to show anything
        return False
    faster = ab.paired([r["p50_s"] for r in auto], [r["p50_s"] for r in other])
    if not faster.high < 1.0:
        return False
    if not computing:
        return True
    more = ab.paired(
        [r["compute_per_s"] for r in auto], [r["compute_per_s"] for r in other]
    )
    return more.low > 1.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="0,1,2,4")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument(
        "--rate", type=float, help="actor calls a second (default: 20 / task threads)"
    )
    parser.add_argument("--arms", help="comma list of arm names (default: all)")
    parser.add_argument(
        "--machine",
        default="two-cores",
        choices=MACHINES,
        help="where the cluster runs (bench/_machines.py); the client is pinned "
        "to CPU 1 where it may run there",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args(argv)
    try:
        import distributed
    except ImportError:
        print(
            "bench/gil_dask.py needs distributed: pip install distributed",
            file=sys.stderr,
        )
        return 2
    import importlib.util

    uvloop = (
        {"DASK_DISTRIBUTED__ADMIN__EVENT_LOOP": "uvloop"}
        if importlib.util.find_spec("uvloop")
        else None
    )
    chosen = gil_arms(uvloop)
    if args.arms:
        chosen = {name: chosen[name] for name in args.arms.split(",")}
    scenarios = []
    for threads in map(int, args.threads.split(",")):
        rate = args.rate or default_rate(threads)
        print(
            f"{threads} task threads: {len(chosen)} arms x {args.rounds} rounds",
            file=sys.stderr,
            flush=True,
        )
        with machine(args.machine) as prefix:
            runs = ab.interleave(
                {
                    arm: functools.partial(
                        one_run, env, threads, rate, args.seconds, prefix
                    )
                    for arm, env in chosen.items()
                },
                rounds=args.rounds,
                warmup=0,
                progress=lambda done, total: print(
                    f"  round {done}/{total}", file=sys.stderr, flush=True
                ),
            )
        for arm, arm_runs in runs.items():  # each arm ran what it says
            wanted = (
                "switchinterval" in chosen[arm].get("FASTLOOP", "") or arm == "auto"
            )
            assert all(
                ("switchinterval" in r["installed"]) == wanted for r in arm_runs
            ), arm
        rows = summarize(runs, threads)
        scenarios.append({"threads": threads, "rate": rate, "rows": rows, "runs": runs})
        print(f"{threads} task threads computing in Python, {rate:g} actor calls/s:")
        for arm, row in rows.items():
            compute = row.get("compute_per_s_vs_stock")
            print(
                f"  {arm:>8}: calls {row['calls']:4.0f}  p50 {row['p50_s'] * 1e3:7.2f} ms "
                f"({row['p50_s_vs_stock']['ratio']:.3f} [{row['p50_s_vs_stock']['low']:.3f}, "
                f"{row['p50_s_vs_stock']['high']:.3f}])  p90 {row['p90_s'] * 1e3:7.2f} ms"
                + (
                    f"  compute {compute['ratio']:.3f} [{compute['low']:.3f}, {compute['high']:.3f}]"
                    if compute
                    else ""
                )
                + ("  (better than auto on both)" if row.get("dominates_auto") else "")
            )
    if args.json:
        _results.save(
            args.json,
            "gil_dask",
            distributed=distributed.__version__,
            machine=args.machine,
            seconds=args.seconds,
            rounds=args.rounds,
            arms=chosen,
            scenarios=scenarios,
        )
    if args.plot:
        import _frontier

        _frontier.plot(
            args.plot,
            "dask worker: 1 ms actor calls beside Python task threads",
            [
                (
                    f"{s['threads']} task thread{'s' if s['threads'] != 1 else ''}",
                    s["rows"],
                )
                for s in scenarios
                if s["threads"]
            ],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
