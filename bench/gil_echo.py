"""The bpo-7946 convoy: a Tornado echo server beside threads that compute in Python.

    python bench/gil_echo.py [--scenario rate|closed|phased] [--threads 0,1,2]
                             [--rounds N] [--seconds S] [--json PATH] [--plot PATH]

The server, a fresh subprocess per arm and round, echoes 64-byte messages
on one Tornado ``TCPServer`` while T threads of its own count in pure
Python; it keeps every core, as a real server would.  The client is a
process pinned to CPU 1 (and, where the OS allows, SCHED_FIFO, so that the
server's own threads on that CPU cannot delay it: the load generator must
not be what is measured).  Arms (``_arms.gil_arms``): stock, stock on uvloop,
every fixed switch interval (the one line a user could write instead), and
``FASTLOOP=1`` (auto); each round runs every arm once, in an order that
rotates (``fastloop.ab.interleave``).

* ``rate``: 20 requests a second, sent whatever is still unanswered (open
  loop), sparse enough that every arm does the same request work: request latency p50/p99, and the compute rate of the
  server's threads (paired per round against stock: the cost).
* ``closed``: each request as soon as the last is answered: capacity
  (requests a second) and latency at capacity.
* ``phased``: one server per arm goes through 0, 1, 4 and 0 compute
  threads at 20 requests a second: latency and compute rate per phase show
  whether auto follows.

Measuring starts a second into each phase of ``rate`` and ``closed`` (auto
mode engages in ~0.1 s); ``phased`` measures each phase whole, its
reaction time included.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _results
from _arms import gil_arms, without_fastloop
from fastloop import ab
from fastloop.cli.bench import min_rounds

SERVER = r"""
import asyncio, json, os, socket, sys, threading, time
counts, stops = [], []
def spin(i, stop):
    n = 0
    while not stop[0]:
        n += 1
        if not n & 1023:
            counts[i] = n
    counts[i] = n
def set_threads(n):
    while len(stops) > n:
        stops.pop()[0] = True
    while len(stops) < n:
        stop = [False]
        counts.append(0)
        stops.append(stop)
        threading.Thread(target=spin, args=(len(counts) - 1, stop), daemon=True).start()
marks = []
from tornado.iostream import StreamClosedError
from tornado.tcpserver import TCPServer
class Echo(TCPServer):
    async def handle_stream(self, stream, address):
        try:
            while True:
                data = await stream.read_bytes(64)
                if data[:1] in (b"T", b"M", b"E"):  # a phase, its measured part, the end
                    marks.append((time.perf_counter(), sum(counts)))
                if data[:1] == b"T":
                    set_threads(int(data[1:2]))
                await stream.write(data)
                if data[:1] == b"E":
                    done.set_result(None)
        except StreamClosedError:
            pass
async def main():
    global done
    done = asyncio.get_running_loop().create_future()
    server = Echo()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0)); sock.listen(16); sock.setblocking(False)
    server.add_sockets([sock])
    print(sock.getsockname()[1], flush=True)
    await done
    set_threads(0)
    fastloop = sys.modules.get("fastloop")
    switch = fastloop.stats().switchinterval.to_dict() if fastloop else None
    rates = [(c1 - c0) / (t1 - t0) for (t0, c0), (t1, c1) in zip(marks, marks[1:])]
    print(json.dumps({"compute_per_s": rates, "switchinterval": switch,
                      "installed": sorted(fastloop.installed()) if fastloop else []}))
if os.environ.get("BENCH_LOOP") == "uvloop":
    import uvloop
    uvloop.run(main())
else:
    asyncio.run(main())
