"""An echo probe independent of ``fastloop bench``: does write_to_fd timing cost a small-message service?

    python bench/echo_socketpair.py [--rounds N] [--json bench/results/echo_socketpair.json]

Two IOStreams on one loop over a ``socket.socketpair()`` (no TCP, no
listener, none of the ``echo-64B`` workload's code): 3,000 round trips of
64 bytes with ``await stream.write(...)`` / ``read_bytes(...)``, stock
against only the ``write_to_fd`` patch, interleaved.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import time
from pathlib import Path

from tornado.iostream import IOStream

import _results
import fastloop
from fastloop import ab
from fastloop.patches.write_to_fd import SAMPLE_EVERY

TRIPS = 3000
SIZE = 64


def echo_round() -> float:
    async def main() -> float:
        left, right = socket.socketpair()
        a, b = IOStream(left), IOStream(right)
        message = b"e" * SIZE
        start = time.perf_counter()
        for _ in range(TRIPS):
            await a.write(message)
            await b.write(await b.read_bytes(SIZE))
            await a.read_bytes(SIZE)
        elapsed = time.perf_counter() - start
        a.close()
        b.close()
        return elapsed

    return asyncio.run(main())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results = []
    # The default (durations of 1 call in SAMPLE_EVERY) and what a user who
    # asks for every call's duration pays.
    for timing in ("sampled", "every"):
        fastloop.configure(write_timing=timing)
        try:
            result = ab.patched_vs_stock(
                echo_round,
                ["write_to_fd"],
                rounds=args.rounds,
                name=f"socketpair echo-64B, {timing}",
            )
        finally:
            fastloop.configure(write_timing="sampled")
        added = statistics.median(
            (b - a) / TRIPS * 1e9
            for a, b in zip(result.a_times, result.b_times, strict=True)
        )
        print(f"{result}   (+{added:.0f} ns per round trip, 2 writes)", flush=True)
        results.append(
            result.to_dict()
            | {"per_round": TRIPS, "timing": timing, "added_ns_per_round_trip": added}
        )
    if args.json:
        _results.save(
            args.json, "echo_socketpair", sample_every=SAMPLE_EVERY, results=results
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
