"""Instructions per cross-thread ping, counted by callgrind: stock against patch sets.

    python bench/instructions.py [--arms NAMES] [--pings N] [--json PATH]

A wall-clock A/B of a ~70 us ping cannot resolve the ~1 us a wrapper adds
on this noisy machine; ``valgrind --tool=callgrind`` counts the
instructions the process executes, whatever else the machine does.  Each
arm runs the ping-pong twice, with N and 3N pings (another thread adds
``pong.set`` to a Tornado IOLoop and waits for it), and the difference
over 2N is the instructions of one ping: start-up and import cancel out.
Threads are serialised under valgrind, so how they interleave is part of
the count: run alone, stock read 66,265-66,383 instructions a ping in five
runs here, but 59,270-59,444 beside another valgrind run, so run nothing
beside it.  Anything that runs by the clock, such as auto mode's
controller, would be overcounted by valgrind's ~50x slowdown: no arm
installs ``switchinterval``.

Needs valgrind (Debian: ``apt install valgrind``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import _results

PING_PONG = r"""
import sys, threading
import tornado.ioloop

def main(pings):
    started = threading.Event()
    box = {}

    def loop_thread():
        box["io"] = io = tornado.ioloop.IOLoop()
        started.set()
        io.start()

    thread = threading.Thread(target=loop_thread)
    thread.start()
    started.wait()
    io, pong = box["io"], threading.Event()
    for _ in range(pings):
        pong.clear()
        io.add_callback(pong.set)
        pong.wait()
    io.add_callback(io.stop)
    thread.join()

main(int(sys.argv[1]))
"""

#: Arm name (patches joined by "+", so that ``--arms`` takes a comma list)
#: -> the FASTLOOP value ("" is stock).
ARMS = {
    "stock": "",
    "add_callback": "add_callback",
    "wakeup": "wakeup",
    "add_callback+wakeup": "add_callback,wakeup",
    "add_callback+wakeup+write_to_fd": "add_callback,wakeup,write_to_fd",
}


def instructions(fastloop: str, pings: int) -> int:
    """The instructions callgrind counts for one run of ``pings`` pings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
    env["OPENBLAS_NUM_THREADS"] = "1"  # nothing spins beside the ping
    if fastloop:
        env["FASTLOOP"] = fastloop
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={tmp}/callgrind.out",
                sys.executable,
                "-c",
                PING_PONG,
                str(pings),
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stderr
    found = re.search(r"Collected : (\d+)", out)
    if found is None:
        raise RuntimeError(f"no instruction count in callgrind's output:\n{out}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--arms", help=f"comma list of {', '.join(ARMS)} (default: all)"
    )
    parser.add_argument("--pings", type=int, default=2000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print(
            "bench/instructions.py needs valgrind (apt install valgrind)",
            file=sys.stderr,
        )
        return 2
    chosen = args.arms.split(",") if args.arms else list(ARMS)
    unknown = [arm for arm in chosen if arm not in ARMS]
    if unknown:
        parser.error(f"unknown arms {unknown}: choose from {list(ARMS)}")
    arms = ["stock", *(arm for arm in chosen if arm != "stock")]
    per_ping: dict[str, float] = {}
    for arm in arms:
        low = instructions(ARMS[arm], args.pings)
        high = instructions(ARMS[arm], 3 * args.pings)
        per_ping[arm] = (high - low) / (2 * args.pings)
        added = per_ping[arm] - per_ping["stock"]
        print(
            f"{arm}: {per_ping[arm]:,.0f} instructions a ping ({added:+,.0f} vs stock)"
        )
    if args.json:
        _results.save(args.json, "instructions", pings=args.pings, per_ping=per_ping)
    return 0


if __name__ == "__main__":
    sys.exit(main())
