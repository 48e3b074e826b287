"""Whole application: a dask LocalCluster with worker processes, with and without FASTLOOP.

    python bench/dask_app.py [--rounds N] [--json bench/results/dask.json]

Needs distributed (pip install 'tornado-fastloop[bench]' distributed).  Each round
runs the whole cluster twice as fresh subprocesses, once with FASTLOOP unset
and once with FASTLOOP=1 (the order alternates); the scheduler and the
nanny-spawned worker processes pick fastloop up from the environment, not
from code.  Measured: actor round-trip latency, wall time of 2,000 tiny
tasks, and the CPU seconds the scheduler and worker processes spend per
1,000 actor calls: loop overhead is the seed's real metric, so CPU, not
only latency.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import _results
from fastloop import ab

ARM = r"""
import json, time
from distributed import Client, LocalCluster

class Counter:
    n = 0
    def incr(self):
        self.n += 1
        return self.n

def inc(x):
    return x + 1

def cpu():
    return time.process_time()

def patched():
    import sys
    fastloop = sys.modules.get("fastloop")
    return sorted(fastloop.installed()) if fastloop else []

if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        actor = client.submit(Counter, actor=True).result()
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
        start = time.perf_counter()
        client.gather(client.map(inc, range(2000), pure=False))
        tasks_s = time.perf_counter() - start
        print(json.dumps({"actor_ms": actor_s, "tasks_s": tasks_s, "cpu_s_per_1k": cpu_s,
                          "worker_patches": sorted(set(map(tuple, client.run(patched).values())))}))
"""


def one_run(patched: bool) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
    if patched:
        env["FASTLOOP"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", ARM],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    try:
        import distributed  # noqa: F401
    except ImportError:
        print(
            "bench/dask_app.py needs distributed: pip install distributed",
            file=sys.stderr,
        )
        return 2
    runs: dict[bool, list[dict[str, object]]] = {False: [], True: []}
    for index in range(args.rounds):
        for patched in (False, True) if index % 2 == 0 else (True, False):
            runs[patched].append(one_run(patched))
        print(f"round {index + 1}/{args.rounds}", file=sys.stderr, flush=True)
    stock, fast = runs[False], runs[True]
    assert all(r["worker_patches"] == [[]] for r in stock), stock
    assert all(
        r["worker_patches"] == [["add_callback", "wakeup", "write_to_fd"]] for r in fast
    ), fast
    results = [
        ab.paired([r[key] for r in stock], [r[key] for r in fast], name=label)  # type: ignore[misc]
        for key, label in (
            ("actor_ms", "actor round trip"),
            ("tasks_s", "2,000 tiny tasks"),
            ("cpu_s_per_1k", "CPU per 1,000 actor calls"),
        )
    ]
    for result in results:
        print(result)
    if args.json:
        _results.save(
            args.json,
            "dask_app",
            distributed=__import__("distributed").__version__,
            cluster="LocalCluster(n_workers=2, threads_per_worker=1, processes=True)",
            runs={"stock": stock, "patched": fast},
            results=[r.to_dict() for r in results],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