"""

#: ``phased``: the server's compute threads in each phase.
PHASES = (0, 1, 4, 0)
#: Requests a second at a fixed rate: sparse enough for stock beside 2 (and,
#: phased, 4) compute threads, whose capacity is ~30-40 a second here.
RATE = 20.0
WARMUP_S = 1.0


def client(
    port: int, phases: list[int], seconds: float, rate: float, warm: float
) -> dict[str, Any]:
    """Runs in its own process, pinned to CPU 1: per-phase latencies."""
    os.sched_setaffinity(0, {1})
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        fifo = True
    except (AttributeError, PermissionError, OSError):
        fifo = False
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def trip(message: bytes) -> float:
        start = time.perf_counter()
        sock.sendall(message)
        got = 0
        while got < 64:
            chunk = sock.recv(64 - got)
            if not chunk:
                raise EOFError("the server closed the connection")
            got += len(chunk)
        return time.perf_counter() - start

    def load(seconds: float) -> list[float]:
        """Requests for ``seconds``: back to back, or sent at ``rate`` whatever is
        still unanswered (open loop: every arm gets the same requests); each
        latency runs from when the request was due."""
        latencies: list[float] = []
        if not rate:
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                latencies.append(trip(b"m" * 64))
            return latencies
        due_times: collections.deque[float] = collections.deque()
        due = time.perf_counter()
        end = due + seconds
        unread = 0
        while due < end or due_times:
            now = time.perf_counter()
            if due < end and now >= due:
                sock.sendall(b"m" * 64)
                due_times.append(due)
                due += 1 / rate
                continue
            wait = max(0.0, due - now) if due < end else 10.0
            if select.select([sock], [], [], wait)[0]:
                got = len(sock.recv(65536))
                if not got:
                    raise EOFError("the server closed the connection")
                unread += got
                while unread >= 64:
                    unread -= 64
                    latencies.append(time.perf_counter() - due_times.popleft())
        return latencies

    results = []
    for threads in phases:
        trip(b"T%d" % threads + b"-" * 62)
        if warm:
            load(warm)
            trip(b"M" * 64)  # the server's compute is measured from here
        latencies = sorted(load(seconds))
        results.append(
            {
                "threads": threads,
                "requests": len(latencies),
                "req_per_s": len(latencies) / seconds,
                "p50_s": latencies[len(latencies) // 2],
                "p99_s": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            }
        )
    trip(b"E" * 64)
    return {"phases": results, "fifo": fifo}


def one_run(
    env: dict[str, str], phases: list[int], seconds: float, rate: float, warm: float
) -> dict[str, Any]:
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER],
        stdout=subprocess.PIPE,
        text=True,
        env={**without_fastloop(dict(os.environ)), **env},
    )
    assert server.stdout is not None
    try:
        port = int(server.stdout.readline())
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--client",
                json.dumps([port, phases, seconds, rate, warm]),
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        ).stdout
        measured = json.loads(out)
        served = json.loads(server.stdout.readline())
    finally:
        server.wait(timeout=60)
    # With a warm-up, each phase has two compute marks: keep its measured part.
    rates = served["compute_per_s"][1::2] if warm else served["compute_per_s"]
    for phase, computed in zip(measured["phases"], rates, strict=True):
        phase["compute_per_s"] = computed
    return {
        **measured,
        "switchinterval": served["switchinterval"],
        "installed": served["installed"],
    }


def summarize(
    runs: dict[str, list[dict[str, Any]]], phase: int
) -> dict[str, dict[str, Any]]:
    """Per arm: medians, and ratios to stock paired by round, for one phase
    (to the first arm when stock is not run: ``--arms "50 us,auto"``)."""
    rows = {}
    baseline = "stock" if "stock" in runs else next(iter(runs))
    stock = [run["phases"][phase] for run in runs[baseline]]
    for arm, arm_runs in runs.items():
        mine = [run["phases"][phase] for run in arm_runs]
        row: dict[str, Any] = {
            key: statistics.median(p[key] for p in mine)
            for key in ("req_per_s", "p50_s", "p99_s", "compute_per_s")
        }
        keys = ("p50_s", "p99_s", "req_per_s") + (
            ("compute_per_s",) if mine[0]["threads"] else ()
        )
        for key in keys:
            row[f"{key}_vs_stock"] = ab.paired(
                [p[key] for p in stock],
                [p[key] for p in mine],
                name=f"{arm} {key}",
                b_label=arm,
            ).to_dict()
        rows[arm] = row
    if "auto" in runs:
        auto = [run["phases"][phase] for run in runs["auto"]]
        for arm, row in rows.items():
            mine = [run["phases"][phase] for run in runs[arm]]
            row["dominates_auto"] = dominates(
                auto, mine, "p50_s", "compute_per_s" if mine[0]["threads"] else None
            )
    return rows


def dominates(
    auto: list[dict[str, Any]],
    other: list[dict[str, Any]],
    latency: str,
    compute: str | None,
) -> bool:
    """Whether ``other`` is better than auto on latency and compute at once, shown
    by both 95% intervals of the paired ratios (a median alone is not shown)."""
    if len(auto) < min_rounds(0.95):  # too few rounds to show anything
        return False
    faster = ab.paired([r[latency] for r in auto], [r[latency] for r in other])
    if not faster.high < 1.0:
        return False
    if compute is None:
        return True  # nothing computes: latency alone decides
    more = ab.paired([r[compute] for r in auto], [r[compute] for r in other])
    return more.low > 1.0


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["--client"]:
        print(json.dumps(client(*json.loads(sys.argv[2]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scenario", choices=("rate", "closed", "phased"), default="rate"
    )
    parser.add_argument(
        "--threads", default="0,1,2", help="rate, closed: comma list of T"
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=3.0, help="measured per phase")
    parser.add_argument("--arms", help="comma list of arm names (default: all)")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--plot", type=Path, help="latency against compute, one point per arm"
    )
    args = parser.parse_args(argv)
    import importlib.util

    uvloop = {"BENCH_LOOP": "uvloop"} if importlib.util.find_spec("uvloop") else None
    chosen = gil_arms(uvloop)
    if args.arms:
        chosen = {name: chosen[name] for name in args.arms.split(",")}
    rate = 0.0 if args.scenario == "closed" else RATE
    if args.scenario == "phased":
        settings = [("phased", list(PHASES), 0.0)]
    else:
        settings = [
            (f"{t} thread{'' if t == '1' else 's'}", [int(t)], WARMUP_S)
            for t in args.threads.split(",")
        ]
    scenarios = []
    for name, phases, warm in settings:
        print(
            f"{args.scenario}, {name}: {len(chosen)} arms x {args.rounds} rounds",
            file=sys.stderr,
            flush=True,
        )
        runs = ab.interleave(
            {
                arm: functools.partial(one_run, env, phases, args.seconds, rate, warm)
                for arm, env in chosen.items()
            },
            rounds=args.rounds,
            warmup=0,
            progress=lambda done, total: print(
                f"  round {done}/{total}", file=sys.stderr, flush=True
            ),
        )
        for arm, arm_runs in runs.items():  # each arm ran what it says
            wanted = (
                "switchinterval" in chosen[arm].get("FASTLOOP", "") or arm == "auto"
            )
            assert all(
                ("switchinterval" in r["installed"]) == wanted for r in arm_runs
            ), arm
        per_phase = [summarize(runs, index) for index in range(len(phases))]
        scenarios.append(
            {"name": name, "phases": phases, "per_phase": per_phase, "runs": runs}
        )
        for index, rows in enumerate(per_phase):
            print(f"{args.scenario}, {name}, phase {index} ({phases[index]} threads):")
            for arm, row in rows.items():
                compute = row.get("compute_per_s_vs_stock")
                print(
                    f"  {arm:>8}: {row['req_per_s']:8.0f} req/s  p50 {row['p50_s'] * 1e3:7.3f} ms  "
                    f"p99 {row['p99_s'] * 1e3:7.3f} ms"
                    + (
                        f"  compute {compute['ratio']:.3f} [{compute['low']:.3f}, {compute['high']:.3f}]"
                        if compute
                        else ""
                    )
                    + (
                        "  (better than auto on both)"
                        if row.get("dominates_auto")
                        else ""
                    )
                )
    if args.json:
        _results.save(
            args.json,
            "gil_echo",
            scenario=args.scenario,
            rate=rate,
            seconds=args.seconds,
            rounds=args.rounds,
            arms=chosen,
            scenarios=scenarios,
        )
    if args.plot:
        import _frontier

        _frontier.plot(
            args.plot,
            f"Tornado echo, {args.scenario}",
            [
                (f"{s['name']}, phase {i}" if len(s["phases"]) > 1 else s["name"], rows)
                for s in scenarios
                for i, rows in enumerate(s["per_phase"])
                if s["phases"][i] and args.scenario != "closed"
            ],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
