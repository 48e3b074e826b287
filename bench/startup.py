"""What fastloop costs at interpreter start-up, with FASTLOOP unset and set.

    python bench/startup.py [--json bench/results/startup.json] [--seconds S]

Unset: times ``site.addpackage`` on the installed file, which is exactly
what the interpreter does with it at start-up (open, read, exec the one
line), and checks with ``-X importtime`` that no fastloop module gets
imported.  Set: for each program (``pass``, ``import tornado.web``,
``import distributed``, and one that makes a Tornado IOLoop, where the
patches install) runs paired processes with and without ``FASTLOOP=1``,
the order alternating, for ``--seconds`` each, and reports the median of
the paired differences of wall time and of the child's CPU time (user +
system, from ``wait4``; steadier than the wall clock on a shared machine)
with their 95% intervals, against the program's budget; for the IOLoop
program also each ``--frontier`` value of ``FASTLOOP`` in the same rounds,
so that what start-up and each patch cost is one run.
The children run on one CPU, the other left to the machine's noise.
"""

from __future__ import annotations

import argparse
import functools
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

#: program -> the most ``FASTLOOP=1`` may add to its start-up, in ms; None
#: for one that makes an event loop, where the patches install: what a
#: server pays once, shown beside the budgets rather than held to one.
#: The program whose start-up ``--frontier`` splits into its parts.
FRONTIER_PROGRAM = "import tornado.web, tornado.ioloop; tornado.ioloop.IOLoop().close()"
BUDGETS_MS: dict[str, float | None] = {
    "pass": 1.0,
    "import tornado.web": 3.0,
    "import distributed": 5.0,
    FRONTIER_PROGRAM: None,
}
CPU = 1


def run_once(code: str, env: dict[str, str]) -> tuple[float, float]:
    """One ``python -c code``: (wall seconds, child CPU seconds)."""
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", code], env=env)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise RuntimeError(f"python -c {code!r} exited {child.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


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


def pth_cost_unset(repeat: int) -> tuple[float, float]:
    """Median and p99 of the .pth line with FASTLOOP unset, in us."""
    pth = installed_pth()
    if pth is None:
        raise SystemExit("fastloop.pth is not installed: run `pip install .` first")
    samples = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        site.addpackage(str(pth.parent), pth.name, set())
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000, sorted(samples)[
        int(len(samples) * 0.99)
    ] / 1000


def program_row(
    code: str,
    env: dict[str, str],
    seconds: float,
    budget_ms: float | None,
    frontier: tuple[str, ...] = (),
) -> dict[str, object]:
    """``FASTLOOP=1`` against unset; with ``frontier``, each of those values of
    ``FASTLOOP`` too, in the same interleaved rounds (what each patch costs)."""
    values = ("1", *(value for value in frontier if value != "1"))
    arms = {"unset": lambda: run_once(code, env)}
    for value in values:
        arms[f"FASTLOOP={value}"] = functools.partial(
            run_once, code, {**env, "FASTLOOP": value}
        )
    runs = ab.interleave(arms, rounds=100_000, warmup=2, budget_s=seconds)
    row: dict[str, object] = {"program": code, "budget_ms": budget_ms}
    for index, clock in enumerate(("wall", "cpu")):
        unset = [run[index] for run in runs["unset"]]
        fast = [run[index] for run in runs["FASTLOOP=1"]]
        row[clock] = {
            "unset_ms": statistics.median(unset) * 1e3,
            "fastloop_ms": statistics.median(fast) * 1e3,
            **added(unset, fast),
            "unset_times_s": unset,
            "fastloop_times_s": fast,
        }
    if frontier:
        unset = [run[1] for run in runs["unset"]]
        row["frontier_cpu"] = {
            value: added(unset, [run[1] for run in runs[f"FASTLOOP={value}"]])
            for value in values
        }
    row["pairs"] = len(runs["unset"])
    row["fastloop_modules_imported"] = imported_modules({**env, "FASTLOOP": "1"}, code)
    return row


def added(unset: list[float], fast: list[float]) -> dict[str, float]:
    """The median of paired differences, in ms, with its 95% interval."""
    median, low, high = ab.median_interval(
        [(b - a) * 1e3 for a, b in zip(unset, fast, strict=True)]
    )
    return {"added_ms": median, "added_low_ms": low, "added_high_ms": high}


def describe(row: dict[str, object]) -> str:
    parts = []
    for clock in ("wall", "cpu"):
        figures = row[clock]
        assert isinstance(figures, dict)
        budget = row["budget_ms"]
        met = (
            "no budget"
            if budget is None
            else "met"
            if figures["added_high_ms"] <= budget
            else "MISSED"
        )
        parts.append(
            f"{clock} {figures['unset_ms']:.1f} -> {figures['fastloop_ms']:.1f} ms, "
            f"added {figures['added_ms']:.2f} [{figures['added_low_ms']:.2f}, "
            f"{figures['added_high_ms']:.2f}] ({met})"
        )
    return (
        f"python -c {row['program']!r}, budget {row['budget_ms']} ms, "
        f"{row['pairs']} pairs: " + "; ".join(parts)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--repeat", type=int, default=2000)
    parser.add_argument(
        "--seconds", type=float, default=60.0, help="time for each program's pairs"
    )
    parser.add_argument(
        "--programs", nargs="*", default=list(BUDGETS_MS), choices=list(BUDGETS_MS)
    )
    parser.add_argument(
        "--frontier",
        default="0,wakeup,write_to_fd,switchinterval",
        help="FASTLOOP values timed beside FASTLOOP=1 for the IOLoop program "
        "(0: start-up machinery, no patch; each patch alone)",
    )
    args = parser.parse_args(argv)

    os.environ.pop("FASTLOOP", None)
    median_us, p99_us = pth_cost_unset(args.repeat)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
    imported = imported_modules(env, "pass")
    print(
        f"fastloop.pth with FASTLOOP unset: median {median_us:.1f} us, "
        f"p99 {p99_us:.1f} us per start-up ({args.repeat} samples); "
        f"fastloop modules imported: {imported or 'none'}",
        flush=True,
    )
    if (os.cpu_count() or 1) > CPU:
        os.sched_setaffinity(0, {CPU})  # the children inherit it
    rows = []
    for code in args.programs:
        frontier = tuple(args.frontier.split(",")) if code == FRONTIER_PROGRAM else ()
        rows.append(program_row(code, env, args.seconds, BUDGETS_MS[code], frontier))
        print(describe(rows[-1]), flush=True)
        for value, cost in dict(rows[-1].get("frontier_cpu", {})).items():
            print(
                f"  FASTLOOP={value}: cpu added {cost['added_ms']:.2f} "
                f"[{cost['added_low_ms']:.2f}, {cost['added_high_ms']:.2f}] ms"
            )
        print(f"  fastloop modules imported: {rows[-1]['fastloop_modules_imported']}")
    if args.json:
        _results.save(
            args.json,
            "startup",
            median_us=median_us,
            p99_us=p99_us,
            samples=args.repeat,
            fastloop_modules_imported=imported,
            cpu=CPU,
            seconds_per_program=args.seconds,
            programs=rows,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
