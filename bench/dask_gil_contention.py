"""dask's GIL contention metric: gilknocker's 1 kHz probe against fastloop's ticks.

    python bench/dask_gil_contention.py [--threads 0,1,2,4] [--rounds N]
                                        [--seconds S] [--json PATH] [--plot PATH]

Needs distributed and gilknocker (``pip install gilknocker``).  The worker
of ``bench/gil_dask.py``: T task threads counting in pure Python, and 1 ms
actor calls (1 ms of the actor thread's CPU) at ``20 / T`` a second.
Four arms, a fresh cluster for each arm of each round:

* ``stock``: no fastloop, gilknocker hidden (dask has no GIL metric);
* ``gilknocker``: no fastloop; dask runs gilknocker's probe every 1 ms;
* ``FASTLOOP=1``: the preload gives dask's monitor fastloop's figure
  (``fastloop.dask.gil``), gilknocker hidden;
* ``FASTLOOP=1+gilknocker``: both; gilknocker feeds dask's monitor and
  fastloop's figure is read beside it at every monitor update, for the
  agreement (correlation and mean difference, per T).

Measured: the calls' p50 and the task threads' compute rate, paired per
round against stock, and gilknocker's cost beside fastloop
(``FASTLOOP=1+gilknocker`` against ``FASTLOOP=1``).  A run whose process
ends abnormally after printing its figures keeps them, with its exit
status (a native thread can abort a process at exit).  Hiding gilknocker is a
module of that name that raises ImportError, first on ``sys.path``: the
spawned worker processes start from the client's ``sys.path``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import _results
from _arms import without_fastloop
from _pinning import PIN_THREADS
from fastloop import ab
from gil_dask import WORKLOAD, default_rate

SCRIPT = (
    PIN_THREADS
    + r"""
import json, sys, time
hidden, preload = sys.argv[4], sys.argv[5] == "1"
if hidden:
    sys.path.insert(0, hidden)
from distributed import Client, LocalCluster
"""
    + WORKLOAD
    + r"""
def shadow(dask_worker):
    # fastloop's figure beside gilknocker's, read whenever dask's monitor reads
    # gilknocker's (its update's periodic callback holds the bound method)
    monitor = dask_worker.monitor
    dask_worker.fastloop_pairs = pairs = []
    source = type(monitor._gilknocker).__name__ if monitor.monitor_gil_contention else None
    if "fastloop" not in sys.modules or source != "KnockKnock":
        return source
    from fastloop.dask.gil import TickContention

    class Both:
        def __init__(self, knock):
            self.knock, self.ticks = knock, TickContention(0.001)
        @property
        def contention_metric(self):
            knock = self.knock.contention_metric
            pairs.append((knock, self.ticks.contention_metric))
            return knock
        def reset_contention_metric(self):
            self.knock.reset_contention_metric()
            self.ticks.reset_contention_metric()
        def stop(self):
            self.knock.stop()

    monitor._gilknocker = Both(monitor._gilknocker)
    return source

def pairs(dask_worker):
    return dask_worker.fastloop_pairs

if __name__ == "__main__":
    threads, rate, seconds = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    with LocalCluster(n_workers=1, threads_per_worker=max(threads, 1), processes=True,
                      dashboard_address=None,
                      preload=["fastloop.dask"] if preload else []) as cluster, \
            Client(cluster) as client:
        actor = client.submit(Counter, actor=True).result()
        pin_threads({1})  # the load generator; the worker keeps every core
        for _ in range(5):
            actor.work().result()
        [source] = client.run(shadow).values()
        measured = calls_beside_tasks(client, actor, threads, rate, seconds)
        [shown] = client.run(pairs).values()
        print(json.dumps({**measured, "source": source, "pairs": shown}))
