"""fastloop.ab: assertions with a statistical meaning, and adaptive rounds.

Arms return made-up seconds, so each ratio is decided by construction.
"""

from __future__ import annotations

import itertools

import pytest

from fastloop import ab


def test_assert_faster_needs_the_whole_interval_below_one():
    ab.paired([1.0] * 11, [0.9] * 11).assert_faster()
    # Median 0.9, but the interval reaches 1.1: not shown faster.
    straddling = ab.paired([1.0] * 11, [0.8] + [0.9] * 5 + [1.1] * 5)
    assert straddling.ratio == 0.9 and straddling.high == 1.1
    with pytest.raises(
        AssertionError, match=r"reaches 1\.100 >= 1 \(noisy: .*11 rounds"
    ):
        straddling.assert_faster()
    with pytest.raises(AssertionError, match=r"not shown faster.*\[1\.000, 1\.000\]"):
        ab.paired([1.0] * 11, [1.0] * 11).assert_faster()


def test_assert_not_slower_fails_only_when_the_whole_interval_is_above():
    ab.paired([1.0] * 11, [1.04] * 11).assert_not_slower(0.05)
    # Median 1.2 but a wide interval that holds 1: a noisy pass, not a failure.
    wide = ab.paired([1.0] * 11, [0.95] * 3 + [1.2] * 5 + [1.5] * 3)
    assert wide.ratio == 1.2 and wide.low < 1.0 and wide.noisy
    wide.assert_not_slower()
    with pytest.raises(
        AssertionError,
        match=r"slower than stock: the whole 95% interval is above 1\.050: .*"
        r"\[1\.100, 1\.100\]",
    ):
        ab.paired([1.0] * 11, [1.1] * 11).assert_not_slower(0.05)
    with pytest.raises(ValueError, match="tolerance"):
        wide.assert_not_slower(-0.1)


def spread_then(steady: float, spread: list[float]):
    """Arms: A takes 1 s; B takes the ``spread`` values, then ``steady``."""
    b_values = itertools.chain(spread, itertools.repeat(steady))
    return (lambda: 1.0), (lambda: next(b_values))


def test_adaptive_rounds_stop_once_the_interval_is_narrow():
    # 8 scattered rounds, then 0.5 for ever: noisy at 8 and 16 rounds, narrow
    # at 24 (the interval's order statistics 7 and 18 are both 0.5).
    a, b = spread_then(0.5, [0.3, 2.0] * 4)
    result = ab.compare(a, b, rounds=8, warmup=0, max_rounds=40)
    assert len(result.ratios) == 24
    assert (result.ratio, result.low, result.high) == (0.5, 0.5, 0.5)
    assert not result.noisy


def test_adaptive_rounds_stop_at_the_cap_and_say_noisy():
    scattered = itertools.cycle([0.8, 1.25])
    result = ab.compare(
        lambda: 1.0, lambda: next(scattered), rounds=8, warmup=0, max_rounds=20
    )
    assert len(result.ratios) == 20
    assert result.noisy
    with pytest.raises(AssertionError, match="noisy"):
        result.assert_faster()


def test_without_max_rounds_the_round_count_is_fixed():
    a, b = spread_then(0.5, [0.3, 2.0] * 4)
    assert len(ab.compare(a, b, rounds=8, warmup=0).ratios) == 8


def test_added_rounds_keep_alternating_which_arm_goes_first():
    order = []
    values = itertools.cycle([0.8, 1.25])

    def a():
        order.append("a")
        return 1.0

    def b():
        order.append("b")
        return next(values)

    ab.compare(a, b, rounds=3, warmup=0, max_rounds=6)
    firsts = order[::2]
    assert firsts == ["a", "b", "a", "b", "a", "b"]
