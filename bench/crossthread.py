"""A/B of cross-thread wake-ups: stock vs fastloop, and vs uvloop.

    python bench/crossthread.py [--rounds N] [--json bench/results/crossthread.json]

Workloads (timed from releasing the producers to the last callback run):
  burst-2, burst-8  2 or 8 threads each call IOLoop.add_callback N/k times
  threadsafe-2      2 threads call loop.call_soon_threadsafe (wakeup patch alone)
  executor          run_in_executor storm of no-op functions, all awaited
  ping-pong         one thread adds a callback, waits for it to run; M times
Against uvloop: stock uvloop (A) vs asyncio + fastloop (B) on burst-2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import tornado
from tornado.ioloop import IOLoop

import fastloop
from fastloop import ab

N = 40_000
PINGS = 2_000
EXECUTOR_CALLS = 4_000


def burst(producers: int, use_ioloop: bool = True) -> Callable[[], float]:
    def one_round() -> float:
        async def main() -> float:
            loop = asyncio.get_running_loop()
            io = IOLoop.current()
            done = loop.create_future()
            remaining = [N]

            def tick() -> None:
                remaining[0] -= 1
                if remaining[0] == 0:
                    done.set_result(None)

            go = threading.Event()
            add = io.add_callback if use_ioloop else loop.call_soon_threadsafe

            def produce() -> None:
                go.wait()
                for _ in range(N // producers):
                    add(tick)

            threads = [threading.Thread(target=produce) for _ in range(producers)]
            for thread in threads:
                thread.start()
            start = time.perf_counter()
            go.set()
            await done
            elapsed = time.perf_counter() - start
            for thread in threads:
                thread.join()
            return elapsed

        return run(main)

    return one_round


def executor_storm() -> float:
    def noop() -> None:
        return None

    async def main() -> float:
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        await asyncio.gather(
            *(loop.run_in_executor(None, noop) for _ in range(EXECUTOR_CALLS))
        )
        return time.perf_counter() - start

    return run(main)


def ping_pong() -> float:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        io = IOLoop.current()
        done = loop.create_future()
        pong = threading.Event()

        def producer() -> None:
            for _ in range(PINGS):
                pong.clear()
                io.add_callback(pong.set)
                pong.wait()
            loop.call_soon_threadsafe(done.set_result, None)

        thread = threading.Thread(target=producer)
        start = time.perf_counter()
        thread.start()
        await done
        elapsed = time.perf_counter() - start
        thread.join()
        return elapsed

    return run(main)


_runner: list[Callable[..., float]] = [asyncio.run]


def run(main: Callable[[], object]) -> float:
    return _runner[0](main())  # type: ignore[arg-type]


WORKLOADS: dict[str, tuple[Callable[[], float], int]] = {
    "burst-2": (burst(2), N),
    "burst-8": (burst(8), N),
    "threadsafe-2": (burst(2, use_ioloop=False), N),
    "executor": (executor_storm, EXECUTOR_CALLS),
    "ping-pong": (ping_pong, PINGS),
}


def _line(result: ab.Result, per: int) -> str:
    a_ns, b_ns = result.a_median / per * 1e9, result.b_median / per * 1e9
    return f"{result}   ({a_ns:,.0f} -> {b_ns:,.0f} ns per callback)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--only", help="comma list of workloads")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    chosen = args.only.split(",") if args.only else list(WORKLOADS)

    results = []
    for name in chosen:
        workload, per = WORKLOADS[name]
        result = ab.patched_vs_stock(
            workload, ["add_callback", "wakeup"], rounds=args.rounds, name=name
        )
        result_dict = result.to_dict() | {"per_round": per}
        print(_line(result, per), flush=True)
        results.append(result_dict)

    try:
        import uvloop
    except ImportError:
        print("uvloop not installed: no comparison against it", file=sys.stderr)
    else:
        workload, per = WORKLOADS["burst-2"]

        def stock_uvloop() -> float:
            _runner[0] = uvloop.run
            try:
                with ab.stock():
                    return workload()
            finally:
                _runner[0] = asyncio.run

        def patched_asyncio() -> float:
            with fastloop.patched(["add_callback", "wakeup"]):
                return workload()

        result = ab.compare(
            stock_uvloop,
            patched_asyncio,
            rounds=args.rounds,
            name="burst-2 vs uvloop",
            a_label="stock uvloop",
            b_label="patched",
        )
        print(_line(result, per), flush=True)
        results.append(result.to_dict() | {"per_round": per})

    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "benchmark": "crossthread",
                    "python": platform.python_version(),
                    "tornado": tornado.version,
                    "fastloop": fastloop.__version__,
                    "results": results,
                },
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
