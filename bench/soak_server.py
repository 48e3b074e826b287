"""The differential soak's Tornado server (bench/soak.py starts one per arm).

    python bench/soak_server.py --port-file PATH --report PATH [--toggle]

Serves ``/json``, ``/executor`` (JSON computed in the loop's executor),
``/stream`` (1 MiB written in flushed 64 KiB chunks), ``/echo`` (POST),
a websocket echo at ``/ws``, and ``/soak/finish``.  Beside the traffic the
loop busy-works a slice of every few milliseconds (a loop busy in each
iteration widens the race windows a patch may have), and two threads send
it numbered callbacks whose per-thread order the loop checks.  With
``--toggle`` fastloop is uninstalled and installed again all along, from a
thread and from the loop.

It writes the port it listens on to ``--port-file``.  On SIGTERM or
``/soak/finish`` it stops the producers, lets the loop drain and the open
connections settle, and writes ``--report`` (JSON): every log record's kind
with counts, open fds at start and end, open connections, loop stalls,
callbacks produced and received, order violations, toggles and
``fastloop.installed()``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import os
import random
import re
import signal
import socket
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import tornado.web
import tornado.websocket
from tornado.httpserver import HTTPServer
from tornado.ioloop import IOLoop, PeriodicCallback
from tornado.iostream import IOStream
from tornado.netutil import bind_sockets

STREAM_BYTES = 1 << 20
CHUNK = b"s" * (64 << 10)
#: Each connection's send buffer, fixed (the kernel would grow it to hold all
#: of /stream at once): large responses meet back-pressure, and a client
#: that stops reading mid-response leaves the server mid-write every time.
SEND_BUFFER = 64 << 10
#: The busy slice: BUSY_MS of work on the loop every BUSY_EVERY_MS.
BUSY_EVERY_MS = 5.0
BUSY_MS = 2.0
#: A busy tick this late counts as a stalled loop.
STALL_MS = 100.0
#: Bursts of cross-thread callbacks: size, and the pause between bursts (s).
BURST = (1, 50)
BURST_PAUSE = (0.0005, 0.003)
#: Pause between two toggles of fastloop, from either side (ms).
TOGGLE_MS = (5.0, 50.0)
#: How long the loop drains and connections settle before the report (s).
SETTLE_S = 5.0

# Addresses and numbers vary from record to record; the template does not.
NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+")


class LogKinds(logging.Handler):
    """Counts every record by (logger, level, message template's first line)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[tuple[str, str, str]] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.msg if isinstance(record.msg, str) else type(record.msg).__name__
        template = NUMBERS.sub("N", msg.split("\n", 1)[0])
        self.counts[(record.name, record.levelname, template)] += 1


class Server(HTTPServer):
    """An HTTP server that knows how many of its connections are open."""

    open_connections = 0

    def handle_stream(self, stream: IOStream, address: tuple[str, int]) -> None:
        self.open_connections += 1
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        super().handle_stream(stream, address)

    def on_close(self, server_conn: object) -> None:
        self.open_connections -= 1
        super().on_close(server_conn)


class Soak:
    """The server process: its HTTP server, side activities and their tallies."""

    def __init__(self, toggle: bool) -> None:
        self.loop = IOLoop.current()
        self.websockets: set[tornado.websocket.WebSocketHandler] = set()
        state = {"soak": self}
        self.server = Server(
            tornado.web.Application(
                [
                    ("/json", Json),
                    ("/executor", Executor),
                    ("/stream", Stream),
                    ("/echo", Echo),
                    ("/ws", WebSocketEcho, state),
                    ("/soak/finish", Finish, state),
                ]
            )
        )
        (sock,) = bind_sockets(0, "127.0.0.1")
        self.server.add_sockets([sock])
        self.port: int = sock.getsockname()[1]
        self.stop = threading.Event()
        self.done = asyncio.Event()
        self.finishing = False
        self.produced = [0, 0]
        self.last_seq = [0, 0]
        self.received = 0
        self.violations = 0
        self.ticks = 0
        self.stalls = 0
        self.max_lag_ms = 0.0
        self.last_tick = time.monotonic()
        self.toggles = 0
        self.toggle_lock = threading.Lock()
        self.fds_start = len(os.listdir("/proc/self/fd"))
        self.threads = [
            threading.Thread(target=self.produce, args=(i,)) for i in range(2)
        ]
        self.periodic = [PeriodicCallback(self.busy, BUSY_EVERY_MS)]
        if toggle:
            self.threads.append(threading.Thread(target=self.toggle_thread))
            low, high = TOGGLE_MS
            middle = (low + high) / 2
            self.periodic.append(
                PeriodicCallback(self.toggle, middle, jitter=(high - low) / middle)
            )
        for thread in self.threads:
            thread.start()
        for periodic in self.periodic:
            periodic.start()

    def busy(self) -> None:
        now = time.monotonic()
        lag_ms = (now - self.last_tick) * 1000 - BUSY_EVERY_MS
        self.ticks += 1
        self.max_lag_ms = max(self.max_lag_ms, lag_ms)
        self.stalls += lag_ms > STALL_MS
        end = now + BUSY_MS / 1000
        while time.monotonic() < end:
            pass
        self.last_tick = now

    def record(self, producer: int, seq: int) -> None:
        self.received += 1
        self.violations += seq != self.last_seq[producer] + 1
        self.last_seq[producer] = seq

    def produce(self, producer: int) -> None:
        seq = 0
        while not self.stop.is_set():
            for _ in range(random.randint(*BURST)):
                seq += 1
                self.loop.add_callback(self.record, producer, seq)
            self.produced[producer] = seq
            time.sleep(random.uniform(*BURST_PAUSE))

    def toggle(self) -> None:
        # Imported here: the other arms leave fastloop to FASTLOOP, and stock's
        # report says fastloop was never imported.
        import fastloop

        fastloop.uninstall()
        fastloop.install()
        with self.toggle_lock:
            self.toggles += 1

    def toggle_thread(self) -> None:
        while not self.stop.wait(random.uniform(*TOGGLE_MS) / 1000):
            self.toggle()

    async def finish(self) -> None:
        if self.finishing:
            return
        self.finishing = True
        self.stop.set()
        while any(thread.is_alive() for thread in self.threads):
            await asyncio.sleep(0.01)
        for periodic in self.periodic:
            periodic.stop()
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline and (
            self.received < sum(self.produced) or self.open_connections()
        ):
            await asyncio.sleep(0.05)
        self.done.set()

    def open_connections(self) -> int:
        return self.server.open_connections + len(self.websockets)

    def report(self, kinds: LogKinds) -> dict[str, object]:
        fastloop = sys.modules.get("fastloop")
        return {
            "log_kinds": [[*kind, n] for kind, n in sorted(kinds.counts.items())],
            "fds": {
                "start": self.fds_start,
                "end": len(os.listdir("/proc/self/fd")),
            },
            "open_connections": self.open_connections(),
            "stalls": {
                "ticks": self.ticks,
                "count": self.stalls,
                "max_lag_ms": round(self.max_lag_ms, 1),
            },
            "callbacks": {
                "produced": sum(self.produced),
                "received": self.received,
                "order_violations": self.violations,
            },
            "toggles": self.toggles,
            "fastloop_installed": sorted(fastloop.installed()) if fastloop else None,
        }


class Json(tornado.web.RequestHandler):
    def get(self) -> None:
        self.write({"ok": True, "items": list(range(10))})


def digest(text: str) -> str:
    return hashlib.sha256(text.encode() * 1000).hexdigest()


class Executor(tornado.web.RequestHandler):
    async def get(self) -> None:
        value = await IOLoop.current().run_in_executor(None, digest, "soak")
        self.write({"sha256": value})


class Stream(tornado.web.RequestHandler):
    async def get(self) -> None:
        self.set_header("Content-Length", STREAM_BYTES)
        for _ in range(STREAM_BYTES // len(CHUNK)):
            self.write(CHUNK)
            await self.flush()


class Echo(tornado.web.RequestHandler):
    def post(self) -> None:
        self.write(self.request.body)


class WebSocketEcho(tornado.websocket.WebSocketHandler):
    def initialize(self, soak: Soak) -> None:
        self.soak = soak

    def open(self) -> None:  # type: ignore[override]
        self.soak.websockets.add(self)

    def on_message(self, message: str | bytes) -> None:
        self.write_message(message, binary=isinstance(message, bytes))

    def on_close(self) -> None:
        self.soak.websockets.discard(self)


class Finish(tornado.web.RequestHandler):
    def initialize(self, soak: Soak) -> None:
        self.soak = soak

    def get(self) -> None:
        self.finish({"finishing": True})
        IOLoop.current().add_callback(self.soak.finish)


def write_atomically(path: Path, text: str) -> None:
    """Whoever polls ``path`` sees nothing or all of it."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.replace(path)


async def main(args: argparse.Namespace) -> None:
    kinds = LogKinds()
    logging.getLogger().addHandler(kinds)
    logging.getLogger().setLevel(logging.DEBUG)
    soak = Soak(args.toggle)
    asyncio.get_running_loop().add_signal_handler(
        signal.SIGTERM, lambda: IOLoop.current().add_callback(soak.finish)
    )
    write_atomically(args.port_file, str(soak.port))
    await soak.done.wait()
    write_atomically(args.report, json.dumps(soak.report(kinds), indent=1))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port-file", type=Path, required=True)
    parser.add_argument("--report", type=Path, required=True)
    parser.add_argument("--toggle", action="store_true")
    asyncio.run(main(parser.parse_args()))
