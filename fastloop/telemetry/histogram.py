"""Log2 histograms of nanoseconds, shared by every timing fastloop keeps.

Bucket ``i`` holds durations ``d`` with ``d.bit_length() == i``, that is
``2**(i-1) <= d < 2**i`` (bucket 0: ``d == 0``): one integer operation to
file a sample, and percentiles good to a factor of two, which is what a
"where does the time go" question needs.  Histograms stay bucket counts
(``Buckets``) until shown; their shown form is the (upper bound in ns,
count) pairs of the non-empty buckets, which is what iterating one gives.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

BUCKETS = 64


def upper_ns(index: int) -> int:
    """The largest duration bucket ``index`` holds."""
    return (1 << index) - 1 if index else 0


def index_of(upper: int) -> int:
    """The bucket whose upper bound is ``upper`` (the inverse of ``upper_ns``)."""
    return upper.bit_length()


class Buckets:
    """The counts of one log2 histogram: immutable, added and subtracted bucketwise."""

    __slots__ = ("counts",)

    def __init__(self, counts: Iterable[int] = ()) -> None:
        values = tuple(counts)
        self.counts = values + (0,) * (BUCKETS - len(values))

    @classmethod
    def from_pairs(cls, pairs: Iterable[Sequence[int]]) -> Buckets:
        """From the shown form, ``[[upper_ns, count], ...]``."""
        counts = [0] * BUCKETS
        for upper, count in pairs:
            counts[index_of(upper)] += count
        return cls(counts)

    @property
    def total(self) -> int:
        return sum(self.counts)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        """(upper bound in ns, count) per non-empty bucket."""
        return ((upper_ns(i), n) for i, n in enumerate(self.counts) if n)

    def __len__(self) -> int:
        return sum(1 for n in self.counts if n)

    def __add__(self, other: Buckets) -> Buckets:
        return Buckets(a + b for a, b in zip(self.counts, other.counts, strict=True))

    def __sub__(self, other: Buckets) -> Buckets:
        return Buckets(a - b for a, b in zip(self.counts, other.counts, strict=True))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Buckets) and other.counts == self.counts

    def __hash__(self) -> int:
        return hash(self.counts)

    def __repr__(self) -> str:
        return f"Buckets({list(self)})"

    def percentile(self, fraction: float, max_ns: int) -> int:
        """Upper bound of the bucket holding ``fraction`` of the samples (0 if none),
        never above the largest sample seen."""
        total = self.total
        if not total:
            return 0
        wanted = fraction * total
        seen = 0
        for index, count in enumerate(self.counts):
            seen += count
            if count and seen >= wanted:
                return min(upper_ns(index), max_ns)
        return max_ns
