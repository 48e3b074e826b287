"""Another project's test suite under stock and under ``FASTLOOP=1``: outcomes and time.

    python bench/outside_suites.py --cwd DIR [--rounds 3] [--json PATH] -- ARGS...

Runs ``python -m pytest ARGS`` in ``DIR`` (a checkout of the
project's tests at the installed version's tag, which fastloop does not
ship), once per arm per round, the order alternating round by round (A B,
B A, ...). Reports, test by test, every outcome that differs between the
arms of a round, and the suite's wall time as the median of per-round
ratios with its interval. Suites use every core, as in their own CI: run
nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import _results
from _arms import without_fastloop
from fastloop import ab

ARMS = ("stock", "FASTLOOP=1")


def outcomes(junit: Path) -> dict[str, tuple[str, float]]:
    """Test id -> (passed, failed or skipped; seconds), from pytest's JUnit XML."""
    found = {}
    for case in ElementTree.parse(junit).iter("testcase"):
        kinds = {child.tag for child in case}
        outcome = (
            "failed"
            if kinds & {"failure", "error"}
            else "skipped"
            if "skipped" in kinds
            else "passed"
        )
        test = f"{case.get('classname')}::{case.get('name')}"
        found[test] = (outcome, float(case.get("time") or 0.0))
    return found


def one_run(cwd: Path, pytest_args: list[str], arm: str) -> dict[str, object]:
    env = without_fastloop(dict(os.environ))
    if arm != "stock":
        env["FASTLOOP"] = arm.partition("=")[2]
    with tempfile.TemporaryDirectory() as scratch:
        junit = Path(scratch) / "junit.xml"
        start = time.perf_counter()
        run = subprocess.run(
            [sys.executable, "-m", "pytest", f"--junitxml={junit}", *pytest_args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - start
        found = outcomes(junit)
    lines = run.stdout.strip().splitlines()
    return {
        "arm": arm,
        "wall_s": wall,
        "summary": lines[-1] if lines else "",
        "outcomes": found,
    }


def slower_modules(runs: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """Test modules by the median over rounds of FASTLOOP=1's extra seconds."""
    extra: dict[str, list[float]] = {}
    for index in sorted({run["round"] for run in runs}):
        pair = {run["arm"]: run["outcomes"] for run in runs if run["round"] == index}
        sums: dict[str, float] = {}
        for arm, sign in zip(ARMS, (-1.0, 1.0), strict=True):
            found = pair[arm]
            assert isinstance(found, dict)
            for test, (_, seconds) in found.items():
                module = test.partition("::")[0]
                sums[module] = sums.get(module, 0.0) + sign * seconds
        for module, seconds in sums.items():
            extra.setdefault(module, []).append(seconds)
    medians = {module: statistics.median(values) for module, values in extra.items()}
    return sorted(medians.items(), key=lambda item: -item[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cwd", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args(argv)

    runs: list[dict[str, object]] = []
    ratios = []
    differences: dict[str, list[list[object]]] = {}
    for index in range(args.rounds):
        order = ARMS if index % 2 == 0 else ARMS[::-1]
        pair = {arm: one_run(args.cwd, args.pytest_args, arm) for arm in order}
        for arm in order:
            run = pair[arm]
            runs.append({"round": index, **run})
            print(f"round {index} {arm}: {run['wall_s']:.1f} s, {run['summary']}")
        stock, fast = (pair[arm]["outcomes"] for arm in ARMS)
        assert isinstance(stock, dict) and isinstance(fast, dict)
        for test in sorted(set(stock) | set(fast)):
            was, now = (found.get(test, ("absent", 0.0))[0] for found in (stock, fast))
            if was != now:
                differences.setdefault(test, []).append([index, was, now])
        walls = [pair[arm]["wall_s"] for arm in ARMS]
        assert all(isinstance(wall, float) for wall in walls)
        ratios.append(float(walls[1]) / float(walls[0]))  # type: ignore[arg-type]
    ratio, low, high = ab.median_interval(ratios)
    print(
        f"wall time FASTLOOP=1/stock: {ratio:.3f} [{low:.3f}, {high:.3f}] over "
        f"{args.rounds} rounds (per round: {', '.join(f'{r:.3f}' for r in ratios)})"
    )
    print(f"outcomes that differ: {differences or 'none'}")
    print("where the time went, FASTLOOP=1 minus stock, median over rounds:")
    for module, seconds in slower_modules(runs)[:5]:
        print(f"  {module}: {seconds:+.2f} s")
    if args.json:
        _results.save(
            args.json,
            "outside_suites",
            cwd=str(args.cwd),
            pytest_args=args.pytest_args,
            rounds=args.rounds,
            ratio=ratio,
            low=low,
            high=high,
            ratios=ratios,
            differences=differences,
            slower_modules=slower_modules(runs),
            runs=[{k: v for k, v in run.items() if k != "outcomes"} for run in runs],
            outcomes={
                arm: next(run["outcomes"] for run in runs if run["arm"] == arm)
                for arm in ARMS
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
