"""Auto mode's decisions, driven by made-up samples and a made-up clock.

Each test feeds ``Policy.step`` the samples a situation would give the
controller thread and asserts the intervals it chooses and when it lets go;
how fast the real thing reacts, and what it buys, is for the benchmarks.
"""

from __future__ import annotations

import pytest

from fastloop.patches import _switch_policy as policy
from fastloop.patches._switch_policy import Policy, Sample
from fastloop.telemetry.schema_gil import INTERVALS_US

MS = 1_000_000
FOUND_US = 5000.0


class Clock:
    """Ticks of the length the policy asks for."""

    def __init__(self, rules: Policy) -> None:
        self.rules = rules
        self.now = 0

    def feed(
        self,
        wait_ns: int,
        competitors: int,
        loops: int = 1,
        cpus: int = 2,
        ticks=1,
        wakeable=False,
    ) -> float:
        for _ in range(ticks):
            tick = self.rules.tick_ns()
            assert tick is not None, "asleep: nothing ticks until it is woken"
            self.now += tick
            known = competitors if self.rules.wants_competitors() else -1
            held = self.rules.step(
                Sample(self.now, wait_ns, known, loops, cpus, wakeable)
            )
        return held


def engaged_with(competitors: int, cpus: int = 2, budget: float = 0.03) -> Clock:
    rules = Policy(FOUND_US, budget)
    clock = Clock(rules)
    clock.feed(5 * MS, competitors, cpus=cpus, ticks=policy.ENGAGE_TICKS + 1)
    assert rules.engaged
    return clock


def test_the_ladder_is_the_one_the_stats_count_time_at():
    assert policy.LADDER_US == INTERVALS_US


def test_nothing_changes_while_nothing_waits():
    rules = Policy(FOUND_US, 0.03)
    clock = Clock(rules)
    assert clock.feed(90_000, competitors=1, ticks=100) == FOUND_US
    assert not rules.engaged and rules.engagements == 0
    assert rules.tick_ns() == policy.SLOW_TICK_NS
    assert not rules.wants_competitors()  # calm: no thread clocks read


def test_waits_beside_one_compute_thread_engage_the_shortest_interval():
    rules = Policy(FOUND_US, 0.03)
    clock = Clock(rules)
    assert clock.feed(5 * MS, competitors=1, ticks=policy.ENGAGE_TICKS - 1) == FOUND_US
    assert not rules.engaged  # not on the first long waits alone
    held = clock.feed(5 * MS, competitors=1, ticks=2)
    assert held == policy.LADDER_US[0] and rules.engaged
    assert rules.engagements == 1 and rules.cost == 0.0  # one thread: no hand-overs
    assert rules.tick_ns() == policy.FAST_TICK_NS


def test_one_short_wait_between_long_ones_restarts_the_evidence():
    rules = Policy(FOUND_US, 0.03)
    clock = Clock(rules)
    for _ in range(5):
        clock.feed(5 * MS, competitors=1, ticks=policy.ENGAGE_TICKS - 1)
        clock.feed(100_000, competitors=1)
    assert not rules.engaged


@pytest.mark.parametrize(
    ("competitors", "cpus", "budget", "interval"),
    [
        (2, 2, 0.05, 1000),  # threads fit the CPUs: 14% at 100 us
        (2, 2, 0.07, 500),
        (2, 2, 0.15, 100),
        (2, 4, 0.08, 500),
        (3, 2, 0.05, 2000),  # more threads than CPUs: 16% at 100 us
        (4, 2, 0.05, 2000),
        (4, 2, 0.06, 1000),  # a larger budget buys a shorter interval
        (4, 2, 0.1, 500),
        (4, 2, 0.0, 2000),  # no budget: the longest rung
        (2, 2, 0.0, 2000),
    ],
)
def test_compute_threads_get_the_shortest_interval_within_the_budget(
    competitors, cpus, budget, interval
):
    clock = engaged_with(competitors, cpus, budget)
    assert clock.rules.interval_us == interval
    expected = policy.cost(interval, competitors, cpus)
    assert clock.rules.cost == pytest.approx(expected)
    assert expected <= budget or interval == policy.LADDER_US[-1]


@pytest.mark.parametrize("competitors", [2, 4, 8])
def test_threads_beyond_one_free_cpu_get_the_longer_interval(competitors):
    """One CPU, by affinity, quota or a neighbour's use, prices hand-overs as
    beyond the CPUs: in doubt, the budget's side."""
    clock = engaged_with(competitors, cpus=1, budget=0.05)
    assert clock.rules.interval_us == 2000
    assert clock.rules.cost == pytest.approx(policy.cost(2000, competitors, 1))
    assert clock.rules.cost > policy.cost(2000, competitors, competitors)
    assert "more than the 1 CPU free" in clock.rules.why


