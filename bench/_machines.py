"""This machine made into several, for the benchmarks of auto mode's price.

* ``one-core``: the whole process tree on CPU 0 (``taskset``);
* ``two-cores``: the machine as it is;
* ``busy-machine``: both cores, while another process spins on them;
* ``quota``: both cores, under a CPU quota of one CPU (a cgroup v1 ``cpu``
  group, as a container's limit; needs root and the ``cpu`` hierarchy).

``machine(name)`` gives the command prefix that runs a program there;
``verdict`` judges auto against the budget and the best fixed interval.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MACHINES = ("one-core", "two-cores", "busy-machine", "quota")
#: The cgroup v1 group the ``quota`` machine runs in, and its quota.
CGROUP = Path("/sys/fs/cgroup/cpu/fastloop-bench")
QUOTA_CPUS = 1.0
BUDGET = 0.95


@contextlib.contextmanager
def machine(name: str) -> Iterator[list[str]]:
    """The command prefix that runs a program on ``name``, set up and torn down."""
    if name == "one-core":
        yield ["taskset", "-c", "0"]
    elif name == "two-cores":
        yield []
    elif name == "busy-machine":
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            yield []
        finally:
            spinner.kill()
            spinner.wait()
    elif name == "quota":
        CGROUP.mkdir(exist_ok=True)
        period = 100_000
        (CGROUP / "cpu.cfs_period_us").write_text(str(period))
        (CGROUP / "cpu.cfs_quota_us").write_text(str(int(period * QUOTA_CPUS)))
        try:
            # The shell joins the group, then becomes the program: its
            # children (the worker processes) inherit the group.
            join = f'echo $$ > {CGROUP / "cgroup.procs"} && exec "$@"'
            yield ["sh", "-c", join, "sh"]
        finally:
            for pid in (CGROUP / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), 9)
            with contextlib.suppress(OSError):
                CGROUP.rmdir()
    else:
        raise ValueError(f"unknown machine {name!r}; known: {', '.join(MACHINES)}")


def verdict(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Auto against the budget, and against the best fixed interval within it."""

    def compute(arm: str) -> dict[str, Any]:
        return rows[arm].get("compute_per_s_vs_stock") or {"ratio": 1.0, "low": 1.0}

    within = [
        arm for arm in rows if arm.endswith(" us") and compute(arm)["ratio"] >= BUDGET
    ]
    best = min(within, key=lambda arm: rows[arm]["p50_s"], default=None)
    auto = rows.get("auto")
    return {
        "auto_compute": compute("auto") if auto else None,
        "auto_holds_budget": bool(auto) and compute("auto")["ratio"] >= BUDGET,
        "best_fixed_within_budget": best,
        "auto_p50_vs_best_fixed": (
            auto["p50_s"] / rows[best]["p50_s"] if auto and best else None
        ),
    }
