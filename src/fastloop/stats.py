"""Process-wide counters of what the patches did, and immutable snapshots of them.

Counters are bumped from any thread: by producers of cross-thread callbacks
and by every loop thread.  ``itertools.count.__next__`` is one C call, so an
increment is atomic under the GIL and costs ~25 ns, with no lock; the rare
bulk additions (one per drain) take a lock.  ``reset_stats()`` records a
baseline instead of swapping objects, so patched code can bind counters once.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import asdict, dataclass


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


# add_callback from other threads
REMOTE_CALLBACKS = Counter()  # callbacks queued by producer threads
REMOTE_DRAINS = Counter()  # drain entries the loops ran
REMOTE_DRAINED = Counter()  # callbacks those drains took off the queues
# asyncio selector loop self-pipe
WAKEUPS_REQUESTED = Counter()  # _write_to_self calls (call_soon_threadsafe & co)
WAKEUPS_WRITTEN = Counter()  # bytes actually written to a self-pipe

_ALL = {
    "remote_callbacks": REMOTE_CALLBACKS,
    "remote_drains": REMOTE_DRAINS,
    "remote_drained": REMOTE_DRAINED,
    "wakeups_requested": WAKEUPS_REQUESTED,
    "wakeups_written": WAKEUPS_WRITTEN,
}
_baseline: dict[str, int] = dict.fromkeys(_ALL, 0)
_baseline_lock = threading.Lock()


@dataclass(frozen=True)
class AddCallbackStats:
    remote_callbacks: int
    """Callbacks queued by threads other than the loop's."""
    drains: int
    """Times a loop took its cross-thread queue in one ready-queue entry."""
    drained: int
    """Callbacks run by those drains."""


@dataclass(frozen=True)
class WakeupStats:
    requested: int
    """Self-pipe wake-ups asked for (every call_soon_threadsafe)."""
    written: int
    """Bytes actually written to a self-pipe; the rest were coalesced."""


@dataclass(frozen=True)
class Snapshot:
    """What the patches did since start-up or the last ``reset_stats()``."""

    add_callback: AddCallbackStats
    wakeup: WakeupStats

    def to_dict(self) -> dict[str, dict[str, int]]:
        """Plain JSON-able data."""
        return asdict(self)


def stats() -> Snapshot:
    with _baseline_lock:
        now = {
            name: counter.value() - _baseline[name] for name, counter in _ALL.items()
        }
    return Snapshot(
        add_callback=AddCallbackStats(
            remote_callbacks=now["remote_callbacks"],
            drains=now["remote_drains"],
            drained=now["remote_drained"],
        ),
        wakeup=WakeupStats(
            requested=now["wakeups_requested"], written=now["wakeups_written"]
        ),
    )


def reset_stats() -> None:
    with _baseline_lock:
        for name, counter in _ALL.items():
            _baseline[name] = counter.value()
