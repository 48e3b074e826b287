"""What watching costs: the watchdog at its default and the profiler at 10 ms, A/B.

    python bench/observe_overhead.py [--rounds N] [--json bench/results/observe_overhead.json]

Four arms per round, interleaved with rotating order: nothing; nothing but
one other thread parked on an Event; a running ``fastloop.watch()`` (default
threshold, a heartbeat every 25 ms); a running ``fastloop.profile()`` (10 ms).
No patch is installed in any arm, so the ratios are the observers' own cost.
Workloads are the built-in on-loop chain and 64-byte IOStream echo, scaled
so that a round lasts about 0.4 s (~16 heartbeats, ~40 samples).

Why the parked thread: on Linux a process with a single thread skips the
atomic reference count on every file-descriptor lookup (``fdget``), so the
first extra thread of any kind makes each ``epoll_wait``/``send``/``recv``
dearer (measured here: epoll.poll(0) x1.14).  Every dask worker and most
Tornado servers already run other threads; the ratio against that arm is
the observer's own cost, the ratio against the bare arm includes the
first-thread effect.  Both are reported.

The echo workload's coroutine rarely gives the loop back (its reads finish
inline), so the watchdog rightly reports episodes there; the log is
silenced while measuring.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import _results
import fastloop
from fastloop import ab
from fastloop.cli import _workloads as workloads

SCALES = {"onloop-chain": 200_000, "echo-64B": 20_000}


def arms(name: str) -> dict[str, Callable[[], float]]:
    workload = workloads.WORKLOADS[name]
    count = workloads.Slice.count(SCALES[name])  # a fixed count, one batch

    def bare() -> float:
        return workload.run(asyncio.run, count).seconds

    def other_thread() -> float:
        parked = threading.Event()
        thread = threading.Thread(target=parked.wait, daemon=True)
        thread.start()
        try:
            return bare()
        finally:
            parked.set()
            thread.join()

    def watched() -> float:
        with fastloop.watch():
            return workload.run(asyncio.run, count).seconds

    def profiled() -> float:
        with fastloop.profile(interval_ms=10):
            return workload.run(asyncio.run, count).seconds

    return {
        "bare": bare,
        "other-thread": other_thread,
        "watchdog": watched,
        "profiler": profiled,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    fastloop.uninstall()
    logging.getLogger("fastloop").setLevel(logging.ERROR)
    results = []
    for name in SCALES:
        print(f"{name}: {args.rounds} rounds x 4 arms ...", file=sys.stderr, flush=True)
        times = ab.interleave(arms(name), rounds=args.rounds)
        for baseline in ("other-thread", "bare"):
            for arm in ("watchdog", "profiler", "other-thread"):
                if arm == baseline:
                    continue
                result = ab.paired(
                    times[baseline],
                    times[arm],
                    name=name,
                    a_label=baseline,
                    b_label=arm,
                )
                print(result, flush=True)
                results.append(
                    result.to_dict() | {"observer": arm, "baseline": baseline}
                )
    if args.json:
        _results.save(
            args.json,
            "observe_overhead",
            results=results,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