def test_a_cpu_a_neighbour_takes_lengthens_the_interval_at_once():
    clock = engaged_with(2, cpus=2, budget=0.05)
    fitting = clock.rules.interval_us
    assert clock.feed(5 * MS, competitors=2, cpus=1) > fitting
    assert clock.feed(5 * MS, competitors=2, cpus=2, ticks=policy.SHORTEN_TICKS) == (
        fitting
    )


def test_more_compute_threads_lengthen_at_once_fewer_shorten_only_when_agreed():
    clock = engaged_with(1)
    longer = policy.choose(4, 2, 0.03)
    assert longer > policy.LADDER_US[0]
    assert clock.feed(5 * MS, competitors=4) == longer  # at once: the cost grows
    held = clock.feed(1 * MS, competitors=1, ticks=policy.SHORTEN_TICKS - 1)
    assert held == longer  # a thread that computes on and off does not flap it
    assert clock.feed(1 * MS, competitors=4) == longer
    assert clock.feed(1 * MS, competitors=1, ticks=policy.SHORTEN_TICKS) == 50


def test_a_held_interval_settles_to_slow_ticks_and_any_change_hurries_them():
    """Settled, a tick costs a compute thread a GIL hand-over for nothing."""
    clock = Clock(Policy(FOUND_US, 0.03))
    clock.feed(5 * MS, competitors=1, ticks=policy.ENGAGE_TICKS)
    assert clock.rules.engaged
    clock.feed(1 * MS, competitors=1, ticks=policy.SETTLE_TICKS - 1)
    assert clock.rules.tick_ns() == policy.FAST_TICK_NS  # not yet
    clock.feed(1 * MS, competitors=1)
    assert clock.rules.tick_ns() == policy.SLOW_TICK_NS
    assert clock.feed(1 * MS, competitors=2) > policy.LADDER_US[0]  # a newcomer
    assert clock.rules.tick_ns() == policy.FAST_TICK_NS
    clock.feed(1 * MS, competitors=2, ticks=policy.SETTLE_TICKS)
    assert clock.rules.tick_ns() == policy.SLOW_TICK_NS
    clock.feed(1 * MS, competitors=1)  # fewer: a shorter interval pending
    assert clock.rules.tick_ns() == policy.FAST_TICK_NS
    clock.feed(1 * MS, competitors=2, ticks=policy.SETTLE_TICKS)
    assert clock.rules.tick_ns() == policy.SLOW_TICK_NS
    clock.feed(100_000, competitors=0)  # a pause: is it the end?
    assert clock.rules.tick_ns() == policy.FAST_TICK_NS


def test_it_lets_go_when_the_compute_stops():
    clock = engaged_with(1)
    held = clock.feed(100_000, competitors=0, ticks=policy.RELEASE_TICKS - 1)
    assert held == policy.LADDER_US[0]  # a pause is not an end
    assert clock.feed(100_000, competitors=0) == FOUND_US
    assert not clock.rules.engaged and clock.rules.cost == 0.0
    assert "compute stopped" in clock.rules.why


def test_it_lets_go_when_no_loop_runs():
    clock = engaged_with(1)
    assert clock.feed(5 * MS, 1, loops=0, ticks=policy.RELEASE_TICKS) == FOUND_US
    assert "no event loop" in clock.rules.why


def test_waits_without_a_loop_or_a_compute_thread_change_nothing():
    for loops, competitors in ((0, 1), (1, 0)):
        rules = Policy(FOUND_US, 0.03)
        assert Clock(rules).feed(5 * MS, competitors, loops=loops, ticks=20) == FOUND_US
        assert not rules.engaged


def until_the_check(clock: Clock, wait_ns: int, competitors: int) -> float:
    """Ticks until the periodic check begins (on time): its interval."""
    due = clock.now + policy.VALIDATE_EVERY_NS + policy.SLOW_TICK_NS
    held = clock.feed(wait_ns, competitors)
    while clock.rules.state != policy.VALIDATING:
        held = clock.feed(wait_ns, competitors)
        assert clock.now <= due
    return held


def test_the_periodic_check_keeps_it_while_the_gil_is_still_held():
    clock = engaged_with(1)
    assert until_the_check(clock, 300_000, competitors=1) == policy.VALIDATE_US
    assert clock.rules.tick_ns() == policy.FAST_TICK_NS  # settled or not before
    held = clock.feed(1_100_000, competitors=1, ticks=policy.VALIDATE_TICKS)
    assert held == policy.LADDER_US[0] and clock.rules.engaged  # still contended


def test_the_periodic_check_lets_go_when_nothing_holds_the_gil():
    """Threads busy in C code that releases the GIL use CPU but make nobody wait."""
    clock = engaged_with(2)
    until_the_check(clock, 120_000, competitors=2)
    assert clock.feed(120_000, competitors=2, ticks=policy.VALIDATE_TICKS) == FOUND_US
    assert not clock.rules.engaged and "nothing held the GIL" in clock.rules.why
    # ... and it engages again once waits come back.
    clock.feed(5 * MS, competitors=1, ticks=policy.ENGAGE_TICKS + 1)
    assert clock.rules.engaged and clock.rules.engagements == 2


