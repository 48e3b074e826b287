"""Whole application: a dask LocalCluster with worker processes, with and without FASTLOOP.

    python bench/dask_app.py [--scenario idle|busy] [--rounds N] [--seconds S] [--arms NAMES] [--json PATH]

Needs distributed (pip install 'tornado-fastloop[dask]').  Each round runs the whole
cluster once per arm as fresh subprocesses, in an order that rotates from
round to round: FASTLOOP unset (stock), FASTLOOP=1 (the default set), and the
opt-in patches on top (``ARMS``); the scheduler and the
nanny-spawned worker processes pick fastloop up from the environment, not
from code.

The client's process (the load generator, and the scheduler) runs on CPU
1 once the cluster is up (``_pinning``).

``idle``: 2 worker processes of 1 thread, on CPU 0; actor round-trip
latency (1,000 calls of no work; the p50 of 300 calls that compute 1 ms),
wall time of 2,000 tiny tasks, and the CPU seconds the scheduler
and workers spend per 1,000 actor calls (loop overhead is the seed's real
metric).

``busy``: 1 worker process of 2 threads, one of them running a pure-Python
task for the whole run (dask/distributed#6325: the worker's loop waits for
the GIL behind it).  Measured: p50 and p90 round trip of an actor method
that computes for 1 ms of its thread's CPU time (``bench/gil_dask.py``
says why not of wall time), and the wall time of 500 tiny tasks.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import _results
from _arms import ARMS, EXTRA
from _pinning import PIN_THREADS
from fastloop import ab

COMMON = (
    PIN_THREADS
    + r"""
import json, statistics, sys, time
from distributed import Client, LocalCluster

class Counter:
    n = 0
    def incr(self):
        self.n += 1
        return self.n
    def work(self):
        end = time.thread_time() + 0.001  # 1 ms of this thread's CPU
        while time.thread_time() < end:
            pass
        return 1

def inc(x):
    return x + 1

def cpu():
    return time.process_time()

def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass

def patched():
    fastloop = sys.modules.get("fastloop")
    return sorted(fastloop.installed()) if fastloop else []

def loop_kind():
    import asyncio
    return type(asyncio.get_running_loop()).__module__.split(".")[0]

def engagements():
    fastloop = sys.modules.get("fastloop")
    return fastloop.stats().switchinterval.engagements if fastloop else 0
"""
)

IDLE = (
    COMMON
    + r"""
if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        actor = client.submit(Counter, actor=True).result()
        pin_threads({1})  # the load generator
        client.run(pin_threads, {0})  # idle servers take the other core
        for _ in range(100):
            actor.incr().result()
        client.gather(client.map(inc, range(200), pure=False))
        workers_before = sum(client.run(cpu).values())
        scheduler_before = time.process_time()
        start = time.perf_counter()
        for _ in range(1000):
            actor.incr().result()
        actor_s = time.perf_counter() - start
        cpu_s = (time.process_time() - scheduler_before) + (
            sum(client.run(cpu).values()) - workers_before)
        trips = []
        for _ in range(300):
            start = time.perf_counter()
            actor.work().result()
            trips.append(time.perf_counter() - start)
        start = time.perf_counter()
        client.gather(client.map(inc, range(2000), pure=False))
        tasks_s = time.perf_counter() - start
        print(json.dumps({"actor_s": actor_s, "tasks_s": tasks_s, "cpu_s_per_1k": cpu_s,
                          "work_p50_s": statistics.median(trips),
                          "worker_loops": sorted(set(client.run(loop_kind).values())),
                          "worker_patches": sorted(set(map(tuple, client.run(patched).values()))),
                          "engagements": sum(client.run(engagements).values())}))
"""
)

BUSY = (
    COMMON
    + r"""
if __name__ == "__main__":
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        actor = client.submit(Counter, actor=True).result()
        pin_threads({1})  # the load generator; the busy worker keeps every core
        actor.work().result()
        hog = client.submit(spin, 120, pure=False)
        time.sleep(0.5)  # the spinning task is running now
        trips = []
        for _ in range(60):
            start = time.perf_counter()
            actor.work().result()
            trips.append(time.perf_counter() - start)
        start = time.perf_counter()
        client.gather(client.map(inc, range(500), pure=False))
        tasks_s = time.perf_counter() - start
        deciles = statistics.quantiles(trips, n=10)
        print(json.dumps({"actor_p50_s": statistics.median(trips),
                          "actor_p90_s": deciles[8], "tasks_s": tasks_s,
                          "worker_patches": sorted(set(map(tuple, client.run(patched).values()))),
                          "engagements": sum(client.run(engagements).values())}))
