"""A/B of the write_to_fd instrumentation: IOStream echo, and the added cost per call.

    python bench/echo.py [--rounds N] [--json bench/results/echo.json]

echo-64B, echo-64KiB  client and server IOStreams in one loop, R round trips a round
per-call              write_to_fd on a stream whose socket.send returns at once
                      (no syscall): the difference is exactly the wrapper's cost
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import socket
import statistics
import sys
import time
from pathlib import Path

import tornado
from tornado.iostream import IOStream
from tornado.tcpserver import TCPServer

import fastloop
from fastloop import ab

ROUND_TRIPS = {64: 2_000, 65_536: 300}
CALLS = 100_000


def echo(size: int) -> float:
    trips = ROUND_TRIPS[size]

    async def main() -> float:
        accepted: asyncio.Future[IOStream] = asyncio.get_running_loop().create_future()

        class Server(TCPServer):
            async def handle_stream(self, stream: IOStream, address: object) -> None:
                accepted.set_result(stream)

        server = Server()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        sock.setblocking(False)
        server.add_sockets([sock])
        client = IOStream(socket.socket())
        await client.connect(sock.getsockname())
        peer = await accepted
        message = b"m" * size
        start = time.perf_counter()
        for _ in range(trips):
            await client.write(message)
            await peer.write(await peer.read_bytes(size))
            await client.read_bytes(size)
        elapsed = time.perf_counter() - start
        client.close()
        peer.close()
        server.stop()
        return elapsed

    return asyncio.run(main())


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
    for size, label in ((64, "echo-64B"), (65_536, "echo-64KiB")):
        result = ab.patched_vs_stock(
            lambda size=size: echo(size),
            ["write_to_fd"],
            rounds=args.rounds,
            name=label,
        )
        per_trip = (
            result.a_median / ROUND_TRIPS[size] * 1e6,
            result.b_median / ROUND_TRIPS[size] * 1e6,
        )
        print(
            f"{result}   ({per_trip[0]:.1f} -> {per_trip[1]:.1f} us per round trip)",
            flush=True,
        )
        results.append(result.to_dict() | {"per_round": ROUND_TRIPS[size]})

    overhead = ab.patched_vs_stock(
        per_call, ["write_to_fd"], rounds=args.rounds, name="per-call"
    )
    added_ns = statistics.median(
        (b - a) / CALLS * 1e9
        for a, b in zip(overhead.a_times, overhead.b_times, strict=True)
    )
    print(
        f"{overhead}   (added cost per write_to_fd call: {added_ns:.0f} ns, "
        f"median of paired differences)",
        flush=True,
    )
    results.append(
        overhead.to_dict() | {"per_round": CALLS, "added_ns_per_call": added_ns}
    )

    fastloop.configure(write_cpu=True)
    try:
        with_cpu = ab.patched_vs_stock(
            per_call, ["write_to_fd"], rounds=args.rounds, name="per-call, write_cpu"
        )
    finally:
        fastloop.configure(write_cpu=False)
    added_cpu_ns = statistics.median(
        (b - a) / CALLS * 1e9
        for a, b in zip(with_cpu.a_times, with_cpu.b_times, strict=True)
    )
    print(
        f"{with_cpu}   (added cost per call with FASTLOOP_WRITE_CPU=1: {added_cpu_ns:.0f} ns)"
    )
    results.append(
        with_cpu.to_dict() | {"per_round": CALLS, "added_ns_per_call": added_cpu_ns}
    )

    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "benchmark": "echo",
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
