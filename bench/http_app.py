"""Whole application: a Tornado HTTP server under wrk load, with and without FASTLOOP.

    python bench/http_app.py [--scenario idle|busy] [--rounds N] [--seconds S] [--json PATH]

Needs wrk (Debian: apt-get install wrk).  Each round starts the server as a
fresh subprocess once per arm, in an order that rotates from round to round
(FASTLOOP unset, FASTLOOP=1, the opt-in patches on top), drives it from a
separate wrk process over loopback, and records requests per second, p99
latency, and the server's CPU time per 1,000 requests.

The idle server is pinned to CPU 0, wrk to CPU 1: left to float, the
server shares wrk's core in some rounds (the spread of paired rounds was
7.6% unpinned and 4.7% pinned, one 15-round run each).

``busy``: the server process also runs a thread that computes in pure
Python the whole time (a background job, a metrics thread gone wild),
and keeps every core.  Ratios are
patched/stock of time per request, p99, and CPU per request (lower is
better), median of paired rounds.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import _results
from _arms import ARMS, EXTRA, SERVER_LOOP
from fastloop import ab

SERVER = r"""
import asyncio, os, socket, sys, time
if os.environ.get("BENCH_EVENT_LOOP") == "uvloop":
    import uvloop
    asyncio.set_event_loop(uvloop.new_event_loop())
import tornado.web
from tornado.httpserver import HTTPServer
from tornado.ioloop import IOLoop

class Hello(tornado.web.RequestHandler):
    def get(self):
        self.write(b"x" * 2048)

class Cpu(tornado.web.RequestHandler):
    def get(self):
        fastloop = sys.modules.get("fastloop")
        switch = fastloop.stats().switchinterval if fastloop else None
        self.write({"cpu": time.process_time(),
                    "engagements": switch.engagements if switch else 0,
                    "loop": type(asyncio.get_running_loop()).__module__})

if sys.argv[1:] == ["busy"]:
    import threading
    def spin():
        while True:
            pass
    threading.Thread(target=spin, daemon=True).start()

sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen(1024)
sock.setblocking(False)
server = HTTPServer(tornado.web.Application([("/", Hello), ("/cpu", Cpu)]))
server.add_sockets([sock])
print(sock.getsockname()[1], flush=True)
IOLoop.current().start()
"""


def _on_cpu_1() -> None:
    """The load generator on a core of its own."""
    os.sched_setaffinity(0, {1})


def _on_cpu_0() -> None:
    """An idle server (one thread) on the other core."""
    os.sched_setaffinity(0, {0})


def server_state(port: int) -> dict[str, float]:
    """The server's CPU time so far, and how often auto mode engaged there."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/cpu") as response:
        return json.load(response)  # type: ignore[no-any-return]


def _ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}[unit]


def one_run(
    fastloop: dict[str, str], seconds: float, scenario: str
) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
    env.update(fastloop)
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, scenario],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        # With a thread of its own, the server keeps every core, as a real
        # one would (one core changes how the GIL is handed over).
        preexec_fn=_on_cpu_0 if scenario == "idle" else None,
    )
    try:
        port = int(server.stdout.readline())  # type: ignore[union-attr]
        url = f"http://127.0.0.1:{port}/"
        subprocess.run(
            ["wrk", "-t1", "-c16", "-d1s", url],
            capture_output=True,
            check=True,
            preexec_fn=_on_cpu_1,
        )
        before = server_state(port)["cpu"]
        out = subprocess.run(
            ["wrk", "-t1", "-c16", f"-d{int(seconds)}s", "--latency", url],
            capture_output=True,
            text=True,
            check=True,
            preexec_fn=_on_cpu_1,
        ).stdout
        after = server_state(port)
        used = after["cpu"] - before
        wanted = "uvloop" if fastloop.get(SERVER_LOOP) == "uvloop" else "asyncio"
        assert after["loop"].split(".")[0] == wanted, (after["loop"], wanted)
    finally:
        server.terminate()
        server.wait()
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    # The distribution's own line: "+/- Stdev" columns such as "85.99%" end
    # in "99%" too.
    p99 = _ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    return {
        "rps": rps,
        "p99_ms": p99,
        "cpu_s_per_1k": used / requests * 1000,
        "engagements": after["engagements"],
    }


def _progress(done: int, total: int) -> None:
    print(f"round {done}/{total}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=("idle", "busy"), default="idle")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--arms",
        help="comma list of arm names: the scenario's (default: all of them) "
        f"and {', '.join(EXTRA)}; stock is always first",
    )
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        print("bench/http_app.py needs wrk: apt-get install wrk", file=sys.stderr)
        return 2
    known = {**ARMS[args.scenario], **EXTRA}
    chosen = args.arms.split(",") if args.arms else list(ARMS[args.scenario])
    unknown = [arm for arm in chosen if arm not in known]
    if unknown:
        parser.error(f"unknown arms {unknown}: choose from {list(known)}")
    arms = ["stock", *(arm for arm in chosen if arm != "stock")]
    runs = ab.interleave(
        {
            arm: functools.partial(one_run, known[arm], args.seconds, args.scenario)
            for arm in arms
        },
        rounds=args.rounds,
        warmup=0,
        progress=_progress,
    )
    measures = (
        ("time per request", lambda r: 1 / r["rps"]),
        ("p99 latency", lambda r: r["p99_ms"]),
        ("server CPU per request", lambda r: r["cpu_s_per_1k"]),
    )
    engaged = {arm: sum(r["engagements"] for r in rows) for arm, rows in runs.items()}
    # Every arm against stock; an arm X+Y also against arm X (uvloop with
    # fastloop against stock uvloop, the alternative a user would pick).
    pairs = [("stock", arm) for arm in arms[1:]]
    pairs += [(arm.split("+")[0], arm) for arm in arms if arm.split("+")[0] in runs]
    results = [
        ab.paired(
            [value(r) for r in runs[base]],
            [value(r) for r in runs[arm]],
            name=label,
            a_label=base,
            b_label=arm,
        )
        for base, arm in pairs
        if base != arm
        for label, value in measures
    ]
    for result in results:
        print(result)
    median = {
        arm: {key: sorted(r[key] for r in rows)[len(rows) // 2] for key in rows[0]}
        for arm, rows in runs.items()
    }
    print(f"medians: {median}")
    if args.json:
        load = f"wrk -t1 -c16 -d{int(args.seconds)}s, 2 KiB responses"
        if args.scenario == "busy":
            load += ", a pure-Python thread in the server"
        _results.save(
            args.json,
            "http_app",
            scenario=args.scenario,
            load=load,
            medians=median,
            engagements=engaged,
            results=[r.to_dict() for r in results],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
