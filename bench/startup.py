"""What the installed fastloop.pth costs at interpreter start-up with FASTLOOP unset.

    python bench/startup.py [--json bench/results/startup.json]

Times ``site.addpackage`` on the installed file, which is exactly what the
interpreter does with it at start-up (open, read, exec the one line), and
checks with ``-X importtime`` that no fastloop module gets imported.
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
from tests_support import installed_pth


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--repeat", type=int, default=2000)
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
    importtime = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "pass"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    imported = sorted(
        {
            line.split("|")[-1].strip()
            for line in importtime.splitlines()
            if "fastloop" in line
        }
    )
    print(
        f"fastloop.pth with FASTLOOP unset: median {median_us:.1f} us, "
        f"p99 {p99_us:.1f} us per start-up ({args.repeat} samples); "
        f"fastloop modules imported: {imported or 'none'}"
    )
    if args.json:
        _results.save(
            args.json,
            "startup",
            median_us=median_us,
            p99_us=p99_us,
            samples=args.repeat,
            fastloop_modules_imported=imported,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
