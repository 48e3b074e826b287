"""Interleaved A/B measurement: the median of paired ratios, with an interval.

On a shared, noisy machine absolute times drift by tens of percent between
minutes; the ratio of two runs taken back to back drifts far less.  So each
round runs both arms, alternating which goes first (A B, B A, A B, ...),
and the figure reported is the median of the per-round ratios B/A, with a
distribution-free 95% interval from the binomial order statistics (the
sign-test interval: no assumption that ratios are normal or symmetric).

    from fastloop import ab

    def my_round() -> float:          # one round of your workload, timed inside
        start = time.perf_counter()
        ...
        return time.perf_counter() - start

    result = ab.patched_vs_stock(my_round, rounds=21)
    print(result)                     # workload: patched/stock = 0.31 [0.29, 0.33] ...
    result.assert_ratio_below(1.0)    # in a test, where you choose to
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

from fastloop.patches import registry

#: An arm runs one round of a workload and returns the seconds it measured,
#: so that set-up and tear-down stay outside the timed part.
Arm = Callable[[], float]
#: What an arm of ``interleave`` returns: seconds, or a whole run's figures.
T = TypeVar("T")

#: An interval wider than this, relative to the median, flags the result noisy.
NOISY_WIDTH = 0.10


@dataclass(frozen=True)
class Result:
    """One A/B comparison; ``ratio`` < 1 means B took less time than A."""

    name: str
    a_label: str
    b_label: str
    a_times: tuple[float, ...]
    b_times: tuple[float, ...]
    ratios: tuple[float, ...]
    ratio: float
    low: float
    high: float

    @property
    def noisy(self) -> bool:
        """The 95% interval is wider than ``NOISY_WIDTH`` of the median."""
        return (self.high - self.low) > NOISY_WIDTH * self.ratio

    @property
    def a_median(self) -> float:
        return statistics.median(self.a_times)

    @property
    def b_median(self) -> float:
        return statistics.median(self.b_times)

    def assert_ratio_below(self, limit: float, *, conservative: bool = False) -> None:
        """For tests: fail unless the median ratio (or, conservative, the whole
        95% interval) is below ``limit``.  The message carries the interval."""
        value = self.high if conservative else self.ratio
        if not value < limit:
            which = (
                "upper bound of the 95% interval" if conservative else "median ratio"
            )
            raise AssertionError(f"{which} {value:.3f} is not below {limit}: {self}")

    def assert_faster(self) -> None:
        """Pass only when the whole 95% interval is below 1: B is faster than A
        with 95% confidence, not merely on the median of this run."""
        if not self.high < 1.0:
            raise AssertionError(
                f"{self.b_label} not shown faster than {self.a_label}: the 95% "
                f"interval reaches {self.high:.3f} >= 1{self._noise_note()}: {self}"
            )

    def assert_not_slower(self, tolerance: float = 0.0) -> None:
        """Fail only when the whole 95% interval is above ``1 + tolerance``: B
        is slower than that with 95% confidence.  A wide interval passes."""
        if tolerance < 0:
            raise ValueError("tolerance must be >= 0")
        if self.low > 1.0 + tolerance:
            raise AssertionError(
                f"{self.b_label} slower than {self.a_label}: the whole 95% interval "
                f"is above {1.0 + tolerance:.3f}: {self}"
            )

    def _noise_note(self) -> str:
        if not self.noisy:
            return ""
        return (
            f" (noisy: the interval is wider than {NOISY_WIDTH:.0%} of the median "
            f"after {len(self.ratios)} rounds, too wide to tell; rerun with more "
            "rounds or on a quieter machine)"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "a": self.a_label,
            "b": self.b_label,
            "a_median_s": self.a_median,
            "b_median_s": self.b_median,
            "ratio": self.ratio,
            "low": self.low,
            "high": self.high,
            "noisy": self.noisy,
            "rounds": len(self.ratios),
            "a_times_s": list(self.a_times),
            "b_times_s": list(self.b_times),
        }

    def __str__(self) -> str:
        flag = "  (noisy: wide interval)" if self.noisy else ""
        return (
            f"{self.name}: {self.b_label}/{self.a_label} = {self.ratio:.3f} "
            f"[{self.low:.3f}, {self.high:.3f}] over {len(self.ratios)} rounds{flag}"
        )


def median_interval(
    values: Iterable[float], confidence: float = 0.95
) -> tuple[float, float, float]:
    """Median and distribution-free interval: order statistics k and n+1-k.

    k is the largest rank with P(Binomial(n, 1/2) < k) <= (1 - confidence)/2,
    so the interval covers the true median with at least ``confidence``.
    With fewer than 6 values no such k exists and the range is returned.
    """
    data = sorted(values)
    n = len(data)
    if n == 0:
        raise ValueError("no values")
    # Exact integers: 2.0**n overflows a float past n = 1023.
    tail = Fraction(1.0 - confidence) / 2 * 2**n
    cumulative = 0
    count = 1  # comb(n, j), updated in place
    k = 0
    for j in range(n):
        cumulative += count
        if cumulative > tail:
            break
        k = j + 1
        count = count * (n - j) // (j + 1)
    if k == 0:
        return statistics.median(data), data[0], data[-1]
    return statistics.median(data), data[k - 1], data[n - k]


def balanced_orders(k: int) -> list[list[int]]:
    """Orders of ``k`` arms in which each arm runs right after every other
    equally often (a Williams design: ``k`` orders, ``2k`` for odd ``k``).

    A round can leave the machine in a state the next one pays for (a round
    with threads contending for the GIL right after one without runs several
    times slower: ``docs/design.md#the-order-of-the-arms``); rotating one
    order would put the same arm after it every time.
    """
    if k <= 2:
        return [list(range(k)), list(range(k))[::-1]] if k == 2 else [[0]] * (k or 1)
    first, low, high = [0], 1, k - 1
    while len(first) < k:
        first.append(low)
        low += 1
        if len(first) < k:
            first.append(high)
            high -= 1
    orders = [[(arm + shift) % k for arm in first] for shift in range(k)]
    return orders + [order[::-1] for order in orders] if k % 2 else orders


def interleave(
    arms: Mapping[str, Callable[[], T]],
    *,
    rounds: int = 21,
    warmup: int = 1,
    budget_s: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    start: int = 0,
) -> dict[str, list[T]]:
    """Run every arm once per round, in balanced orders; what each returned.

    With two arms the order alternates A B, B A, ...; with k arms the rounds
    cycle through ``balanced_orders(k)``.  ``budget_s`` stops early (after at least 6
    rounds, the fewest that give a 95% interval) once that much time passed.
    ``start`` is the index of the first round, so that a run continued with
    more rounds keeps alternating.
    """
    if rounds < 1:
        raise ValueError("rounds must be >= 1")
    names = list(arms)
    for _ in range(warmup):
        for name in names:
            arms[name]()
    times: dict[str, list[T]] = {name: [] for name in names}
    orders = balanced_orders(len(names))
    started = time.perf_counter()
    for index in range(rounds):
        for arm in orders[(start + index) % len(orders)]:
            times[names[arm]].append(arms[names[arm]]())
        if progress is not None:
            progress(index + 1, rounds)
        over_budget = budget_s is not None and time.perf_counter() - started > budget_s
        if over_budget and index + 1 >= 6:
            break
    return times


def paired(
    a_times: Sequence[float],
    b_times: Sequence[float],
    *,
    name: str = "workload",
    a_label: str = "stock",
    b_label: str = "patched",
) -> Result:
    """The median of per-round ratios B/A, with its interval."""
    ratios = tuple(tb / ta for ta, tb in zip(a_times, b_times, strict=True))
    ratio, low, high = median_interval(ratios)
    return Result(
        name, a_label, b_label, tuple(a_times), tuple(b_times), ratios, ratio, low, high
    )


def compare(
    a: Arm,
    b: Arm,
    *,
    rounds: int = 21,
    warmup: int = 1,
    name: str = "workload",
    a_label: str = "stock",
    b_label: str = "patched",
    budget_s: float | None = None,
    max_rounds: int | None = None,
) -> Result:
    """Run ``a`` and ``b`` interleaved (A B, B A, ...) and pair their rounds.

    With ``max_rounds`` the run is adaptive: while the result is noisy (its
    interval wider than ``NOISY_WIDTH`` of the median) it runs up to
    ``rounds`` more, still alternating, until the interval narrows or
    ``max_rounds`` rounds have run.
    """
    arms = {"a": a, "b": b}
    times = interleave(arms, rounds=rounds, warmup=warmup, budget_s=budget_s)
    result = paired(times["a"], times["b"], name=name, a_label=a_label, b_label=b_label)
    cap = max_rounds or 0
    while result.noisy and len(result.ratios) < cap:
        done = len(result.ratios)
        more = interleave(arms, rounds=min(rounds, cap - done), warmup=0, start=done)
        times["a"] += more["a"]
        times["b"] += more["b"]
        result = paired(
            times["a"], times["b"], name=name, a_label=a_label, b_label=b_label
        )
    return result


@contextlib.contextmanager
def stock() -> Iterator[None]:
    """Run a block with every fastloop patch removed, then put them back."""
    with registry.suspended():
        yield


def patched_vs_stock(
    workload: Arm,
    patches: Iterable[str] | None = None,
    *,
    rounds: int = 21,
    warmup: int = 1,
    name: str = "workload",
    max_rounds: int | None = None,
) -> Result:
    """A/B one in-process workload: stock Tornado against ``patches`` installed.

    ``max_rounds`` makes it adaptive, as in ``compare``.
    """
    chosen = None if patches is None else list(patches)

    def stock_round() -> float:
        with stock():
            return workload()

    def patched_round() -> float:
        with registry.patched(chosen):
            return workload()

    return compare(
        stock_round,
        patched_round,
        rounds=rounds,
        warmup=warmup,
        name=name,
        max_rounds=max_rounds,
    )
