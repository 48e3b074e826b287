"""What an idle dask cluster burns: CPU and wake-ups of a scheduler, a nanny and a worker.

    python bench/dask_idle.py [--rounds N] [--settle S] [--window S] [--json PATH]

Needs distributed.  Per arm and round, a ``dask scheduler`` and a ``dask
worker`` (one thread, with its nanny) start from the command line as a
deployment would, with no dashboard and nothing submitted; after
``--settle`` seconds each process's CPU time (user and system, from
``/proc/PID/stat``) and its voluntary context switches summed over its
threads (``/proc/PID/task/*/status``: a thread that sleeps and wakes
switches once) are read, and again ``--window`` seconds later.  Arms, in
balanced orders (``ab.interleave``): stock, ``FASTLOOP=1``, ``FASTLOOP=1``
with ``--preload fastloop.dask`` on the scheduler and the worker, and the
configuration floor (``FLOOR``: dask's own monitoring turned down, at the
price of its loop-health warnings, profiles, memory protection and
dashboard series).  Reported per process and for the three together: CPU
as a percentage of one core and wake-ups a second, medians over rounds,
and each arm's trio against stock's as the median of paired ratios; and,
per process, the wake-ups of fastloop's own threads, thread by thread
(``_idle_counts``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _results
from _arms import without_fastloop
from _idle_counts import ours_median, per_process, reading
from fastloop import ab

PROCESSES = ("scheduler", "nanny", "worker")
#: dask's own monitoring turned down: the idle floor the configuration buys.
FLOOR = {
    "DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL": "1000ms",
    "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
    "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL": "5s",
    "DASK_DISTRIBUTED__WORKER__MEMORY__MONITOR_INTERVAL": "1s",
}
#: arm -> (environment added to stock's, preload fastloop.dask)
ARMS: dict[str, tuple[dict[str, str], bool]] = {
    "stock": ({}, False),
    "FASTLOOP=1": ({"FASTLOOP": "1"}, False),
    "FASTLOOP=1 + preload": ({"FASTLOOP": "1"}, True),
    "configuration floor": (FLOOR, False),
    # The frontier's last point: what the configuration buys, with fastloop.
    "configuration floor + FASTLOOP=1": ({**FLOOR, "FASTLOOP": "1"}, False),
}
#: dask's command line, as this interpreter's environment installed it.
DASK = str(Path(sys.executable).with_name("dask"))


def workers_of(nanny: int) -> list[int]:
    """The nanny's worker processes (not multiprocessing's resource tracker)."""
    found = []
    for task in Path(f"/proc/{nanny}/task").iterdir():
        for child in map(int, (task / "children").read_text().split()):
            command = Path(f"/proc/{child}/cmdline").read_bytes()
            if b"resource_tracker" not in command:
                found.append(child)
    return found


def one_run(arm: str, settle: float, window: float) -> dict[str, Any]:
    extra, preload = ARMS[arm]
    env = {**without_fastloop(dict(os.environ)), **extra}
    loading = ["--preload", "fastloop.dask"] if preload else []
    with tempfile.TemporaryDirectory() as scratch:
        address_file = Path(scratch) / "scheduler.json"
        started = []
        try:
            scheduler = subprocess.Popen(
                [
                    DASK,
                    "scheduler",
                    "--scheduler-file",
                    str(address_file),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--no-dashboard",
                    *loading,
                ],
                env=env,
                stderr=subprocess.DEVNULL,
            )
            started.append(scheduler)
            deadline = time.monotonic() + 60
            while not address_file.exists():
                if time.monotonic() > deadline or scheduler.poll() is not None:
                    raise RuntimeError(f"{arm}: the scheduler did not start")
                time.sleep(0.1)
            nanny = subprocess.Popen(
                [
                    DASK,
                    "worker",
                    "--scheduler-file",
                    str(address_file),
                    "--nthreads",
                    "1",
                    "--no-dashboard",
                    *loading,
                ],
                env=env,
                stderr=subprocess.DEVNULL,
            )
            started.append(nanny)
            time.sleep(settle)
            workers = workers_of(nanny.pid)
            if len(workers) != 1:
                raise RuntimeError(f"{arm}: the nanny has {len(workers)} workers")
            pids = {
                "scheduler": scheduler.pid,
                "nanny": nanny.pid,
                "worker": workers[0],
            }
            before = reading(pids)
            time.sleep(window)
            after = reading(pids)
        finally:
            for process in reversed(started):
                process.terminate()
            for process in reversed(started):
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
    return {name: per_process(before[name], after[name], window) for name in PROCESSES}


def trio(run: dict[str, Any], measure: str) -> float:
    return float(sum(run[name][measure] for name in PROCESSES))


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    rows = {}
    for arm, mine in runs.items():
        row: dict[str, Any] = {
            name: {
                measure: statistics.median(r[name][measure] for r in mine)
                for measure in ("cpu_percent", "wakeups_per_s")
            }
            for name in PROCESSES
        }
        for name in PROCESSES:
            row[name]["fastloop_wakeups_per_s"] = ours_median(
                [r[name]["fastloop_wakeups_per_s"] for r in mine]
            )
        for measure in ("cpu_percent", "wakeups_per_s"):
            row[f"trio_{measure}"] = statistics.median(trio(r, measure) for r in mine)
            row[f"trio_{measure}_vs_stock"] = ab.paired(
                [trio(r, measure) for r in runs["stock"]],
                [trio(r, measure) for r in mine],
                name=f"{arm} {measure}",
                b_label=arm,
            ).to_dict()
        rows[arm] = row
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--settle", type=float, default=8.0)
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    try:
        import distributed
    except ImportError:
        print("bench/dask_idle.py needs distributed", file=sys.stderr)
        return 2
    chosen = args.arms.split(",")
    each = args.settle + args.window + 5
    print(
        f"{len(chosen)} arms x {args.rounds} rounds, about {each:.0f} s a run: "
        f"{len(chosen) * args.rounds * each / 60:.0f} min",
        file=sys.stderr,
        flush=True,
    )
    runs = ab.interleave(
        {arm: lambda arm=arm: one_run(arm, args.settle, args.window) for arm in chosen},
        rounds=args.rounds,
        warmup=0,
    )
    rows = summarize(runs)
    for arm, row in rows.items():
        cells = "  ".join(
            f"{name} {row[name]['cpu_percent']:.2f}% / {row[name]['wakeups_per_s']:.0f}"
            for name in PROCESSES
        )
        cpu = row["trio_cpu_percent_vs_stock"]
        woken = row["trio_wakeups_per_s_vs_stock"]
        ours = "; ".join(
            f"{name} {thread} {rate:.1f}"
            for name in PROCESSES
            for thread, rate in row[name]["fastloop_wakeups_per_s"].items()
        )
        print(
            f"{arm:>22}: {cells}  trio {row['trio_cpu_percent']:.2f}% / "
            f"{row['trio_wakeups_per_s']:.0f} a second; vs stock: CPU "
            f"{cpu['ratio']:.2f} [{cpu['low']:.2f}, {cpu['high']:.2f}], wake-ups "
            f"{woken['ratio']:.2f} [{woken['low']:.2f}, {woken['high']:.2f}]; "
            f"fastloop's threads a second: {ours or 'none'}"
        )
    if args.json:
        _results.save(
            args.json,
            "dask_idle",
            distributed=distributed.__version__,
            rounds=args.rounds,
            settle_s=args.settle,
            window_s=args.window,
            floor=FLOOR,
            rows=rows,
            runs=runs,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
