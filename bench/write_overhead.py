"""What the write_to_fd instrumentation adds per call, with and without the CPU split.

    python bench/write_overhead.py [--rounds N] [--json bench/results/write_overhead.json]

write_to_fd runs on a stream whose socket.send returns at once (no
syscall), stock against patched, interleaved: the median of the paired
differences is the wrapper's own cost.  (The end-to-end IOStream echo is a
``fastloop bench`` workload.)
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

CALLS = 100_000


class NullSocket:
    """Accepts every byte at once: write_to_fd without the syscall."""

    def send(self, data: memoryview) -> int:
        return len(data)


def per_call() -> float:
    async def main() -> float:
        stream = IOStream(socket.socket())
        real, stream.socket = stream.socket, NullSocket()  # type: ignore[assignment]
        view = memoryview(b"p" * 64)
        write = stream.write_to_fd
        start = time.perf_counter()
        for _ in range(CALLS):
            write(view)
        elapsed = time.perf_counter() - start
        real.close()
        return elapsed

    return asyncio.run(main())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results = []
    # Each mode a user can choose: the default samples durations (1 call in
    # SAMPLE_EVERY timed), FASTLOOP_WRITE_TIMING=every times each call, and
    # FASTLOOP_WRITE_CPU=1 adds thread CPU time to each.
    modes: list[tuple[str, dict[str, object]]] = [
        ("per-call", {}),
        ("per-call, every call timed", {"write_timing": "every"}),
        ("per-call, write_cpu", {"write_cpu": True}),
    ]
    for name, settings in modes:
        fastloop.configure(**settings)  # type: ignore[arg-type]
        try:
            result = ab.patched_vs_stock(
                per_call, ["write_to_fd"], rounds=args.rounds, name=name
            )
        finally:
            fastloop.configure(write_timing="sampled", write_cpu=False)
        added_ns = statistics.median(
            (b - a) / CALLS * 1e9
            for a, b in zip(result.a_times, result.b_times, strict=True)
        )
        print(
            f"{result}   (added cost per write_to_fd call: {added_ns:.0f} ns, "
            "median of paired differences)",
            flush=True,
        )
        results.append(
            result.to_dict() | {"per_round": CALLS, "added_ns_per_call": added_ns}
        )

    if args.json:
        _results.save(
            args.json,
            "write_overhead",
            sample_every=SAMPLE_EVERY,
            results=results,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
