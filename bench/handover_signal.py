"""What a shorter switch interval costs compute threads, and what their CPU clocks say of it.

    python bench/handover_signal.py [--threads 2,4] [--machines two-cores,one-core]
                                    (or any of bench/auto_machines.py's machines)
                                    [--rounds N] [--window S] [--json PATH]

T threads count in pure Python; every interval of auto mode's ladder and
CPython's 5 ms is held for a window in turn (rounds alternate the order),
and each window records the threads' progress (counts a second) and their
CPU time a second (``time.pthread_getcpuclockid``).  Both are stated as
the loss against 5 ms, the median over rounds.  The question: can the
threads' CPU clocks, which auto mode reads every tick, tell what a
shorter interval costs where it runs?  ``one-core`` runs the process on
CPU 0 (``taskset``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import _results
from auto_machines import machine

INTERVALS_US = (50, 100, 200, 500, 1000, 2000, 5000)

PROGRAM = r"""
import json, sys, threading, time
threads_n, rounds, window = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
intervals = [int(i) for i in sys.argv[4].split(",")]
counts = [0] * threads_n
stop = False

def count(i):
    n = 0
    while not stop:
        n += 1
        if n & 1023 == 0:
            counts[i] = n

threads = [threading.Thread(target=count, args=(i,)) for i in range(threads_n)]
for thread in threads:
    thread.start()
time.sleep(0.2)
clocks = [time.pthread_getcpuclockid(t.ident) for t in threads]
windows = {i: [] for i in intervals}
for r in range(rounds):
    for interval in intervals if r % 2 == 0 else intervals[::-1]:
        sys.setswitchinterval(interval / 1e6)
        time.sleep(0.05)  # the threads settle at the new interval
        cpu0 = sum(time.clock_gettime(c) for c in clocks)
        done0, wall0 = sum(counts), time.perf_counter()
        time.sleep(window)
        cpu1 = sum(time.clock_gettime(c) for c in clocks)
        done1, wall1 = sum(counts), time.perf_counter()
        wall = wall1 - wall0
        windows[interval].append({"progress": (done1 - done0) / wall,
                                  "cpu": (cpu1 - cpu0) / wall})
stop = True
for thread in threads:
    thread.join()
print(json.dumps(windows))
"""


def losses(windows: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per interval: progress and CPU time against 5 ms's, paired by round."""
    base = windows["5000"]
    return {
        interval: {
            "progress_loss": statistics.median(
                1 - w["progress"] / b["progress"]
                for w, b in zip(mine, base, strict=True)
            ),
            "cpu_change": statistics.median(
                w["cpu"] / b["cpu"] - 1 for w, b in zip(mine, base, strict=True)
            ),
            "cpu_per_s": statistics.median(w["cpu"] for w in mine),
        }
        for interval, mine in windows.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="2,4")
    parser.add_argument("--machines", default="two-cores,one-core")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--window", type=float, default=0.3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results: list[dict[str, Any]] = []
    for name in args.machines.split(","):
        for threads in map(int, args.threads.split(",")):
            with machine(name) as prefix:
                out = subprocess.run(
                    [*prefix, sys.executable, "-c", PROGRAM, str(threads),
                     str(args.rounds), str(args.window),
                     ",".join(map(str, INTERVALS_US))],
                    capture_output=True, text=True, check=True, timeout=600,
                ).stdout  # fmt: skip
            windows = json.loads(out)
            found = losses(windows)
            results.append(
                {"machine": name, "threads": threads, "losses": found,
                 "windows": windows}
            )  # fmt: skip
            print(f"{name}, {threads} threads:")
            for interval, row in found.items():
                print(
                    f"  {int(interval):5d} us: progress lost {row['progress_loss']:+.3f}"
                    f", CPU time {row['cpu_change']:+.3f} ({row['cpu_per_s']:.2f} CPU)"
                )
    if args.json:
        _results.save(
            args.json,
            "handover_signal",
            rounds=args.rounds,
            window_s=args.window,
            results=results,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