"""
)

SCENARIOS = {
    "idle": (
        IDLE,
        "LocalCluster(n_workers=2, threads_per_worker=1, processes=True)",
        (
            ("actor_s", "actor round trip"),
            ("work_p50_s", "1 ms actor call, p50"),
            ("tasks_s", "2,000 tiny tasks"),
            ("cpu_s_per_1k", "CPU per 1,000 actor calls"),
        ),
    ),
    "busy": (
        BUSY,
        "LocalCluster(n_workers=1, threads_per_worker=2, processes=True), "
        "one thread running a pure-Python task",
        (
            ("actor_p50_s", "1 ms actor call, p50"),
            ("actor_p90_s", "1 ms actor call, p90"),
            ("tasks_s", "500 tiny tasks"),
        ),
    ),
}


def one_run(
    script: str,
    fastloop: dict[str, str],
    *script_args: str,
    timeout: float = 900,
) -> dict[str, object]:
    """Run ``script`` in a fresh interpreter with only ``fastloop``'s FASTLOOP
    settings; its last line of output, as JSON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
    env.update(fastloop)
    out = subprocess.run(
        [sys.executable, "-c", script, *script_args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=timeout,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def paired_results(
    runs: dict[str, list[dict[str, object]]], measures: tuple[tuple[str, str], ...]
) -> list[ab.Result]:
    """Every arm against stock; an arm ``X+Y`` also against arm ``X`` (uvloop
    with fastloop against stock uvloop, the alternative a user would pick)."""
    pairs = [("stock", arm) for arm in runs if arm != "stock"]
    pairs += [(arm.split("+")[0], arm) for arm in runs if arm.split("+")[0] in runs]
    return [
        ab.paired(
            [r[key] for r in runs[base]],  # type: ignore[misc]
            [r[key] for r in runs[arm]],  # type: ignore[misc]
            name=label,
            a_label=base,
            b_label=arm,
        )
        for base, arm in pairs
        if base != arm
        for key, label in measures
    ]


def _progress(done: int, total: int) -> None:
    print(f"round {done}/{total}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=SCENARIOS, default="idle")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument(
        "--seconds",
        type=float,
        help="run rounds until this much time passed (then --rounds is a cap)",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--arms",
        help="comma list of arm names: the scenario's (default: all of them) "
        f"and {', '.join(EXTRA)}; stock is always first",
    )
    args = parser.parse_args(argv)
    try:
        import distributed  # noqa: F401
    except ImportError:
        print(
            "bench/dask_app.py needs distributed: pip install distributed",
            file=sys.stderr,
        )
        return 2
    script, cluster, measures = SCENARIOS[args.scenario]
    known = {**ARMS[args.scenario], **EXTRA}
    chosen = args.arms.split(",") if args.arms else list(ARMS[args.scenario])
    unknown = [arm for arm in chosen if arm not in known]
    if unknown:
        parser.error(f"unknown arms {unknown}: choose from {list(known)}")
    arms = ["stock", *(arm for arm in chosen if arm != "stock")]
    settings = {arm: known[arm] for arm in arms}
    runs = ab.interleave(
        {
            arm: functools.partial(one_run, script, value)
            for arm, value in settings.items()
        },
        rounds=args.rounds,
        budget_s=args.seconds,
        warmup=0,
        progress=_progress,
    )
    for arm, rows in runs.items():
        active = [row["worker_patches"] for row in rows]
        assert all(bool(a[0]) == ("FASTLOOP" in settings[arm]) for a in active), (
            arm,
            active,
        )  # type: ignore[index]
    results = paired_results(runs, measures)
    for result in results:
        print(result)
    if args.json:
        _results.save(
            args.json,
            "dask_app",
            scenario=args.scenario,
            distributed=__import__("distributed").__version__,
            cluster=cluster,
            worker_patches={arm: runs[arm][0]["worker_patches"] for arm in arms},
            engagements={arm: sum(r["engagements"] for r in runs[arm]) for arm in arms},
            runs=runs,
            results=[r.to_dict() for r in results],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
