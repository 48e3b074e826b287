"""An echo probe independent of ``fastloop bench``: does write_to_fd timing cost a small-message service?

    python bench/echo_socketpair.py [--rounds N] [--json bench/results/echo_socketpair.json]

Two IOStreams on one loop over a ``socket.socketpair()`` (no TCP, no
listener, none of the ``echo-64B`` workload's code): 3,000 round trips of
64 bytes with ``await stream.write(...)`` / ``read_bytes(...)``, stock
against only the ``write_to_fd`` patch, interleaved: with no call timed
after a stream's first (the exact counting alone), as by default, and
timing every call.
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
from _write_arms import write_to_fd_arm
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


#: The arms beside stock: what the exact counting alone costs, the default
#: (durations of 1 call in SAMPLE_EVERY), and what a user who asks for
#: every call's duration pays.
TIMINGS = {
    "counts only": ("sampled", 10**12),
    "sampled": ("sampled", SAMPLE_EVERY),
    "every": ("every", SAMPLE_EVERY),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=101)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    fastloop.uninstall()
    arms = {"stock": echo_round} | {
        timing: write_to_fd_arm(echo_round, mode, every)
        for timing, (mode, every) in TIMINGS.items()
    }
    times = ab.interleave(arms, rounds=args.rounds)
    results = []
    for timing in TIMINGS:
        result = ab.paired(
            times["stock"],
            times[timing],
            name=f"socketpair echo-64B, {timing}",
            b_label="patched",
        )
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
