"""An echo probe independent of ``fastloop bench``: what the patches cost or save a small-message service.

    python bench/echo_socketpair.py [--seconds S] [--json bench/results/echo_socketpair.json]

Two IOStreams on one loop over a ``socket.socketpair()`` (no TCP, no
listener, none of the ``echo-64B`` workload's code): 3,000 round trips of
64 bytes with ``await stream.write(...)`` / ``read_bytes(...)``, stock
against the default set (``FASTLOOP=1``, write counting included), each
patch of it alone, and ``write_to_fd`` timing every call, interleaved in
rounds until ``--seconds`` have passed.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tornado.iostream import IOStream

import _results
import fastloop
from _arms import write_to_fd_arm
from fastloop import ab
from fastloop.patches import RECORDS
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


def patches_arm(names: list[str] | None) -> Callable[[], float]:
    """The echo under ``names`` (None: the default set)."""

    def arm() -> float:
        with fastloop.patched(names):
            return echo_round()

    return arm


def arms() -> dict[str, Callable[[], float]]:
    """stock, the default set, each of its patches alone, every write timed."""
    default = [name for name, _, _, on in RECORDS if on]
    return (
        {"stock": echo_round, "FASTLOOP=1": patches_arm(None)}
        | {f"{name} alone": patches_arm([name]) for name in default}
        | {"write_to_fd, every call timed": write_to_fd_arm(echo_round, "every")}
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    fastloop.uninstall()
    rotated = arms()
    times = ab.interleave(rotated, rounds=10**6, budget_s=args.seconds)
    results = []
    for arm in list(rotated)[1:]:
        result = ab.paired(
            times["stock"],
            times[arm],
            name=f"socketpair echo-64B, {arm}",
            b_label=arm,
        )
        added = statistics.median(
            (b - a) / TRIPS * 1e9
            for a, b in zip(result.a_times, result.b_times, strict=True)
        )
        print(f"{result}   ({added:+.0f} ns per round trip)", flush=True)
        results.append(
            result.to_dict()
            | {"per_round": TRIPS, "arm": arm, "added_ns_per_round_trip": added}
        )
    if args.json:
        _results.save(
            args.json, "echo_socketpair", sample_every=SAMPLE_EVERY, results=results
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
