"""A real Tornado app with a blocking handler, run under the watchdog and the profiler.

    python bench/samples/blocked_app.py [--seconds 6] [--out bench/results]

Starts ``fastloop run --block-ms 100 --profile FILE -- python inventory_app.py``
(an unchanged Tornado app whose ``/report`` handler builds a CSV report on
the loop thread), loads it with wrk on the fast endpoint and asks for a
report every 1.5 s, then writes what fastloop saw:

- ``blocked_loop.txt``: the first blocked-loop episode as logged (warning
  with the loop thread's stack, then the recovery line);
- ``tornado_profile.collapsed``: the profiler's collapsed stacks;
- ``flamegraph.svg``: those stacks drawn by ``fastloop flamegraph``, idle
  time left out (its share is in ``tornado_profile.json``).

Needs wrk (Debian: apt-get install wrk).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path

from fastloop.cli import flamegraph

HERE = Path(__file__).resolve().parents[1]  # bench/

TITLE = "Tornado inventory app under wrk: loop-thread samples, idle left out"

APP = '''"""An inventory service: fast lookups, and a report built on the loop thread."""
import csv, io, random, socket
import tornado.web
from tornado.httpserver import HTTPServer
from tornado.ioloop import IOLoop

ITEMS = [
    {"sku": f"SKU-{n:06d}", "stock": random.randrange(1000), "price": n % 97 + 0.99}
    for n in range(120_000)
]


def render_rows(items):
    return [[item["sku"], item["stock"], f"{item['price']:.2f}"] for item in items]


def build_report():
    ranked = sorted(ITEMS, key=lambda item: (-item["stock"], item["sku"]))
    buffer = io.StringIO()
    csv.writer(buffer).writerows(render_rows(ranked))
    return buffer.getvalue()


class Lookup(tornado.web.RequestHandler):
    def get(self):
        self.write(ITEMS[random.randrange(len(ITEMS))])


class Report(tornado.web.RequestHandler):
    def get(self):
        self.set_header("Content-Type", "text/csv")
        self.write(build_report())


class Quit(tornado.web.RequestHandler):
    def get(self):
        IOLoop.current().add_callback(IOLoop.current().stop)


sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen(1024)
sock.setblocking(False)
app = tornado.web.Application([("/", Lookup), ("/report", Report), ("/quit", Quit)])
HTTPServer(app).add_sockets([sock])
print(sock.getsockname()[1], flush=True)
IOLoop.current().start()
'''


def first_episode(log: str) -> str:
    """The first 'blocked for' warning with its stack, and its recovery line."""
    lines = log.splitlines()
    start = next(i for i, line in enumerate(lines) if "blocked for" in line)
    end = next(i for i in range(start, len(lines)) if "responsive again" in lines[i])
    return "\n".join(lines[start : end + 1]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=6)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        print("needs wrk: apt-get install wrk", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        app = Path(scratch) / "inventory_app.py"
        app.write_text(APP)
        profile = Path(scratch) / "inventory.collapsed"
        env = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
        command = [
            sys.executable, "-m", "fastloop", "run",
            "--block-ms", "100", "--profile", str(profile),
            "--", sys.executable, str(app),
        ]  # fmt: skip
        server = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        port = int(server.stdout.readline())  # type: ignore[union-attr]
        base = f"http://127.0.0.1:{port}"
        stop = threading.Event()

        def ask_for_reports() -> None:
            while not stop.wait(1.5):
                with urllib.request.urlopen(f"{base}/report") as response:
                    response.read()

        reporter = threading.Thread(target=ask_for_reports)
        reporter.start()
        subprocess.run(
            ["wrk", "-t1", "-c8", f"-d{args.seconds}s", f"{base}/"],
            capture_output=True,
            check=True,
        )
        stop.set()
        reporter.join()
        urllib.request.urlopen(f"{base}/quit").read()
        _, log = server.communicate(timeout=60)
        if server.returncode != 0:
            print(log, file=sys.stderr)
            return 1
        collapsed = profile.read_text()

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "blocked_loop.txt").write_text(first_episode(log))
    (args.out / "tornado_profile.collapsed").write_text(collapsed)
    stacks = flamegraph.parse_collapsed(collapsed)
    total = sum(stacks.values())
    idle = sum(n for stack, n in stacks.items() if stack[-1] == "(idle)")
    work = {stack: n for stack, n in stacks.items() if stack[-1] != "(idle)"}
    # What `fastloop flamegraph FILE flamegraph.svg --no-idle --title ...` writes.
    (args.out / "flamegraph.svg").write_text(
        flamegraph.svg(work, TITLE), encoding="utf-8"
    )
    summary = {
        "samples": total,
        "idle_samples": idle,
        "episodes": log.count("blocked for"),
        "load": f"wrk -t1 -c8 -d{args.seconds}s on /, a /report every 1.5 s",
        "command": "fastloop run --block-ms 100 --profile FILE -- python inventory_app.py",
    }
    (args.out / "tornado_profile.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(
        f"{summary['episodes']} blocked episodes logged; {total} samples, "
        f"{idle / max(total, 1):.0%} idle; wrote {args.out}/blocked_loop.txt, "
        f"tornado_profile.collapsed, flamegraph.svg"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
