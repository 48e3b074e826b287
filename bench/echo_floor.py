"""How close can a timed write_to_fd get to stock? The floor under the echo ratio.

    python bench/echo_floor.py [--rounds N] [--json bench/results/echo_floor.json]

The 64-byte IOStream echo (``fastloop bench``'s ``echo-64B``) with these
versions of ``IOStream.write_to_fd``, interleaved: stock; a wrapper that
only calls stock (the price of one more Python frame); a wrapper that also
reads ``time.perf_counter_ns`` before and after; stock's own line with the
two clock reads inlined, no wrapper frame (the least any per-call timing
can cost in pure Python); stock's line with one counter bumped (the least
any exact count can cost); and fastloop's ``write_to_fd`` patch with no
call timed after a stream's first (its exact counting alone), 1 call in 16
timed, as by default (1 in ``SAMPLE_EVERY``), and timing every call
(``FASTLOOP_WRITE_TIMING=every``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tornado import iostream

import _results
import fastloop
from _arms import write_to_fd_arm
from fastloop import ab
from fastloop.cli import _workloads as workloads
from fastloop.patches.write_to_fd import SAMPLE_EVERY

TRIPS = 2000
stock_write = iostream.IOStream.write_to_fd
clock = time.perf_counter_ns


def wrapper_only(self: Any, data: Any) -> int:
    return stock_write(self, data)


def two_clock_reads(self: Any, data: Any) -> int:
    start = clock()
    written = stock_write(self, data)
    clock() - start  # the subtraction every timer makes, result unused
    return written


def inlined_clock_reads(self: Any, data: Any) -> int:
    start = clock()
    try:
        written: int = self.socket.send(data)
    finally:
        del data
    clock() - start
    return written


class Tally:
    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls = 0


TALLY = Tally()


def one_counter(self: Any, data: Any) -> int:
    TALLY.calls += 1
    try:
        written: int = self.socket.send(data)
    finally:
        del data
    return written


def echo() -> float:
    return workloads.echo_64(asyncio.run, workloads.Slice.count(TRIPS)).seconds


def with_write_to_fd(replacement: Callable[[Any, Any], int]) -> Callable[[], float]:
    def arm() -> float:
        iostream.IOStream.write_to_fd = replacement  # type: ignore[method-assign]
        try:
            return echo()
        finally:
            iostream.IOStream.write_to_fd = stock_write  # type: ignore[method-assign]

    return arm


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=61)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    fastloop.uninstall()
    arms = {
        "stock": echo,
        "wrapper only": with_write_to_fd(wrapper_only),
        "two clock reads": with_write_to_fd(two_clock_reads),
        "two clock reads, inlined": with_write_to_fd(inlined_clock_reads),
        "one counter, inlined": with_write_to_fd(one_counter),
        "fastloop write_to_fd, no call timed": write_to_fd_arm(echo, "sampled", 10**12),
        "fastloop write_to_fd, 1 in 16 timed": write_to_fd_arm(echo, "sampled", 16),
        "fastloop write_to_fd": write_to_fd_arm(echo, "sampled"),
        "fastloop write_to_fd, every call timed": write_to_fd_arm(echo, "every"),
    }
    times = ab.interleave(arms, rounds=args.rounds)
    results = []
    for name in list(arms)[1:]:
        result = ab.paired(times["stock"], times[name], name="echo-64B", b_label=name)
        added = statistics.median(
            (b - a) / TRIPS * 1e9
            for a, b in zip(times["stock"], times[name], strict=True)
        )
        print(f"{result}   (+{added:.0f} ns per round trip, 2 writes)", flush=True)
        results.append(result.to_dict() | {"added_ns_per_round_trip": added})
    if args.json:
        _results.save(
            args.json,
            "echo_floor",
            sample_every=SAMPLE_EVERY,
            results=results,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
