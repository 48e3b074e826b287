"""Log2 histograms of nanoseconds, shared by every timing fastloop keeps.

Bucket ``i`` holds durations ``d`` with ``d.bit_length() == i``, that is
``2**(i-1) <= d < 2**i`` (bucket 0: ``d == 0``): one integer operation to
file a sample, and percentiles good to a factor of two, which is what a
"where does the time go" question needs.
"""

from __future__ import annotations

BUCKETS = 64


def bucket_upper_ns(index: int) -> int:
    return (1 << index) - 1 if index else 0


def buckets(counts: list[int]) -> tuple[tuple[int, int], ...]:
    """(upper bound in ns, count) per non-empty bucket."""
    return tuple(
        (bucket_upper_ns(index), count) for index, count in enumerate(counts) if count
    )


def percentile(
    histogram: tuple[tuple[int, int], ...], total: int, max_ns: int, fraction: float
) -> int:
    """Upper bound of the bucket holding ``fraction`` of the samples (0 if none)."""
    if not total:
        return 0
    wanted = fraction * total
    seen = 0
    for upper, count in histogram:
        seen += count
        if seen >= wanted:
            return min(upper, max_ns)
    return max_ns


class Percentiles:
    """p50/p90/p99 of a snapshot that keeps a log2 histogram.

    A mixin for the frozen snapshot dataclasses: each says how to read one
    percentile (which count and maximum go with its histogram).
    """

    def percentile_ns(self, fraction: float) -> int:
        raise NotImplementedError

    @property
    def p50_ns(self) -> int:
        return self.percentile_ns(0.50)

    @property
    def p90_ns(self) -> int:
        return self.percentile_ns(0.90)

    @property
    def p99_ns(self) -> int:
        return self.percentile_ns(0.99)

    def percentile_fields(self) -> dict[str, int]:
        """The three percentiles, as ``to_dict()`` adds them beside the counts."""
        return {"p50_ns": self.p50_ns, "p90_ns": self.p90_ns, "p99_ns": self.p99_ns}
