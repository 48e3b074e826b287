"""Every patch set a user could pick, on chosen ``fastloop bench`` workloads, in one run.

    python bench/workload_frontier.py --only busy-pingpong,xthread-ping-pong \
        [--seconds S] [--json bench/results/workload_frontier.json]

Per workload, interleaved in rounds until ``--seconds`` (each arm's round
a 0.1 s slice, as ``fastloop bench``): stock, the default set (``FASTLOOP=1``, what ``fastloop bench``
measures), and each patch the workload exercises or the default set holds,
alone; the median of paired ratios of time per operation against
stock, with its 95% interval.  Where ``fastloop bench`` shows a ratio that
moved, this says which patch moves it, and whether more rounds keep it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

import _results
from fastloop import ab
from fastloop.cli._workloads import WORKLOADS, Round, Slice, Workload
from fastloop.patches import RECORDS, registry

SLICE_S = 0.1
DEFAULT_SET = [name for name, _, _, on in RECORDS if on]


def arms(workload: Workload) -> dict[str, list[str] | None]:
    """Arm name -> the patches it installs ([] for stock, None for the default set)."""
    chosen: dict[str, list[str] | None] = {
        "stock": [],
        "FASTLOOP=1": None,
    }
    for name in dict.fromkeys([*workload.exercises, *DEFAULT_SET]):
        chosen[f"{name} alone"] = [name]
    return chosen


def runner(workload: Workload, patches: list[str] | None) -> Callable[[], float]:
    size = Slice(SLICE_S, workload.floor, workload.batch)

    def run() -> float:
        with ab.stock():
            if patches == []:
                done: Round = workload.run(asyncio.run, size)
            else:
                with registry.patched(patches):
                    done = workload.run(asyncio.run, size)
        return done.per_op

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", required=True, help="comma list of workloads")
    parser.add_argument("--seconds", type=float, default=120.0, help="per workload")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results = []
    for name in args.only.split(","):
        workload = WORKLOADS[name]
        chosen = arms(workload)
        per_op = ab.interleave(
            {arm: runner(workload, patches) for arm, patches in chosen.items()},
            rounds=10**6,
            budget_s=args.seconds,
        )
        for arm in list(chosen)[1:]:
            result = ab.paired(per_op["stock"], per_op[arm], name=name, b_label=arm)
            print(result, flush=True)
            results.append(result.to_dict() | {"workload": name, "arm": arm})
    if args.json:
        _results.save(args.json, "workload_frontier", results=results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
