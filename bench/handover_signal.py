"""What a shorter switch interval costs compute threads, and what a process can read of it.

    python bench/handover_signal.py [--threads 2,4,8]
                                    [--machines two-cores,one-core,busy-machine,quota]
                                    (any of bench/_machines.py's machines;
                                    one named twice runs twice)
                                    [--rounds N] [--window S] [--json PATH]

T threads count in pure Python; every interval of auto mode's ladder and
CPython's 5 ms is held for a window in turn (rounds alternate the order),
and each window records the threads' progress (counts a second) beside
every signal of it a process can read about its own threads without
help from them:

* their CPU time (``time.pthread_getcpuclockid``, what auto reads);
* its user and system parts (``/proc/self/task/<tid>/stat``, in ticks);
* their time runnable but waiting for a CPU, and how often they were run
  (``/proc/self/task/<tid>/schedstat``);
* the instructions they retired in user mode (the CPU's counters through
  ``perf_event_open``), where the kernel and the machine offer them.

Each is stated as its change against 5 ms, the median over rounds.  The
question: which of them, read where auto runs, tells the progress lost?
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
from _machines import machine

INTERVALS_US = (50, 100, 200, 500, 1000, 2000, 5000)
#: The signals each window records, besides progress (per wall second).
SIGNALS = ("cpu", "user", "system", "run_delay", "runs", "instructions")

PROGRAM = r"""
import ctypes, json, os, platform, struct, sys, threading, time
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

def instruction_counter(tid):
    # perf_event_attr, first version: PERF_TYPE_HARDWARE, INSTRUCTIONS,
    # exclude_kernel | exclude_hv; syscall 298 is x86-64's perf_event_open
    attr = struct.pack("=IIQQQQQIIQ", 0, 64, 1, 0, 0, 0, (1 << 5) | (1 << 6), 0, 0, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    number = {"x86_64": 298, "aarch64": 241}.get(platform.machine(), -1)
    fd = libc.syscall(number, ctypes.create_string_buffer(attr, 64), tid, -1, -1, 8)
    if fd < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return fd

threads = [threading.Thread(target=count, args=(i,), daemon=True)
           for i in range(threads_n)]
for thread in threads:
    thread.start()
time.sleep(0.2)
clocks = [time.pthread_getcpuclockid(t.ident) for t in threads]
tids = [t.native_id for t in threads]
try:
    counters, unavailable = [instruction_counter(tid) for tid in tids], None
except OSError as exc:
    counters, unavailable = [], f"perf_event_open: {exc.strerror}"

def read():
    values = {"cpu": sum(time.clock_gettime(c) for c in clocks),
              "user": 0.0, "system": 0.0, "run_delay": 0.0, "runs": 0}
    for tid in tids:
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        values["user"] += int(fields[11]) / os.sysconf("SC_CLK_TCK")
        values["system"] += int(fields[12]) / os.sysconf("SC_CLK_TCK")
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            _, waited, ran = f.read().split()
        values["run_delay"] += int(waited) / 1e9
        values["runs"] += int(ran)
    if counters:
        values["instructions"] = sum(
            struct.unpack("=Q", os.read(fd, 8))[0] for fd in counters)
    values["progress"] = sum(counts)
    values["wall"] = time.perf_counter()
    return values

windows = {i: [] for i in intervals}
for r in range(rounds):
    for interval in intervals if r % 2 == 0 else intervals[::-1]:
        sys.setswitchinterval(interval / 1e6)
        time.sleep(0.05)  # the threads settle at the new interval
        before = read()
        time.sleep(window)
        after = read()
        wall = after.pop("wall") - before.pop("wall")
        windows[interval].append(
            {name: (after[name] - before[name]) / wall for name in after})
stop = True
print(json.dumps({"windows": windows, "instructions": unavailable or "counted"}))
"""


def changes(windows: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per interval: progress lost, and each signal's change, against 5 ms's
    (paired by round; a signal 5 ms's window has none of is left out)."""
    base = windows["5000"]
    found: dict[str, dict[str, float]] = {}
    for interval, mine in windows.items():
        pairs = list(zip(mine, base, strict=True))
        row = {"progress_loss": statistics.median(1 - w["progress"] / b["progress"]
                                                  for w, b in pairs)}  # fmt: skip
        for signal in SIGNALS:
            if all(b.get(signal) for _, b in pairs):
                row[signal] = statistics.median(w[signal] / b[signal] - 1
                                                for w, b in pairs)  # fmt: skip
        found[interval] = row
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="2,4,8")
    parser.add_argument("--machines", default="two-cores,one-core,busy-machine,quota")
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
            ran = json.loads(out)
            found = changes(ran["windows"])
            results.append(
                {"machine": name, "threads": threads, "changes": found,
                 "instructions": ran["instructions"], "windows": ran["windows"]}
            )  # fmt: skip
            print(f"{name}, {threads} threads (instructions: {ran['instructions']}):")
            for interval, row in found.items():
                print(
                    f"  {int(interval):5d} us: progress lost {row['progress_loss']:+.3f}; "
                    + ", ".join(f"{k} {row[k]:+.3f}" for k in SIGNALS if k in row)
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
