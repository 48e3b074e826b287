"""Auto mode on machines it was not fitted to: this machine made into several.

    python bench/auto_machines.py [--machines one-core,two-cores,busy-machine,quota]
                                  [--threads 1,2,4,8] [--arms stock,auto,500 us,2000 us]
                                  [--rounds N] [--seconds S] [--json PATH]

Needs distributed.  The worker of ``bench/gil_dask.py`` (T task threads
counting in pure Python, 1 ms actor calls at ``20 / T`` a second), run as
if on other machines:

* ``one-core``: the whole process tree on CPU 0 (``taskset``);
* ``two-cores``: the machine as it is;
* ``busy-machine``: both cores, while another process spins on them;
* ``quota``: both cores, under a CPU quota of one CPU (a cgroup v1 ``cpu``
  group, as a container's limit; needs root and the ``cpu`` hierarchy).

Each machine and thread count is one interleaved run of the arms (fresh
clusters), paired per round against stock: the task threads' compute and
the calls' p50.  The question each answers: does auto keep compute at
>= 0.95 of stock (the default budget), and how does its p50 compare with
the best fixed interval that keeps the same budget?
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _results
from _arms import gil_arms
from fastloop import ab
from gil_dask import default_rate, one_run, summarize

MACHINES = ("one-core", "two-cores", "busy-machine", "quota")
#: The cgroup v1 group the ``quota`` machine runs in, and its quota.
CGROUP = Path("/sys/fs/cgroup/cpu/fastloop-bench")
QUOTA_CPUS = 1.0
BUDGET = 0.95


@contextlib.contextmanager
def machine(name: str) -> Iterator[list[str]]:
    """The command prefix that runs a program on ``name``, set up and torn down."""
    if name == "one-core":
        yield ["taskset", "-c", "0"]
    elif name == "two-cores":
        yield []
    elif name == "busy-machine":
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            yield []
        finally:
            spinner.kill()
            spinner.wait()
    elif name == "quota":
        CGROUP.mkdir(exist_ok=True)
        period = 100_000
        (CGROUP / "cpu.cfs_period_us").write_text(str(period))
        (CGROUP / "cpu.cfs_quota_us").write_text(str(int(period * QUOTA_CPUS)))
        try:
            # The shell joins the group, then becomes the program: its
            # children (the worker processes) inherit the group.
            join = f'echo $$ > {CGROUP / "cgroup.procs"} && exec "$@"'
            yield ["sh", "-c", join, "sh"]
        finally:
            for pid in (CGROUP / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), 9)
            with contextlib.suppress(OSError):
                CGROUP.rmdir()
    else:
        raise ValueError(f"unknown machine {name!r}; known: {', '.join(MACHINES)}")


def verdict(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Auto against the budget, and against the best fixed interval within it."""

    def compute(arm: str) -> dict[str, Any]:
        return rows[arm].get("compute_per_s_vs_stock") or {"ratio": 1.0, "low": 1.0}

    within = [
        arm for arm in rows if arm.endswith(" us") and compute(arm)["ratio"] >= BUDGET
    ]
    best = min(within, key=lambda arm: rows[arm]["p50_s"], default=None)
    auto = rows.get("auto")
    return {
        "auto_compute": compute("auto") if auto else None,
        "auto_holds_budget": bool(auto) and compute("auto")["ratio"] >= BUDGET,
        "best_fixed_within_budget": best,
        "auto_p50_vs_best_fixed": (
            auto["p50_s"] / rows[best]["p50_s"] if auto and best else None
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", default=",".join(MACHINES))
    parser.add_argument("--threads", default="1,2,4,8")
    parser.add_argument("--arms", default="stock,auto,500 us,2000 us")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    try:
        import distributed
    except ImportError:
        print("bench/auto_machines.py needs distributed", file=sys.stderr)
        return 2
    every = gil_arms(None)
    arms = {name: every[name] for name in args.arms.split(",")}
    results = []
    for name in args.machines.split(","):
        for threads in map(int, args.threads.split(",")):
            rate = default_rate(threads)
            print(f"{name}, {threads} task threads: {len(arms)} arms x "
                  f"{args.rounds} rounds", file=sys.stderr, flush=True)  # fmt: skip
            with machine(name) as prefix:
                runs = ab.interleave(
                    {
                        arm: functools.partial(
                            one_run, env, threads, rate, args.seconds, prefix
                        )
                        for arm, env in arms.items()
                    },
                    rounds=args.rounds,
                    warmup=0,
                )
            rows = summarize(runs, threads)
            judged = verdict(rows)
            if "auto" in runs:  # what auto held at the end of each run
                judged["auto_held_us"] = sorted(
                    r["switchinterval"]["interval_us"] for r in runs["auto"]
                )
            results.append(
                {"machine": name, "threads": threads, "rate": rate, "rows": rows,
                 "verdict": judged, "runs": runs}
            )  # fmt: skip
            auto = judged["auto_compute"]
            print(
                f"{name}, {threads} task threads: auto compute "
                + (f"{auto['ratio']:.3f} [{auto['low']:.3f}, {auto['high']:.3f}]"
                   if auto else "-")
                + f"; best fixed within budget {judged['best_fixed_within_budget']}"
                + (f", auto p50 {judged['auto_p50_vs_best_fixed']:.2f} of it"
                   if judged["auto_p50_vs_best_fixed"] else "")
                + f"; auto held {judged.get('auto_held_us')} us"
            )  # fmt: skip
            for arm, row in rows.items():
                compute = row.get("compute_per_s_vs_stock")
                print(
                    f"  {arm:>8}: p50 {row['p50_s'] * 1e3:7.2f} ms"
                    + (f"  compute {compute['ratio']:.3f} [{compute['low']:.3f}, "
                       f"{compute['high']:.3f}]" if compute else "")
                )  # fmt: skip
    if args.json:
        _results.save(
            args.json,
            "auto_machines",
            distributed=distributed.__version__,
            seconds=args.seconds,
            rounds=args.rounds,
            budget=BUDGET,
            arms=arms,
            results=results,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
