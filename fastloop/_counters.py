"""The counters the patches bump on their hot paths: cheap to import.

Kept apart from ``_stats``, ``_snapshot`` and ``_report`` (the snapshots'
dataclasses cost time to define at import) so that a process started with
``FASTLOOP=1`` pays only for these until it asks for ``stats()``.

Counters are bumped from any thread: by producers of cross-thread callbacks
and by every loop thread.  ``itertools.count.__next__`` is one C call, so an
increment is atomic under the GIL and costs ~25 ns (``python -m timeit``
on ``count().__next__``: 25.8 ns), with no lock; the rare
bulk additions (one per cross-thread batch) take a lock.  ``write_to_fd``
counts go to counters on each stream (written by its loop's thread only),
folded into process totals when the stream is collected.
"""

from __future__ import annotations

import collections
import itertools
import threading
import weakref
from typing import Any

from fastloop import _fork
from fastloop._histogram import BUCKETS


class Counter:
    """A monotonic, thread-safe event count."""

    __slots__ = ("_bulk", "_count", "_lock", "increment")

    def __init__(self) -> None:
        self._count = itertools.count()
        self._bulk = 0
        self._lock = threading.Lock()
        #: Count one event: atomic, lock-free.
        self.increment = self._count.__next__

    def add(self, amount: int) -> None:
        with self._lock:
            self._bulk += amount

    def value(self) -> int:
        # repr(count(7)) == "count(7)": the only way to read it without a bump.
        return int(repr(self._count)[6:-1]) + self._bulk


# add_callback on the loop thread: counted per batch, never per callback
ONLOOP_BATCHES = Counter()  # on-loop batches opened
ONLOOP_EXTRA = Counter()  # callbacks those batches ran beyond their first
# add_callback from other threads
REMOTE_CALLBACKS = Counter()  # callbacks queued by producer threads
REMOTE_BATCHES = Counter()  # cross-thread batches the loops ran
REMOTE_BATCHED = Counter()  # callbacks those batches ran
# asyncio selector loop self-pipe
WAKEUPS_REQUESTED = Counter()  # _write_to_self calls (call_soon_threadsafe & co)
WAKEUPS_WRITTEN = Counter()  # bytes actually written to a self-pipe
# write_to_fd, rare events
SLOW_WRITES = Counter()  # calls slower than FASTLOOP_SLOW_WRITE_MS
# asyncio selector loop polls
POLLS_SKIPPED = Counter()  # zero-timeout polls answered without the syscall


#: The counts of ``StreamCounters.totals()`` beside its histogram.
WRITE_COUNTS = (
    "calls",
    "offered",
    "written",
    "would_block",
    "errors",
    "wall_ns",
    "cpu_ns",
    "cpu_calls",
)


class StreamCounters:
    """One stream's ``write_to_fd`` counters, carried by the stream itself.

    Only the stream's loop thread writes them, so they need no lock.  Calls
    are counted by the histogram alone, and bytes offered as written plus
    unwritten: one update fewer per full write.  ``max_ns`` is the maximum
    since the last ``reset_stats()``, ``max_before`` the stream's maximum
    until then.  Process totals are the live streams' counters plus those
    folded in when their stream was collected.
    """

    __slots__ = (
        "cpu_calls",
        "cpu_ns",
        "errors",
        "histogram",
        "max_before",
        "max_ns",
        "unwritten",
        "wall_ns",
        "would_block",
        "written",
    )

    def __init__(self) -> None:
        self.written = self.unwritten = 0
        self.would_block = self.errors = 0
        self.wall_ns = self.max_ns = self.max_before = 0
        self.cpu_ns = self.cpu_calls = 0
        self.histogram = [0] * BUCKETS

    @property
    def calls(self) -> int:
        return sum(self.histogram)

    def totals(self) -> dict[str, Any]:
        """What ``stats()`` sums: the ``WRITE_COUNTS`` by name, and ``histogram``."""
        histogram = list(self.histogram)  # calls are counted from this copy
        written = self.written
        return {
            "calls": sum(histogram),
            "offered": written + self.unwritten,
            "written": written,
            "would_block": self.would_block,
            "errors": self.errors,
            "wall_ns": self.wall_ns,
            "cpu_ns": self.cpu_ns,
            "cpu_calls": self.cpu_calls,
            "histogram": histogram,
        }

    def fold(self, other: StreamCounters) -> None:
        """Add a collected stream's counters to these (the process's folded totals)."""
        self.written += other.written
        self.unwritten += other.unwritten
        self.would_block += other.would_block
        self.errors += other.errors
        self.wall_ns += other.wall_ns
        self.cpu_ns += other.cpu_ns
        self.cpu_calls += other.cpu_calls
        self.max_ns = max(self.max_ns, other.max_ns)
        for index, count in enumerate(other.histogram):
            self.histogram[index] += count


#: Counters of the streams still alive, and of those collected since.
_live: set[StreamCounters] = set()
_folded = StreamCounters()
#: A collected stream's counters wait here (a deque append needs no lock,
#: and the garbage collector may run a finalizer inside ``stats()``).
_collected: collections.deque[StreamCounters] = collections.deque()
_writes_lock = threading.Lock()


def _reset_lock_after_fork() -> None:
    global _writes_lock
    _writes_lock = threading.Lock()


def _drain_collected() -> None:
    """Fold the counters of collected streams; the caller holds ``_writes_lock``."""
    while _collected:
        counters = _collected.popleft()
        _live.discard(counters)
        _folded.fold(counters)


def writes_lock() -> threading.Lock:
    """The lock guarding the set of live streams (a fresh one after fork)."""
    return _writes_lock


def every_stream() -> list[StreamCounters]:
    """The folded totals and every live stream's counters; hold ``writes_lock()``."""
    _drain_collected()
    return [_folded, *_live]


def track_stream(stream: object) -> StreamCounters:
    """New counters for ``stream``, counted live until the stream is collected."""
    counters = StreamCounters()
    with _writes_lock:
        _drain_collected()
        _live.add(counters)
    weakref.finalize(stream, _collected.append, counters).atexit = False
    return counters


_fork.in_child(_reset_lock_after_fork)
