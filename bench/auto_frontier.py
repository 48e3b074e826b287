"""Every switch interval a user could pick, and auto, in one dask worker: the frontier per machine.

    python bench/auto_frontier.py [--machines one-core,two-cores,busy-machine,quota]
                                  [--threads 1,2,4,8] [--rounds N]
                                  [--arms 5000,50,100,200,500,1000,2000,auto]
                                  [--settle S] [--window S] [--json PATH]

Needs distributed.  ``bench/gil_dask.py`` starts a fresh cluster per arm
and round, and a fresh worker's task threads run at one of two speeds
whatever the arm, which makes its intervals wider than the differences
asked about.  Here
one cluster per machine and thread count runs every arm in windows, in the
worker's process: ``fastloop.configure(switch_interval_us=...)`` applies at
once, so the windows of one round differ only in the interval held (or in
auto holding it).  Arms: CPython's 5 ms (stock's interval), every rung of
auto's ladder held fixed, and auto, which starts calm in each of its
windows and must engage again, as in a fresh process.

A window: configure the arm, wait ``--settle`` seconds, then for
``--window`` seconds the task threads count in pure Python (read in the
worker, by its clock) while the client makes 1 ms actor calls at
``20 / T`` a second (``gil_dask``'s workload and ``default_rate``).  Per arm: the compute
against the 5 ms window of the same round (median of paired ratios, with
its interval), and the calls' p50 pooled over the rounds.  The verdicts
are ``_machines.verdict``'s, on ``_machines``' machines (one core, two,
two with another process spinning, a quota of one CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import _results
from _arms import without_fastloop
from _machines import BUDGET, MACHINES, machine, verdict
from _pinning import PIN_THREADS
from fastloop import ab
from gil_dask import WORKLOAD, default_rate

#: The arms: stock's interval first (the base), every rung, then auto.
ARMS = ("5000", "50", "100", "200", "500", "1000", "2000", "auto")

SCRIPT = (
    PIN_THREADS
    + r"""
import json, sys, threading, time
from distributed import Client, LocalCluster, get_worker
from fastloop.ab import balanced_orders
"""
    + WORKLOAD  # the actor's 1 ms calls, and calls() that makes them
    + r"""

def count_until_stopped(slot):
    # counts in pure Python until told to stop, published every 1024
    state = get_worker().bench_counting
    n = 0
    while not state["stop"]:
        n += 1
        if n & 1023 == 0:
            state["counts"][slot] = n
    return n

def start_counting(threads, dask_worker):  # client.run passes the worker
    dask_worker.bench_counting = {"stop": False, "counts": [0] * threads}

def stop_counting(dask_worker):
    dask_worker.bench_counting["stop"] = True

def progress(dask_worker):
    return time.perf_counter(), sum(dask_worker.bench_counting["counts"])

def hold(arm):
    import fastloop
    if arm == "auto":  # from calm, as in a fresh process
        fastloop.configure(switch_interval_us=5000.0)
        fastloop.configure(switch_interval_us="auto")
    else:
        fastloop.configure(switch_interval_us=float(arm))

def held():
    import fastloop
    return fastloop.stats().switchinterval.interval_us

def on_worker(client, function, *args):
    return list(client.run(function, *args).values())[0]

if __name__ == "__main__":
    threads, rounds = int(sys.argv[1]), int(sys.argv[2])
    settle, window, rate = float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
    arms = sys.argv[6].split(",")
    with LocalCluster(n_workers=1, threads_per_worker=threads, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        actor = client.submit(Counter, actor=True).result()
        pin_threads({1})  # the load generator; the worker keeps every core
        on_worker(client, start_counting, threads)
        tasks = [client.submit(count_until_stopped, i, pure=False)
                 for i in range(threads)]
        windows = []
        orders = balanced_orders(len(arms))
        for index in range(rounds):
            for arm in (arms[i] for i in orders[index % len(orders)]):
                on_worker(client, hold, arm)
                time.sleep(settle)
                began, counted = on_worker(client, progress)
                trips = calls(actor, rate, window)
                ended, total = on_worker(client, progress)
                windows.append({"round": index, "arm": arm, "trips": trips,
                                "compute_per_s": (total - counted) / (ended - began),
                                "held_us": on_worker(client, held)})
        on_worker(client, stop_counting)
        client.gather(tasks)
        print(json.dumps(windows))
"""
)


def summarize(windows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per arm: compute paired by round against 5 ms, pooled p50, what was held."""
    by_arm: dict[str, dict[int, dict[str, Any]]] = {}
    for window in sorted(windows, key=lambda w: ARMS.index(w["arm"])):
        by_arm.setdefault(window["arm"], {})[window["round"]] = window
    base = by_arm["5000"]
    rows = {}
    for arm, mine in by_arm.items():
        rounds = sorted(mine)
        trips = sorted(t for r in rounds for t in mine[r]["trips"])
        name = (
            "stock" if arm == "5000" else arm if arm.startswith("auto") else f"{arm} us"
        )
        rows[name] = {
            "p50_s": trips[len(trips) // 2],
            "calls": len(trips),
            "compute_per_s_vs_stock": None
            if arm == "5000"
            else ab.paired(
                [base[r]["compute_per_s"] for r in rounds],
                [mine[r]["compute_per_s"] for r in rounds],
                name=f"{name} compute",
                b_label=name,
            ).to_dict(),
            "held_us": sorted({mine[r]["held_us"] for r in rounds}),
        }
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", default=",".join(MACHINES))
    parser.add_argument("--threads", default="1,2,4,8")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--settle", type=float, default=0.6)
    parser.add_argument("--window", type=float, default=2.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    try:
        import distributed
    except ImportError:
        print("bench/auto_frontier.py needs distributed", file=sys.stderr)
        return 2
    results = []
    for name in args.machines.split(","):
        for threads in map(int, args.threads.split(",")):
            rate = default_rate(threads)
            with machine(name) as prefix:
                out = subprocess.run(
                    [*prefix, sys.executable, "-c", SCRIPT, str(threads),
                     str(args.rounds), str(args.settle), str(args.window),
                     str(rate), args.arms],
                    env={**without_fastloop(dict(os.environ)), "FASTLOOP": "switchinterval"},
                    capture_output=True, text=True, check=True, timeout=3600,
                ).stdout  # fmt: skip
            windows = json.loads(out.strip().splitlines()[-1])
            rows = summarize(windows)
            judged = verdict(rows)
            results.append(
                {"machine": name, "threads": threads, "rate": rate, "rows": rows,
                 "verdict": judged, "windows": windows}
            )  # fmt: skip
            _print(name, threads, rows, judged)
    if args.json:
        _results.save(
            args.json,
            "auto_frontier",
            distributed=distributed.__version__,
            rounds=args.rounds,
            settle_s=args.settle,
            window_s=args.window,
            budget=BUDGET,
            results=results,
        )
    return 0


def _print(
    name: str, threads: int, rows: dict[str, dict[str, Any]], judged: dict[str, Any]
) -> None:
    print(
        f"{name}, {threads} task threads: best fixed within budget "
        f"{judged['best_fixed_within_budget']}; auto held {rows['auto']['held_us']} us",
        flush=True,
    )
    for arm, row in rows.items():
        compute = row["compute_per_s_vs_stock"]
        print(
            f"  {arm:>8}: p50 {row['p50_s'] * 1e3:7.2f} ms ({row['calls']} calls)"
            + (
                f"  compute {compute['ratio']:.3f} [{compute['low']:.3f}, "
                f"{compute['high']:.3f}]"
                if compute
                else ""
            ),
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main())
