"""What an idle process burns, read from ``/proc``: CPU time, and wake-ups
thread by thread (``dask_idle.py``, ``idle_apps.py``).

A thread's wake-ups are its voluntary context switches: a thread that
sleeps and wakes switches once; its CPU time is the kernel's count of the
nanoseconds it ran (``schedstat``), exact where ``/proc/PID/stat``'s user
and system times are sampled at each clock tick (10 ms here: a window of
an idle process reads a few ticks).  fastloop's own threads are told by their
OS names (``OURS``: auto mode's controller names its thread so; from
CPython 3.14 threading names the watchdog's and the profiler's too).  A
thread that ends during a window is not counted.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

#: The start of the OS name of each of fastloop's threads.
OURS = "fastloop"


def thread_cpu_ns(pid: int) -> dict[int, int]:
    """Each live thread of ``pid``: the nanoseconds it has run so far."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found[int(task.name)] = int((task / "schedstat").read_text().split()[0])
        except OSError:  # the thread ended meanwhile
            continue
    return found


def thread_wakeups(pid: int) -> dict[int, tuple[str, int]]:
    """Each live thread of ``pid``: its OS name and voluntary context
    switches so far."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        switches = int(fields["voluntary_ctxt_switches"])
        found[int(task.name)] = (fields["Name"].strip(), switches)
    return found


#: Per thread: CPU nanoseconds; OS name and voluntary context switches.
Reading = tuple[dict[int, int], dict[int, tuple[str, int]]]


def reading(pids: dict[str, int]) -> dict[str, Reading]:
    return {
        name: (thread_cpu_ns(pid), thread_wakeups(pid)) for name, pid in pids.items()
    }


def ours_per_s(before: Reading, after: Reading, window: float) -> dict[str, float]:
    """Wake-ups a second of fastloop's threads, by OS name (summed over the
    threads of one name: a controller that ended and started again)."""
    rates: dict[str, float] = {}
    for tid, (name, switches) in after[1].items():
        if name.startswith(OURS):
            woke = switches - before[1].get(tid, (name, 0))[1]
            rates[name] = rates.get(name, 0.0) + woke / window
    return rates


def ours_median(runs: list[dict[str, float]]) -> dict[str, float]:
    """Per thread name, the median over runs (0 in a run without it)."""
    names = sorted({name for run in runs for name in run})
    return {
        name: statistics.median(run.get(name, 0.0) for run in runs) for name in names
    }


def per_process(before: Reading, after: Reading, window: float) -> dict[str, Any]:
    """One process's window: CPU as a percentage of one core, wake-ups a
    second of all its threads, and those of fastloop's threads by name."""
    ran_ns = sum(ns - before[0].get(tid, 0) for tid, ns in after[0].items())
    return {
        "cpu_percent": 100 * ran_ns / 1e9 / window,
        "wakeups_per_s": (
            sum(switches for _, switches in after[1].values())
            - sum(switches for _, switches in before[1].values())
        )
        / window,
        "fastloop_wakeups_per_s": ours_per_s(before, after, window),
    }
