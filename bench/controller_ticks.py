"""What auto mode's controller ticks cost a compute thread, in one process.

    python bench/controller_ticks.py [--seconds S] [--json PATH]

A Tornado loop thread serves "1 ms calls" (an executor thread computes for
1 ms of its CPU time, then the loop sleeps 50 ms: about 19 calls a second)
while a thread counts in pure Python, with the patches of the default set
installed.  Each slice of a second holds one switch-interval mode, set by
``configure()``: 50 us fixed, auto as it ships, auto whose ticks never
settle (every 20 ms while engaged, as before settling), and auto ticking
every 100 ms throughout.  Auto holds 50 us here (one compute thread), so
the arms differ only in how often the controller wakes; each wake-up makes
the counting thread hand the GIL over and wait to get it back.  Measured:
the counting rate of each auto arm against 50 us fixed, paired per round
(rounds rotate the order), and the calls' p50.  Rounds are sized so that
the run, its warm-up round included, lasts about ``--seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import _results
import fastloop
from fastloop import ab
from fastloop.patches import _switch_policy as policy

SLICE_S = 1.0
#: Auto engages in ~0.15 s (a late calm tick, then two late 20 ms ones) and
#: settles 10 ticks later (0.2 s); the 100 ms arm takes ~0.3 s to engage.
SETTLE_S = 0.6
CALLS_PER_S = 20


class Workload:
    """The counting thread and the loop thread with its calls, for the whole run."""

    def __init__(self) -> None:
        self.counted = 0
        self.trips: list[float] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._count, daemon=True),
            threading.Thread(target=self._serve, daemon=True),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _count(self) -> None:
        n = 0
        while not self._stop.is_set():
            for _ in range(200):
                n += 1
            self.counted = n

    def _serve(self) -> None:
        from tornado.ioloop import IOLoop

        async def calls() -> None:
            loop = asyncio.get_running_loop()
            while not self._stop.is_set():
                began = time.perf_counter()
                await loop.run_in_executor(None, one_ms_of_cpu)
                self.trips.append(time.perf_counter() - began)
                await asyncio.sleep(1 / CALLS_PER_S)

        IOLoop().run_sync(calls)

    def slice(self, interval_us: float | str) -> tuple[float, float, float]:
        """The counting rate, the calls' p50 and the interval held at the end
        (us) of one slice at ``interval_us`` (a number, or "auto")."""
        fastloop.configure(switch_interval_us=5000)  # no controller runs
        fastloop.configure(switch_interval_us=interval_us)
        time.sleep(SETTLE_S)
        self.trips.clear()
        counted, began = self.counted, time.perf_counter()
        time.sleep(SLICE_S)
        rate = (self.counted - counted) / (time.perf_counter() - began)
        p50 = statistics.median(self.trips or [float("nan")])
        return rate, p50, sys.getswitchinterval() * 1e6


def one_ms_of_cpu() -> None:
    end = time.thread_time() + 0.001
    while time.thread_time() < end:
        pass


@contextmanager
def ticks(settle: int, fast_ns: int) -> Iterator[None]:
    """The policy's tick constants, for one slice."""
    kept = policy.SETTLE_TICKS, policy.FAST_TICK_NS
    policy.SETTLE_TICKS, policy.FAST_TICK_NS = settle, fast_ns
    try:
        yield
    finally:
        policy.SETTLE_TICKS, policy.FAST_TICK_NS = kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=480.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    fastloop.install()
    work = Workload()
    work.start()
    modes: dict[str, tuple[int, int]] = {
        "auto": (policy.SETTLE_TICKS, policy.FAST_TICK_NS),
        "auto, never settled": (10**9, policy.FAST_TICK_NS),
        "auto, 100 ms ticks": (10**9, policy.SLOW_TICK_NS),
    }

    def fixed() -> tuple[float, float, float]:
        return work.slice(50)

    def auto_arm(settle: int, fast_ns: int) -> Callable[[], tuple[float, float, float]]:
        def arm() -> tuple[float, float, float]:
            with ticks(settle, fast_ns):
                return work.slice("auto")

        return arm

    arms = {"50 us": fixed} | {name: auto_arm(*m) for name, m in modes.items()}
    per_round = len(arms) * (SLICE_S + SETTLE_S)
    rounds = max(6, int(args.seconds / per_round) - 1)  # and one warm-up round
    print(
        f"{len(arms)} arms x {rounds} rounds, about {(rounds + 1) * per_round:.0f} s",
        flush=True,
    )
    got = ab.interleave(arms, rounds=rounds, warmup=1)
    work.stop()
    base = [rate for rate, _, _ in got["50 us"]]
    results = []
    for name in list(arms)[1:]:
        rates = [rate for rate, _, _ in got[name]]
        p50 = statistics.median(trip for _, trip, _ in got[name])
        held = statistics.median(us for _, _, us in got[name])
        result = ab.paired(base, rates, name="compute", a_label="50 us", b_label=name)
        print(
            f"{name:>20}: compute/50 us {result.ratio:.3f} "
            f"[{result.low:.3f}, {result.high:.3f}]  call p50 {p50 * 1e3:.2f} ms  "
            f"held {held:g} us",
            flush=True,
        )
        results.append(result.to_dict() | {"call_p50_s": p50, "held_us": held})
    if args.json:
        _results.save(args.json, "controller_ticks", rounds=rounds, results=results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
