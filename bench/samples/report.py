"""Produce the sample ``fastloop.report()`` shown in the README, from a real run.

    python bench/samples/report.py [--out bench/results/report.txt]

A Tornado HTTP server and client in one loop (keep-alive requests with
64 KiB bodies, and one request whose handler serialises a large document
on the loop thread), with worker threads finishing work through
add_callback, then a thread that computes in Python for a while: the
shape of a dask worker's traffic, small enough to run anywhere.  The
blocked-loop watchdog runs throughout (100 ms threshold).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import threading
import time
from pathlib import Path

import fastloop

fastloop.install()

from tornado.httpclient import AsyncHTTPClient  # noqa: E402
from tornado.httpserver import HTTPServer  # noqa: E402
from tornado.ioloop import IOLoop  # noqa: E402
from tornado.web import Application, RequestHandler  # noqa: E402

BODY = b"b" * 65536


class Payload(RequestHandler):
    def get(self) -> None:
        self.write(BODY)


class Export(RequestHandler):
    def get(self) -> None:
        rows = [
            {"id": n, "name": f"row {n}", "tags": ["a", "b"]} for n in range(300_000)
        ]
        self.write(json.dumps(rows))


async def main() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    server = HTTPServer(Application([("/", Payload), ("/export", Export)]))
    server.add_sockets([sock])
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    client = AsyncHTTPClient()
    for _ in range(300):
        response = await client.fetch(url)
        assert response.body == BODY
    await client.fetch(url + "export")

    io = IOLoop.current()
    done = asyncio.get_running_loop().create_future()
    remaining = [4 * 5000]

    def finished() -> None:
        remaining[0] -= 1
        if not remaining[0]:
            done.set_result(None)

    def worker() -> None:
        for _ in range(5000):
            io.add_callback(finished)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    await done
    for thread in threads:
        thread.join()

    # A thread that computes in Python for a while, as a dask task would:
    # auto mode shortens the switch interval beside it, and lets go after.
    stop = [False]

    def compute() -> None:
        while not stop[0]:
            pass

    hog = threading.Thread(target=compute)
    hog.start()
    until = time.monotonic() + 1.5
    while time.monotonic() < until or not fastloop.stats().switchinterval.engaged:
        await client.fetch(url)
    stop[0] = True
    hog.join()
    while fastloop.stats().switchinterval.engaged:
        await asyncio.sleep(0.02)
    server.stop()


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    fastloop.reset_stats()
    with fastloop.watch(threshold_ms=100):
        asyncio.run(main())
        while not fastloop.stats().watchdog.episodes:  # its recovery line
            time.sleep(0.01)
        text = fastloop.report()
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(run())
