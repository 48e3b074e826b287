"""Where auto mode's controller sleeps, and what wakes it, with made-up clocks.

The controller thread itself, asleep and woken in a real process, is tested
in ``test_switchinterval.py``; here, the meeting point alone: that no wake
is lost around a sleep, and what a reported loop iteration reads and when
it wakes the sleeper.
"""

from __future__ import annotations

import asyncio
import types

import pytest
from tornado.ioloop import IOLoop

import fastloop
from fastloop.runtime import dormancy
from fastloop.runtime.dormancy import Dormancy, Readings

MS = 1_000_000
EVERY_NS = 20 * MS
SHARE = 0.1


class Rings:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def test_a_wake_while_it_sleeps_rings_once_and_says_what_woke_it():
    idle, rings = Dormancy(), Rings()
    assert idle.sleep(rings, EVERY_NS, SHARE) and idle.asleep
    idle.wake("thread")
    idle.wake("ioloop")  # awake already: kept for its next tick, no ring
    assert rings.count == 1 and not idle.asleep
    assert idle.awake() == "thread"
    assert idle.poked() and not idle.poked()  # the second wake, taken once


def test_a_wake_just_before_it_sleeps_keeps_it_awake():
    idle, rings = Dormancy(), Rings()
    idle.wake("thread")
    assert not idle.sleep(rings, EVERY_NS, SHARE)
    assert not idle.asleep and rings.count == 0
    assert idle.sleep(rings, EVERY_NS, SHARE)  # the wake was used up


def test_ended_without_a_wake_it_is_awake_and_nothing_woke_it():
    idle, rings = Dormancy(), Rings()
    idle.sleep(rings, EVERY_NS, SHARE)
    assert idle.awake() is None and not idle.asleep  # stop() rang the bell itself
    idle.wake("compute")
    assert rings.count == 0  # the bell is not rung after the sleep


class Clocks:
    """The wall clock, the process's CPU clock and this thread's, made up."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.wall = self.process = self.thread = 0
        self.threads = 2
        monkeypatch.setattr(dormancy, "_clock", lambda: self.wall)
        monkeypatch.setattr(dormancy, "_process_cpu", lambda: self.process)
        monkeypatch.setattr(dormancy, "_thread_cpu", lambda: self.thread)
        monkeypatch.setattr(
            dormancy,
            "threading",
            types.SimpleNamespace(active_count=lambda: self.threads),
        )

    def run(self, ns: int, loop: int = 0, others: int = 0) -> None:
        """``ns`` pass; the loop's thread used ``loop`` of them, the others
        ``others``."""
        self.wall += ns
        self.thread += loop
        self.process += loop + others


@pytest.fixture
def looked(monkeypatch) -> tuple[Clocks, Rings, Readings, Dormancy]:
    """Made-up clocks; asleep; a loop that has looked once (the first look
    of a sleep takes readings and gives no verdict)."""
    clocks, rings, seen, idle = Clocks(monkeypatch), Rings(), Readings(), Dormancy()
    assert idle.sleep(rings, EVERY_NS, SHARE)
    idle.iterated(seen)
    return clocks, rings, seen, idle


def test_an_iteration_wakes_it_once_the_other_threads_compute(looked):
    clocks, rings, seen, idle = looked
    # The loop itself busy, the others idle: nothing to decide.
    for _ in range(5):
        clocks.run(EVERY_NS, loop=EVERY_NS // 2)
        idle.iterated(seen)
    assert rings.count == 0
    # Another thread starts computing: not before the loop looks again ...
    clocks.run(EVERY_NS // 2, others=EVERY_NS // 2)
    idle.iterated(seen)
    assert rings.count == 0
    # ... and at the look, the share of the time since the last one counts.
    clocks.run(EVERY_NS // 2)
    idle.iterated(seen)
    assert rings.count == 1 and idle.awake() == "compute"


def test_threads_that_used_less_than_one_compute_threads_share_wake_nothing(
    looked,
):
    clocks, rings, seen, idle = looked
    clocks.run(10 * EVERY_NS, others=int(SHARE * 10 * EVERY_NS) - 1)
    idle.iterated(seen)
    assert rings.count == 0
    clocks.run(10 * EVERY_NS, others=int(SHARE * 10 * EVERY_NS))
    idle.iterated(seen)
    assert rings.count == 1


def test_readings_of_an_earlier_sleep_or_another_thread_are_a_new_start(
    looked,
):
    clocks, rings, seen, idle = looked
    idle.wake("thread")
    assert idle.awake() == "thread"
    clocks.run(EVERY_NS, others=EVERY_NS)  # computed while it was awake
    assert idle.sleep(rings, EVERY_NS, SHARE)
    idle.iterated(seen)  # readings of the last sleep: not compared
    assert rings.count == 1
    clocks.run(EVERY_NS)
    seen.ident = -1  # as if the loop had run on another thread meanwhile
    clocks.thread -= 5 * EVERY_NS  # ... whose CPU clock reads less
    idle.iterated(seen)
    assert rings.count == 1


def test_an_iteration_that_finds_the_process_back_to_one_thread_wakes_it(
    looked,
):
    clocks, rings, seen, idle = looked
    clocks.threads = 1
    clocks.run(EVERY_NS)
    idle.iterated(seen)
    assert rings.count == 1 and idle.awake() == "alone"


def test_only_loops_with_a_reporting_wrapper_report():
    class Loop:
        def _process_events(self, event_list):
            pass

    loop = Loop()
    assert not dormancy.reports(loop)  # the class's method
    assert not dormancy.reports(object())  # none at all (uvloop's loops)

    def process_events(event_list):
        pass

    loop._process_events = process_events
    assert not dormancy.reports(loop)
    dormancy.reporter(process_events)
    assert dormancy.reports(loop)


def test_add_callbacks_wrapper_reports_its_loops_iterations():
    async def main() -> bool:
        IOLoop.current().add_callback(lambda: None)
        await asyncio.sleep(0)
        return dormancy.reports(asyncio.get_running_loop())

    with fastloop.patched(["add_callback"]):
        assert asyncio.run(main())
    assert not asyncio.run(main())