def test_the_cost_model():
    assert policy.cost(50, 1, 2) == 0.0
    assert policy.cost(100, 2, 2) == pytest.approx(0.14)
    assert policy.cost(400, 4, 2) == pytest.approx(0.08)  # 1/sqrt(interval)
    assert policy.choose(0, 2, 0.03) == 50


def test_threads_that_compute_in_bursts_are_not_competitors():
    assert policy.competing([]) == 0
    assert policy.competing([0.9]) == 1
    assert policy.competing([0.47, 0.41]) == 2  # two task threads
    assert policy.competing([0.24, 0.2, 0.26, 0.22]) == 4
    # dask's actor thread serving calls back to back beside one task.
    assert policy.competing([0.65, 0.28]) == 1
    assert policy.competing([0.28, 0.65]) == 1
    part = policy.COMPETING_PART
    assert policy.competing([0.6, 0.6 * part]) == 2
    assert policy.competing([0.6, 0.6 * part - 0.01]) == 1


def test_threads_busy_without_the_gil_are_no_yardstick():
    """Two Python threads beside two busy in C code that releases the GIL
    (numpy): measured against a whole CPU, they would not count."""
    assert policy.competing([1.0, 0.45, 0.98, 0.45]) == 4
    assert policy.competing([0.95, 0.2]) == 2  # could not have shared one GIL


# --- when not to look: asleep until woken ------------------------------------

CALM_NS = 90_000


def test_it_sleeps_after_ticks_with_nothing_to_decide_where_it_can_be_woken():
    rules = Policy(FOUND_US, 0.03)
    clock = Clock(rules)
    clock.feed(CALM_NS, 0, wakeable=True, ticks=policy.DORMANT_TICKS - 1)
    assert rules.tick_ns() == policy.SLOW_TICK_NS  # not yet
    clock.feed(CALM_NS, 0, wakeable=True)
    assert rules.tick_ns() is None
    assert rules.interval_us == FOUND_US and not rules.engaged


def test_where_nothing_would_wake_it_it_never_sleeps():
    rules = Policy(FOUND_US, 0.03)
    Clock(rules).feed(CALM_NS, 0, wakeable=False, ticks=10 * policy.DORMANT_TICKS)
    assert rules.tick_ns() == policy.SLOW_TICK_NS


@pytest.mark.parametrize("interruption", ["unwakeable", "late"])
def test_a_tick_with_something_to_decide_starts_the_count_again(interruption):
    rules = Policy(FOUND_US, 0.03)
    clock = Clock(rules)
    for _ in range(3):
        clock.feed(CALM_NS, 1, wakeable=True, ticks=policy.DORMANT_TICKS - 1)
        if interruption == "late":  # a thread holds the GIL beside a loop
            clock.feed(5 * MS, 1, wakeable=True)
        else:  # a thread started, or a loop that cannot wake it runs
            clock.feed(CALM_NS, 1, wakeable=False)
    assert rules.tick_ns() is not None
    clock.feed(CALM_NS, 1, wakeable=True, ticks=policy.DORMANT_TICKS)
    assert rules.tick_ns() is None


def test_engaged_it_never_sleeps():
    clock = engaged_with(1)
    clock.feed(1 * MS, 1, wakeable=True, ticks=10 * policy.DORMANT_TICKS)
    assert clock.rules.engaged and clock.rules.tick_ns() is not None


def test_waits_with_no_loop_to_serve_are_nothing_to_decide():
    rules = Policy(FOUND_US, 0.03)
    clock = Clock(rules)
    clock.feed(5 * MS, 1, loops=0, wakeable=True, ticks=policy.DORMANT_TICKS)
    assert rules.state == policy.WATCHING
    assert rules.tick_ns() is None


def test_woken_it_looks_at_once_from_calm_and_engages_as_before():
    rules = Policy(FOUND_US, 0.03)
    clock = Clock(rules)
    clock.feed(5 * MS, 1, loops=0, wakeable=True, ticks=policy.DORMANT_TICKS)
    assert rules.tick_ns() is None
    rules.woke()
    assert rules.state == policy.CALM
    assert rules.tick_ns() == policy.FAST_TICK_NS  # the first tick: a fast one
    clock.feed(CALM_NS, 0, wakeable=True)
    assert rules.tick_ns() == policy.SLOW_TICK_NS  # calm again: slow
    rules.woke()
    # The sleep counted nothing: the evidence to engage starts afresh.
    clock.feed(5 * MS, 1, wakeable=True, ticks=policy.ENGAGE_TICKS - 1)
    assert not rules.engaged
    clock.feed(5 * MS, 1, wakeable=True)
    assert rules.engaged and rules.engagements == 1
