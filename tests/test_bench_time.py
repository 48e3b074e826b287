"""``fastloop bench`` sizes rounds by time: slices, floors, the plan, progress.

A substituted clock decides every round here, so each count below holds by
construction: no assertion depends on how fast this machine is.
"""

from __future__ import annotations

import asyncio
import io
import threading

import pytest

from fastloop.cli import bench
from fastloop.cli._plan import Plan, Progress
from fastloop.cli._workloads import WORKLOADS, Slice, onloop_burst, onloop_chain


class Clock:
    """Moves ``step`` seconds at every read; counts the reads; thread-safe."""

    def __init__(self, step: float = 1.0) -> None:
        self.now = 0.0
        self.step = step
        self.reads = 0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            self.reads += 1
            self.now += self.step
            return self.now


@pytest.mark.parametrize("workload", [onloop_burst, onloop_chain])
def test_a_round_stops_at_the_first_batch_past_its_slice(workload):
    clock = Clock(step=1.0)
    # Start at t=1, then one read per batch of 10: t=2, 3, ... the read at
    # t=6 is the first 5 s after the start.
    result = workload(asyncio.run, Slice(5.0, floor=10, batch=10, clock=clock))
    assert result == (5.0, 50)
    assert clock.reads == 6


@pytest.mark.parametrize("workload", [onloop_burst, onloop_chain])
def test_a_slow_arm_does_its_floor_and_reads_no_clock_below_it(workload):
    clock = Clock(step=100.0)  # every batch takes longer than the whole slice
    result = workload(asyncio.run, Slice(1.0, floor=35, batch=10, clock=clock))
    assert result == (100.0, 35)  # batches of 10, 10, 10, then the 5 lacking
    assert clock.reads == 2  # the start, then once the floor was done


def test_the_same_slice_gives_a_slow_arm_fewer_operations_not_more_time():
    fast, slow = Clock(step=1.0), Clock(step=4.0)
    quick = onloop_chain(asyncio.run, Slice(8.0, floor=10, batch=10, clock=fast))
    dragging = onloop_chain(asyncio.run, Slice(8.0, floor=10, batch=10, clock=slow))
    assert quick == (8.0, 80)
    assert dragging == (8.0, 20)
    assert dragging.per_op == 4 * quick.per_op


def test_producers_stop_on_the_slice_and_every_callback_is_counted():
    clock = Clock(step=1.0)
    workload = WORKLOADS["xthread-burst-2"]
    # Each producer has half the floor (2 = one batch), then reads the clock
    # once a batch.  Reads after the start: the 3rd is 3 s later and stops
    # its producer; the other stops at its next read: 4 batches in all,
    # whoever made which read.  The loop's read once all ran is the 6th.
    result = workload.run(asyncio.run, Slice(3.0, floor=4, batch=2, clock=clock))
    assert result == (5.0, 8)
    assert clock.reads == 6


def test_a_fixed_count_is_one_batch_of_exactly_that_many():
    count = Slice.count(37)
    assert (count.seconds, count.floor, count.batch) == (0.0, 37, 37)
    assert onloop_chain(asyncio.run, count).ops == 37
    assert WORKLOADS["echo-64B"].run(asyncio.run, Slice.count(5)).ops == 5


def test_slices_reject_what_cannot_end():
    for bad in ((0.1, 0, 1), (0.1, 1, 0), (-1.0, 1, 1)):
        with pytest.raises(ValueError, match="a slice needs"):
            Slice(*bad)


def test_the_plan_counts_every_arm_of_every_workload():
    plan = bench.make_plan(list(WORKLOADS), loop="asyncio", rounds=21)
    runner, others = bench._runners("asyncio")
    for name, arms in plan.arms:
        workload = WORKLOADS[name]
        assert arms == len(bench._arms(workload, runner, others, workload.slice(0.1)))
    per_round = bench.SLICE_S + bench.SETUP_S
    assert plan.arm_rounds() == sum(arms for _, arms in plan.arms) * 22
    assert plan.seconds() == pytest.approx(plan.arm_rounds() * per_round)
    assert plan.seconds(["onloop-burst"]) == pytest.approx(
        dict(plan.arms)["onloop-burst"] * 22 * per_round
    )


def test_measure_pairs_the_time_per_operation_of_interleaved_rounds():
    plan = bench.make_plan(["onloop-burst"], loop="asyncio", rounds=6)
    results = bench.measure(plan, loop="asyncio", clock=Clock(step=1.0))
    (row,) = results["workloads"]
    # Each round: one batch (the floor), then the first read is past 0.1 s.
    floor = WORKLOADS["onloop-burst"].floor
    assert all(ops == [floor] * 6 for ops in row["ops"].values())
    assert row["per_op_s"]["stock"] == 1.0 / floor
    result = row["patched_vs_stock"]
    assert (result["ratio"], result["low"], result["high"], result["rounds"]) == (
        1.0,
        1.0,
        1.0,
        6,
    )
    assert results["arm_rounds"] == plan.arm_rounds()
    assert results["planned_s"] == round(plan.seconds(), 1)


def plan_of_two() -> Plan:
    return Plan(
        arms=(("onloop-burst", 5), ("echo-64B", 4)),
        rounds=7,
        warmup=1,
        slice_s=0.1,
        setup_s=0.02,
    )


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_duration_is_said_before_the_first_round():
    out = io.StringIO()
    progress = Progress(plan_of_two(), out, tty=False, clock=Ticks())
    progress.begin()
    assert out.getvalue() == (
        "fastloop bench: 2 workloads x 4-5 arms x (7 rounds + 1 warm-up) = 72 "
        "rounds of 0.10 s (+ ~20 ms set-up each): about 9 s planned\n"
    )


def test_progress_in_a_log_is_one_finished_line_per_workload():
    out, ticks = io.StringIO(), Ticks()
    progress = Progress(plan_of_two(), out, tty=False, clock=ticks)
    progress.begin()
    for done in range(1, 8):
        progress.round("onloop-burst", done, 7)
    ticks.now = 10.0
    progress.finished("onloop-burst", "7 rounds")
    for done in range(1, 8):
        progress.round("echo-64B", done, 7)
    ticks.now = 18.0
    progress.finished("echo-64B", "7 rounds")
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.split("\n")
    assert lines[-1] == ""  # every line ends with a newline
    assert lines[1:-1] == [
        # 40 rounds planned at 0.12 s = 4.8 s; took 10 s: the 32 left, scaled.
        "[1/2] onloop-burst: 7 rounds; 10 s elapsed (5 s planned), about 8 s left",
        "[2/2] echo-64B: 7 rounds; 18 s elapsed (9 s planned), about 0 s left",
    ]


def test_progress_on_a_terminal_rewrites_one_line():
    out = io.StringIO()
    progress = Progress(plan_of_two(), out, tty=True, clock=Ticks())
    progress.round("echo-64B", 3, 7)
    assert out.getvalue() == "\r[2/2] echo-64B: round 3/7\x1b[K"
    progress.finished("echo-64B", "7 rounds")
    assert out.getvalue().endswith("\x1b[K\n")
    assert out.getvalue().count("\n") == 1
