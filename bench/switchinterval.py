"""What a shorter switch interval buys the loop, and what it costs compute threads.

    python bench/switchinterval.py [--rounds N] [--seconds S] [--json PATH]

Each round runs, for each workload, every arm back to back in a rotating
order: CPython's 5 ms interval (stock), then the ``switchinterval`` patch at
each value of ``--intervals-us``; fastloop's default set is installed in
every arm, so only the interval differs.  During each arm, worker threads
do their work for ``--seconds`` while the main thread's asyncio loop sleeps
1 ms at a time and records how late each wake-up is (getting the GIL back
after the selector's wait is most of it).  Reported per workload and
interval, as medians of per-round ratios against stock with 95% intervals:
the compute threads' throughput (higher is better; the cost) and the
loop's p50 and p90 lateness (lower is better; the gain).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import _results
import fastloop
from fastloop import ab, config

BUFFER = bytes(1 << 20)


def python_work(stop: list[bool]) -> int:
    done = 0
    while not stop[0]:
        done += 1
    return done


def hashlib_work(stop: list[bool]) -> int:
    done = 0
    while not stop[0]:
        hashlib.sha256(BUFFER)  # releases the GIL for buffers > 2 KiB
        done += 1
    return done


def sleep_work(stop: list[bool]) -> int:
    done = 0
    while not stop[0]:
        time.sleep(0.0005)
        done += 1
    return done


WORKLOADS: dict[str, tuple[Callable[[list[bool]], int], int]] = {
    "1 thread, pure Python": (python_work, 1),
    "2 threads, pure Python": (python_work, 2),
    "4 threads, pure Python": (python_work, 4),
    "2 threads, hashlib (GIL released)": (hashlib_work, 2),
    "2 threads, time.sleep": (sleep_work, 2),
}


def one_run(
    work: Callable[[list[bool]], int], threads: int, seconds: float
) -> dict[str, float]:
    stop = [False]
    done: list[int] = []
    started = threading.Barrier(threads + 1)

    def worker() -> None:
        started.wait()
        done.append(work(stop))

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()

    async def loop_side() -> list[float]:
        late = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            late.append(time.perf_counter() - before - 0.001)
        return late

    started.wait()
    begin = time.perf_counter()
    late = asyncio.run(loop_side())
    stop[0] = True
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - begin
    deciles = statistics.quantiles(late, n=10)
    return {
        "throughput": sum(done) / elapsed,
        "late_p50_s": statistics.median(late),
        "late_p90_s": deciles[8],
    }


def arm(
    work: Callable[[list[bool]], int],
    threads: int,
    seconds: float,
    interval_us: float | None,
) -> Callable[[], dict[str, float]]:
    def run() -> dict[str, float]:
        if interval_us is None:
            with fastloop.patched():
                return one_run(work, threads, seconds)
        config.settings.switch_interval_us = interval_us
        with fastloop.patched(
            ["add_callback", "wakeup", "write_to_fd", "poll", "switchinterval"]
        ):
            assert abs(sys.getswitchinterval() - interval_us / 1e6) < 1e-9
            return one_run(work, threads, seconds)

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--intervals-us", default="1000,500,200")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    intervals = [float(v) for v in args.intervals_us.split(",")]
    rows = []
    for name, (work, threads) in WORKLOADS.items():
        arms: dict[str, Callable[[], dict[str, float]]] = {
            "stock": arm(work, threads, args.seconds, None)
        }
        for value in intervals:
            arms[f"{value:g} us"] = arm(work, threads, args.seconds, value)
        runs: dict[str, list[dict[str, float]]] = {label: [] for label in arms}
        labels = list(arms)
        for index in range(args.rounds):
            shift = index % len(labels)
            for label in labels[shift:] + labels[:shift]:
                runs[label].append(arms[label]())
        print(f"{name}: done", file=sys.stderr, flush=True)
        for value in intervals:
            label = f"{value:g} us"
            stock, fast = runs["stock"], runs[label]
            row = {
                "workload": name,
                "interval_us": value,
                # Work done, not time: a ratio above 1 is more throughput.
                "throughput": ab.paired(
                    [r["throughput"] for r in stock],
                    [r["throughput"] for r in fast],
                    name=f"{name}, {label}: throughput",
                    b_label=label,
                ).to_dict(),
                "late_p50": ab.paired(
                    [r["late_p50_s"] for r in stock],
                    [r["late_p50_s"] for r in fast],
                    name=f"{name}, {label}: loop lateness p50",
                    b_label=label,
                ).to_dict(),
                "late_p90": ab.paired(
                    [r["late_p90_s"] for r in stock],
                    [r["late_p90_s"] for r in fast],
                    name=f"{name}, {label}: loop lateness p90",
                    b_label=label,
                ).to_dict(),
                "stock_late_p90_ms": statistics.median(r["late_p90_s"] for r in stock)
                * 1e3,
                "late_p90_ms": statistics.median(r["late_p90_s"] for r in fast) * 1e3,
            }
            rows.append(row)
            print(
                f"{name:36} {label:>8}: throughput {row['throughput']['ratio']:.3f} "
                f"[{row['throughput']['low']:.3f}, {row['throughput']['high']:.3f}]  "
                f"loop lateness p90 {row['stock_late_p90_ms']:.2f} -> {row['late_p90_ms']:.2f} ms "
                f"({row['late_p90']['ratio']:.2f} [{row['late_p90']['low']:.2f}, {row['late_p90']['high']:.2f}])"
            )
    if args.json:
        _results.save(
            args.json,
            "switchinterval",
            rounds=args.rounds,
            seconds=args.seconds,
            rows=rows,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
