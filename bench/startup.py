"""What fastloop costs at interpreter start-up, with FASTLOOP unset and set.

    python bench/startup.py [--json bench/results/startup.json] [--pairs N]

Unset: times ``site.addpackage`` on the installed file, which is exactly
what the interpreter does with it at start-up (open, read, exec the one
line), and checks with ``-X importtime`` that no fastloop module gets
imported.  Set: runs ``python -c "import tornado.web"`` as paired
processes, with and without ``FASTLOOP=1`` (order alternating), and
reports the median of the paired differences with its 95% interval, and
the fastloop modules that ``-X importtime`` shows it imported.
"""

from __future__ import annotations

import argparse
import os
import site
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import _results
from fastloop import ab
from tests_support import installed_pth

APP = "import tornado.web"


def run_once(env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", APP], env=env, check=True)
    return time.perf_counter() - start


def imported_modules(env: dict[str, str], code: str) -> list[str]:
    """The fastloop modules ``-X importtime`` shows ``code`` importing."""
    report = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    return sorted(
        {
            line.split("|")[-1].strip()
            for line in report.splitlines()
            if "fastloop" in line
        }
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--repeat", type=int, default=2000)
    parser.add_argument("--pairs", type=int, default=41)
    args = parser.parse_args(argv)

    pth = installed_pth()
    if pth is None:
        print(
            "fastloop.pth is not installed: run `pip install .` first", file=sys.stderr
        )
        return 2
    os.environ.pop("FASTLOOP", None)
    samples = []
    for _ in range(args.repeat):
        start = time.perf_counter_ns()
        site.addpackage(str(pth.parent), pth.name, set())
        samples.append(time.perf_counter_ns() - start)
    median_us = statistics.median(samples) / 1000
    p99_us = sorted(samples)[int(len(samples) * 0.99)] / 1000

    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
    imported = imported_modules(env, "pass")
    print(
        f"fastloop.pth with FASTLOOP unset: median {median_us:.1f} us, "
        f"p99 {p99_us:.1f} us per start-up ({args.repeat} samples); "
        f"fastloop modules imported: {imported or 'none'}",
        flush=True,
    )

    with_fastloop = {**env, "FASTLOOP": "1"}
    times = ab.interleave(
        {"unset": lambda: run_once(env), "FASTLOOP=1": lambda: run_once(with_fastloop)},
        rounds=args.pairs,
    )
    added = [
        (b - a) * 1e3 for a, b in zip(times["unset"], times["FASTLOOP=1"], strict=True)
    ]
    added_ms, low_ms, high_ms = ab.median_interval(added)
    unset_ms = statistics.median(times["unset"]) * 1e3
    set_ms = statistics.median(times["FASTLOOP=1"]) * 1e3
    imported_set = imported_modules(with_fastloop, APP)
    print(
        f"python -c {APP!r}: unset {unset_ms:.1f} ms, FASTLOOP=1 {set_ms:.1f} ms "
        f"(medians of {args.pairs} paired runs); added {added_ms:.2f} ms "
        f"[{low_ms:.2f}, {high_ms:.2f}]; fastloop modules imported: {imported_set}"
    )
    if args.json:
        _results.save(
            args.json,
            "startup",
            median_us=median_us,
            p99_us=p99_us,
            samples=args.repeat,
            fastloop_modules_imported=imported,
            app=APP,
            pairs=args.pairs,
            unset_ms=unset_ms,
            fastloop_set_ms=set_ms,
            added_ms=added_ms,
            added_low_ms=low_ms,
            added_high_ms=high_ms,
            fastloop_set_modules_imported=imported_set,
            unset_times_s=times["unset"],
            fastloop_set_times_s=times["FASTLOOP=1"],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