"""
)

#: Arm -> (gilknocker visible, fastloop preloaded and in the environment).
ARMS = {
    "stock": (False, False),
    "gilknocker": (True, False),
    "FASTLOOP=1": (False, True),
    "FASTLOOP=1+gilknocker": (True, True),
}
#: What feeds dask's monitor in each arm (checked every run).
SOURCES = {
    "stock": None,
    "gilknocker": "KnockKnock",
    "FASTLOOP=1": "TickContention",
    "FASTLOOP=1+gilknocker": "KnockKnock",
}


def one_run(
    arm: str, hidden: str, threads: int, rate: float, seconds: float
) -> dict[str, Any]:
    visible, fastloop = ARMS[arm]
    env = without_fastloop(dict(os.environ))
    if fastloop:
        env["FASTLOOP"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(threads), str(rate), str(seconds),
         "" if visible else hidden, "1" if fastloop else "0"],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:  # it failed before measuring
        raise subprocess.CalledProcessError(
            done.returncode, arm, done.stdout, done.stderr
        )
    run: dict[str, Any] = json.loads(lines[-1])
    run["exit_status"] = done.returncode  # see the module's docstring
    assert run["source"] == SOURCES[arm], (arm, run["source"])
    return run


def agreement(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """gilknocker's against fastloop's figure, per monitor update, all rounds."""
    pairs = [
        (knock, mine)
        for run in runs
        for knock, mine in run["pairs"][1:]  # the first spans the start-up
        if knock is not None
    ]
    knocks, mine = [p[0] for p in pairs], [p[1] for p in pairs]
    spread = len(set(knocks)) > 1 and len(set(mine)) > 1
    return {
        "updates": len(pairs),
        "gilknocker_mean": statistics.fmean(knocks),
        "fastloop_mean": statistics.fmean(mine),
        "mean_difference": statistics.fmean(m - k for k, m in pairs),
        "correlation": statistics.correlation(knocks, mine) if spread else None,
        "pairs": pairs,
    }


def summarize(runs: dict[str, list[dict[str, Any]]], threads: int) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for arm, mine in runs.items():
        row: dict[str, Any] = {
            key: statistics.median(r[key] for r in mine)
            for key in ("p50_s", "calls", "compute_per_s")
        }
        keys = ("p50_s", "compute_per_s") if threads else ("p50_s",)
        for against in ("stock", "FASTLOOP=1"):
            if against == arm or (
                against == "FASTLOOP=1" and arm != "FASTLOOP=1+gilknocker"
            ):
                continue
            for key in keys:
                row[f"{key}_vs_{against}"] = ab.paired(
                    [r[key] for r in runs[against]],
                    [r[key] for r in mine],
                    name=f"{arm} {key}",
                    b_label=arm,
                ).to_dict()
        rows[arm] = row
    return {"rows": rows, "agreement": agreement(runs["FASTLOOP=1+gilknocker"])}


def _ratio(row: dict[str, Any], key: str) -> str:
    if key not in row:
        return "-"
    return f"{row[key]['ratio']:.3f} [{row[key]['low']:.3f}, {row[key]['high']:.3f}]"


def plot(path: Path, scenarios: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(5.2, 5.0))
    for scenario in scenarios:
        pairs = scenario["agreement"]["pairs"]
        axis.plot(
            [p[0] for p in pairs], [p[1] for p in pairs], "o", markersize=4,
            alpha=0.6, label=f"{scenario['threads']} task thread"
            + ("" if scenario["threads"] == 1 else "s"),
        )  # fmt: skip
    axis.plot([0, 1], [0, 1], "-", color="grey", linewidth=0.8)
    axis.set_xlabel("gilknocker (dask's 1 ms probe)")
    axis.set_ylabel("fastloop (auto mode's ticks)")
    axis.set_title("GIL contention per dask monitor update")
    axis.set_xlim(-0.02, 1)
    axis.set_ylim(-0.02, 1)
    axis.legend(loc="upper left")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="0,1,2,4")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args(argv)
    try:
        import distributed
        import gilknocker  # noqa: F401
    except ImportError as exc:
        print(f"bench/dask_gil_contention.py needs {exc.name}", file=sys.stderr)
        return 2
    scenarios = []
    with tempfile.TemporaryDirectory() as hidden:
        Path(hidden, "gilknocker.py").write_text("raise ImportError('hidden')\n")
        for threads in map(int, args.threads.split(",")):
            rate = default_rate(threads)
            print(f"{threads} task threads: {len(ARMS)} arms x {args.rounds} rounds",
                  file=sys.stderr, flush=True)  # fmt: skip
            runs = ab.interleave(
                {
                    arm: functools.partial(
                        one_run, arm, hidden, threads, rate, args.seconds
                    )
                    for arm in ARMS
                },
                rounds=args.rounds,
                warmup=0,
                progress=lambda done, total: print(
                    f"  round {done}/{total}", file=sys.stderr, flush=True
                ),
            )
            summary = summarize(runs, threads)
            scenarios.append(
                {"threads": threads, "rate": rate, **summary, "runs": runs}
            )
            agreed = summary["agreement"]
            correlation = agreed["correlation"]
            print(
                f"{threads} task threads, {rate:g} actor calls/s: agreement over "
                f"{agreed['updates']} monitor updates: gilknocker mean "
                f"{agreed['gilknocker_mean']:.3f}, fastloop mean "
                f"{agreed['fastloop_mean']:.3f}, difference "
                f"{agreed['mean_difference']:+.3f}, correlation "
                + ("-" if correlation is None else f"{correlation:.2f}")
            )
            for arm, row in summary["rows"].items():
                print(
                    f"  {arm:>22}: p50 {row['p50_s'] * 1e3:6.2f} ms "
                    f"{_ratio(row, 'p50_s_vs_stock')}  compute "
                    f"{_ratio(row, 'compute_per_s_vs_stock')}"
                    + (
                        f"  against FASTLOOP=1: p50 {_ratio(row, 'p50_s_vs_FASTLOOP=1')}"
                        f" compute {_ratio(row, 'compute_per_s_vs_FASTLOOP=1')}"
                        if "p50_s_vs_FASTLOOP=1" in row
                        else ""
                    )
                )
    if args.json:
        _results.save(
            args.json,
            "dask_gil_contention",
            distributed=distributed.__version__,
            seconds=args.seconds,
            rounds=args.rounds,
            arms={
                arm: {"gilknocker": v, "fastloop": f} for arm, (v, f) in ARMS.items()
            },
            scenarios=scenarios,
        )
    if args.plot:
        plot(args.plot, scenarios)
    return 0


if __name__ == "__main__":
    sys.exit(main())
