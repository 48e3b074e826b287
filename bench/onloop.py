"""A/B of on-loop IOLoop.add_callback: stock vs fastloop, and vs bare call_soon.

    python bench/onloop.py [--rounds N] [--json bench/results/onloop.json]

Workloads (N callbacks per round, timed from the first schedule to the last run):
  burst      N add_callback calls from one callback, then the loop runs them all
  chain      each callback adds the next (one loop iteration per callback)
  mixed      add_callback alternating with asyncio call_soon (worst case for batching)
  spawn      IOLoop.spawn_callback burst (goes through add_callback)
The limit row pairs bare asyncio ``loop.call_soon`` (A) with patched add_callback (B).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import tornado
from tornado.ioloop import IOLoop

import fastloop
from fastloop import ab

N = 50_000


def _timed(
    schedule: Callable[[IOLoop, asyncio.AbstractEventLoop, Callable[[], None]], None],
    n: int = N,
) -> float:
    """Run one round on a fresh loop; seconds from first schedule to last callback."""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        io = IOLoop.current()
        done = loop.create_future()
        remaining = [n]

        def tick() -> None:
            remaining[0] -= 1
            if remaining[0] == 0:
                done.set_result(None)

        start = time.perf_counter()
        schedule(io, loop, tick)
        await done
        return time.perf_counter() - start

    return asyncio.run(main())


def burst(io, loop, tick):
    add = io.add_callback
    for _ in range(N):
        add(tick)


def chain(io, loop, tick):
    left = [N]

    def step():
        tick()
        left[0] -= 1
        if left[0]:
            io.add_callback(step)

    io.add_callback(step)


def mixed(io, loop, tick):
    for _ in range(N // 2):
        io.add_callback(tick)
        loop.call_soon(tick)


def spawn(io, loop, tick):
    for _ in range(N):
        io.spawn_callback(tick)


def bare_call_soon(io, loop, tick):
    call_soon = loop.call_soon
    for _ in range(N):
        call_soon(tick)


def _line(result: ab.Result) -> str:
    a_ns, b_ns = result.a_median / N * 1e9, result.b_median / N * 1e9
    return f"{result}   ({a_ns:,.0f} -> {b_ns:,.0f} ns per callback)"


WORKLOADS = {"burst": burst, "chain": chain, "mixed": mixed, "spawn": spawn}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)

    results = []
    for name, schedule in WORKLOADS.items():
        result = ab.patched_vs_stock(
            lambda s=schedule: _timed(s),
            ["add_callback"],
            rounds=args.rounds,
            name=name,
        )
        print(_line(result), flush=True)
        results.append(result)

    def bare() -> float:
        with ab.stock():
            return _timed(bare_call_soon)

    def patched_burst() -> float:
        with fastloop.patched(["add_callback"]):
            return _timed(burst)

    limit = ab.compare(
        bare,
        patched_burst,
        rounds=args.rounds,
        name="burst vs limit",
        a_label="bare call_soon",
        b_label="patched",
    )
    print(_line(limit), flush=True)
    results.append(limit)

    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "benchmark": "onloop",
                    "callbacks_per_round": N,
                    "python": platform.python_version(),
                    "tornado": tornado.version,
                    "fastloop": fastloop.__version__,
                    "machine": {
                        "system": platform.system(),
                        "machine": platform.machine(),
                        "processor": platform.processor(),
                        "cpus": __import__("os").cpu_count(),
                    },
                    "results": [r.to_dict() for r in results],
                },
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
