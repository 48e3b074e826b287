"""The live counters the patches and observers bump, made from the schema.

Each section of ``schema`` is counted by one source here, and ``read()``
turns a source into that section's figures (cumulative: ``pipeline`` takes
them since ``reset_stats()``).  Three kinds of source, by who writes:

* ``SharedCounters``: one lock-free ``Counter`` per figure, bumped from any
  thread (producers of cross-thread callbacks and every loop thread); each
  patch makes its own with ``counters()``.
  ``itertools.count.__next__`` is one C call, so an increment is atomic
  under the GIL and costs ~25 ns (``python -m timeit`` on
  ``count().__next__``: 25.8 ns), with no lock; the rare bulk additions take
  a lock.
* ``PerStreamTallies``: a tally per stream, carried by the stream and written
  by its loop's thread only (no lock), summed when read; a collected stream's tally
  is folded into the process totals.  A tally may also carry state of the
  hot path that is not a figure (``write_to_fd``'s sampling), never read.
* ``LockedTally``: one tally under a lock, written by the observers' threads.

A tally has one slot per stored figure of its section, named as the figure
(a bucket list for a histogram, a count of what runs for a flag), so the
figure a hot path bumps is the one ``stats()`` shows.

Cheap to import: the patches load it with their targets, at start-up.  So a
source knows its section by name and imports ``schema`` (and ``fields``)
only when it first needs the declarations: a ``SharedCounters`` source makes a
counter when a patch first asks for it by name and checks the names
against the section when read; a stream's tally class is made at the first
tracked stream; a recorder keeps readings set before its tally exists and
hands them to it.  A process that imports Tornado and never writes or reads
a figure never loads the schema.
"""

from __future__ import annotations

import collections
import itertools
import sys
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from fastloop.runtime import fork

if TYPE_CHECKING:
    from fastloop.telemetry.fields import Field, Histogram, Section

S = TypeVar("S", bound="Section")
R = TypeVar("R")
Src = TypeVar("Src", bound="Source")

#: Section name (in ``schema``) -> its source: the sources below, and the
#: ``SharedCounters`` each patch asks ``counters()`` for.
SOURCES: dict[str, Source] = {}
_sources_lock = threading.Lock()


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

    def reset_after_fork(self) -> None:
        self._lock = threading.Lock()


def figures(section: type[Section], raw: Callable[[str], Any]) -> dict[str, Any]:
    """A section's stored figures from its live values (``raw(name)``).

    Where the live value is not the figure: a count ``counted_by`` a
    histogram is that histogram's total, and a count bumped ``beyond``
    another adds that one.
    """
    from fastloop.telemetry.fields import Count, Flag, Histogram, Part
    from fastloop.telemetry.histogram import Buckets

    values: dict[str, Any] = {}
    for field in section.stored:
        value = raw(field.name)
        if isinstance(field, Count):
            if field.counted_by:
                value = sum(raw(field.counted_by))
            elif field.beyond:
                value += raw(field.beyond)
        elif isinstance(field, Histogram):
            value = Buckets(value)
        elif isinstance(field, Flag):
            value = value > 0
        elif isinstance(field, Part):
            value = field.section(**figures(field.section, value.__getattribute__))
        values[field.name] = value
    return values


class Source:
    """A source of one section, known by its name in ``schema`` until needed."""

    def __init__(self, section: type[Section] | str) -> None:
        self._section = section
        self.section_name = section if isinstance(section, str) else section.__name__

    @property
    def section(self) -> type[Section]:
        section = self._section
        if isinstance(section, str):
            from fastloop.telemetry import schema

            section = self._section = getattr(schema, section)
        return section

    def read(self) -> Section:
        """The section's figures, counted since start-up."""
        raise NotImplementedError

    def reset_maxima(self) -> None:
        """Start the section's maxima from zero."""
        raise NotImplementedError


class SharedCounters(Source):
    """One lock-free ``Counter`` per figure of a section of counts.

    A counter is made when a hot path first asks for it (``WAKEUP.written``);
    ``read()`` checks every name asked for against the section's figures.
    """

    def __init__(self, section: type[Section] | str) -> None:
        super().__init__(section)
        self._counters: dict[str, Counter] = {}
        fork.in_child(self.reset_after_fork)

    def reset_after_fork(self) -> None:
        for counter in list(self._counters.values()):
            counter.reset_after_fork()

    def __getattr__(self, name: str) -> Counter:
        if name.startswith("_"):  # copy, pickle and the like probe dunders
            raise AttributeError(name)
        counters: dict[str, Counter] = self.__dict__["_counters"]
        counter = counters.get(name)
        if counter is None:  # setdefault: two threads asking get one counter
            counter = counters.setdefault(name, Counter())
        return counter

    def read(self) -> Section:
        from fastloop.telemetry.fields import Count

        section = self.section
        if not all(isinstance(f, Count) for f in section.stored):
            raise TypeError(
                f"{section.__name__}: a SharedCounters source holds counts only"
            )
        undeclared = set(self._counters) - {f.name for f in section.stored}
        if undeclared:
            raise TypeError(f"{section.__name__} declares no {sorted(undeclared)}")
        counters = self._counters
        return section(
            **figures(section, lambda n: counters[n].value() if n in counters else 0)
        )

    def reset_maxima(self) -> None:
        """SharedCounters have no maxima."""


def _zero(field: Field[Any]) -> Any:
    from fastloop.telemetry.fields import Histogram, Part
    from fastloop.telemetry.histogram import BUCKETS

    if isinstance(field, Histogram):
        return [0] * BUCKETS
    if isinstance(field, Part):
        return tally_class(field.section)()
    return 0


_tally_classes: dict[tuple[type[Section], tuple[tuple[str, int], ...]], type] = {}


def tally_class(section: type[Section], state: dict[str, int] | None = None) -> type:
    """A class with one slot per stored figure of ``section``, made once.

    A maximum has a second slot, ``<name>_before``: its value until the
    last ``reset_stats()``, for figures over a whole life (one stream's).
    ``state`` adds slots of the hot path's own, with their first values.
    """
    extra = tuple((state or {}).items())
    made = _tally_classes.get((section, extra))
    if made is None:
        from fastloop.telemetry.fields import Maximum

        maxima = [f.name for f in section.stored if isinstance(f, Maximum)]
        names = [f.name for f in section.stored] + [f"{m}_before" for m in maxima]

        def __init__(self: Any) -> None:
            for field in section.stored:
                setattr(self, field.name, _zero(field))
            for name in maxima:
                setattr(self, f"{name}_before", 0)
            for name, first in extra:
                setattr(self, name, first)

        made = type(
            f"{section.__name__}Tally",
            (),
            {"__slots__": (*names, *(name for name, _ in extra)), "__init__": __init__},
        )
        _tally_classes[(section, extra)] = made
    return made


def add_into(section: type[Section], total: Any, tally: Any) -> None:
    """Add ``tally``'s figures into ``total``'s, kind by kind."""
    from fastloop.telemetry.fields import Histogram, Maximum, Part

    for field in section.stored:
        name = field.name
        if isinstance(field, Histogram):
            buckets = getattr(total, name)
            for index, count in enumerate(getattr(tally, name)):
                buckets[index] += count
        elif isinstance(field, Maximum):
            setattr(total, name, max(getattr(total, name), getattr(tally, name)))
        elif isinstance(field, Part):
            add_into(field.section, getattr(total, name), getattr(tally, name))
        else:
            setattr(total, name, getattr(total, name) + getattr(tally, name))


def reset_maxima(section: type[Section], tally: Any) -> None:
    """Start the tally's maxima from zero, keeping each one's life-long value."""
    from fastloop.telemetry.fields import Maximum, Part

    for field in section.stored:
        if isinstance(field, Maximum):
            before = f"{field.name}_before"
            setattr(
                tally, before, max(getattr(tally, before), getattr(tally, field.name))
            )
            setattr(tally, field.name, 0)
        elif isinstance(field, Part):
            reset_maxima(field.section, getattr(tally, field.name))


def life_long(section: type[Section], tally: Any) -> Callable[[str], Any]:
    """A tally's live values with each maximum over its whole life."""
    from fastloop.telemetry.fields import Maximum

    def raw(name: str) -> Any:
        value = getattr(tally, name)
        if isinstance(getattr(section, name), Maximum):
            return max(value, getattr(tally, f"{name}_before"))
        return value

    return raw


class Owned(weakref.ref):  # type: ignore[type-arg]
    """A weak reference to a stream that carries the stream's tally.

    Compared by identity: two references to one live object would otherwise
    be equal, and a set would keep one tally of two.
    """

    __slots__ = ("tally",)
    __eq__ = object.__eq__
    __hash__ = object.__hash__
    tally: Any


class PerStreamTallies(Source):
    """Figures counted per object (a stream), summed when read.

    Each tally is written by its stream's loop thread only, so it needs no
    lock.  Tallies of live streams are summed with the folded tallies of
    collected ones; a tally stays counted until its stream is collected,
    even once the stream no longer carries it (uninstalled), so nothing
    counted is lost.  A stream's tally is folded as the stream is collected
    (a weak reference's callback), not at some later write or read: it
    cannot go sooner, since ``stream_stats`` must still answer for a closed
    stream that something holds.  Per stream: the tally and one weak
    reference.
    """

    #: The attribute a stream carries its tally in.
    attribute = "_fastloop_writes"

    def __init__(
        self, section: type[Section] | str, state: dict[str, int] | None = None
    ) -> None:
        super().__init__(section)
        self._state = state
        self._tally: type | None = None
        #: A weak reference to each live owner, carrying its tally.
        self._live: set[Owned] = set()
        #: The collected owners' tallies added up (made at the first drain).
        self._folded: Any = None
        #: A collected owner's reference waits here until folded (a deque
        #: append needs no lock, and the collector may run the callback
        #: inside a read on the same thread).
        self._collected: collections.deque[Owned] = collections.deque()
        #: Reentrant: an allocation under it (a drain's fold, a read's) can run
        #: a callback that writes to a new stream on the same thread
        #: (distributed's ``Future.__del__``): ``track`` again, which a plain
        #: Lock would deadlock.
        self._lock = threading.RLock()
        #: A section holds the lock: only its thread can see this set.
        self._busy = False
        fork.in_child(self.reset_after_fork)

    @property
    def tally(self) -> type:
        """The class of a stream's tally, made once (a race makes two alike)."""
        made = self._tally
        if made is None:
            made = self._tally = tally_class(self.section, self._state)
        return made

    def reset_after_fork(self) -> None:
        self._lock = threading.RLock()
        self._busy = False

    def _locked(self, body: Callable[[], R]) -> R:
        """``body()`` under the lock, after folding the collected tallies.

        A section nested in another on the same thread (a collection run by
        an allocation) folds nothing: mid-fold, or mid-read, folding would
        count a tally twice or lose an update.  What collections left while
        the lock was held, on this thread or another, is folded once it is
        free (``_fold_collected``).
        """
        try:
            with self._lock:
                if self._busy:
                    return body()
                self._busy = True
                try:
                    self._drain()
                    return body()
                finally:
                    self._busy = False
        finally:
            self._fold_collected()

    def track(self, owner: object) -> Any:
        """A new tally for ``owner``, counted live until the owner is collected."""
        reference = Owned(owner, self._on_collected)
        reference.tally = tally = self.tally()
        self._locked(lambda: self._live.add(reference))
        return tally

    def _on_collected(self, reference: Owned) -> None:
        if sys.is_finalizing():
            return  # nobody reads totals any more, and imports fail now
        self._collected.append(reference)
        self._fold_collected()

    def _fold_collected(self) -> None:
        """Fold what collections left, unless another section holds the lock.

        Never waits: this runs inside the collector, which must not stay open
        on a lock (a fork meanwhile would leave the child unable to collect).
        The holder calls this again once it lets go; under the GIL, of an
        append and a failed try on one side and a release on the other,
        whichever comes last sees the other's.
        """
        while self._collected and self._lock.acquire(blocking=False):
            try:
                if self._busy:
                    return  # nested in a section of this thread: it folds
                self._busy = True
                try:
                    self._drain()
                finally:
                    self._busy = False
            finally:
                self._lock.release()

    def live(self) -> list[Any]:
        """The tallies of the owners alive now."""
        return self._locked(lambda: [reference.tally for reference in self._live])

    def _drain(self) -> None:
        if self._folded is None:
            self._folded = self.tally()
        while self._collected:
            reference = self._collected.popleft()
            self._live.discard(reference)
            add_into(self.section, self._folded, reference.tally)

    def _all(self) -> list[Any]:
        # A copy: a nested track (a finalizer run by an allocation in the
        # caller's loop) may add to the live set while the caller iterates.
        return [self._folded, *(reference.tally for reference in self._live)]

    def read(self) -> Section:
        total = self.tally()

        def fold() -> None:
            for tally in self._all():
                add_into(self.section, total, tally)

        self._locked(fold)
        return self.section(**figures(self.section, total.__getattribute__))

    def reset_maxima(self) -> None:
        def reset() -> None:
            for tally in self._all():
                reset_maxima(self.section, tally)

        self._locked(reset)

    def of(self, owner: object, section: type[S]) -> S:
        """One owner's figures over its life (zeros if it carries no tally)."""
        tally = getattr(owner, self.attribute, None)
        if tally is None:
            return section()
        return section(**figures(section, life_long(self.section, tally)))


class LockedTally(Source):
    """Figures written by the observers' threads: one tally, under ``lock``.

    Readings ``set()`` before the tally exists wait in a dict: the
    switch-interval patch sets its gauges as Tornado is imported, and the
    tally (the schema) is made only when a figure is added or read.
    """

    def __init__(self, section: type[Section] | str) -> None:
        super().__init__(section)
        self.lock = threading.Lock()
        self._tally: Any = None
        self._pending: dict[str, float] = {}
        fork.in_child(self.reset_after_fork)

    @property
    def tally(self) -> Any:
        """The tally, made on first use; take ``lock`` around it."""
        tally = self._tally
        if tally is None:
            tally = tally_class(self.section)()
            for name, value in self._pending.items():
                setattr(tally, name, value)
            self._pending.clear()
            self._tally = tally
        return tally

    def reset_after_fork(self) -> None:
        """No observer thread survives a fork, and none holds the lock in the child."""
        from fastloop.telemetry.fields import Flag

        self.lock = threading.Lock()
        if self._tally is None and not self._pending:
            return
        for field in self.section.stored:
            if isinstance(field, Flag):
                setattr(self.tally, field.name, 0)

    def read(self) -> Section:
        with self.lock:
            return self.section(**figures(self.section, self.tally.__getattribute__))

    def observe(self, histogram: str, ns: int, *, part: str = "", **added: int) -> None:
        """One sample of a histogram (of ``part``, if given), with the sum and
        maximum it declares, and ``added`` counts beside it; under the lock."""
        section = getattr(self.section, part).section if part else self.section
        declared: Histogram = getattr(section, histogram)
        ns = max(ns, 0)
        with self.lock:
            tally = getattr(self.tally, part) if part else self.tally
            getattr(tally, histogram)[ns.bit_length()] += 1
            setattr(tally, declared.sum, getattr(tally, declared.sum) + ns)
            if ns > getattr(tally, declared.maximum):
                setattr(tally, declared.maximum, ns)
            for name, amount in added.items():
                setattr(tally, name, getattr(tally, name) + amount)

    def set(self, **readings: float) -> None:
        """Gauges (or a flag's count) read now, under the lock."""
        with self.lock:
            if self._tally is None:
                self._pending.update(readings)
                return
            for name, value in readings.items():
                setattr(self.tally, name, value)

    def add(self, **amounts: int) -> None:
        """SharedCounters added, under the lock."""
        with self.lock:
            for name, amount in amounts.items():
                setattr(self.tally, name, getattr(self.tally, name) + amount)

    def running(self, flag: str, change: int) -> None:
        """One more (+1) or one fewer (-1) of what a flag counts."""
        with self.lock:
            setattr(self.tally, flag, getattr(self.tally, flag) + change)

    def reset_maxima(self) -> None:
        with self.lock:
            reset_maxima(self.section, self.tally)


class Polled(Source):
    """Figures another library keeps, read from its objects when asked.

    ``reader`` is ``"module:function"``, imported at the first read: a
    function that returns the section's figures by name.
    """

    def __init__(self, section: type[Section] | str, reader: str) -> None:
        super().__init__(section)
        self._reader = reader

    def read(self) -> Section:
        module, function = self._reader.split(":")
        reader = getattr(__import__(module, fromlist=[function]), function)
        return self.section(**reader())

    def reset_maxima(self) -> None:
        """Polled figures have no maxima."""


def _known(source: Src) -> Src:
    """``source``, now the process's source of its section."""
    SOURCES[source.section_name] = source
    return source


def counters(section: str) -> SharedCounters:
    """The ``SharedCounters`` source of ``schema``'s section ``section``, made once.

    A patch asks for its own at import (``READS = live.counters("ReadStats")``):
    a new section of counts needs no line here, and ``pipeline`` reads a
    section nobody asked for yet as zeros.
    """
    source = SOURCES.get(section)
    if source is None:
        with _sources_lock:
            source = SOURCES.get(section) or _known(SharedCounters(section))
    if not isinstance(source, SharedCounters):
        raise TypeError(f"{section} is not a section of counts")
    return source


# The sources of the sections that are not plain counts.
#: ``timed_at``, ``weight``: which call of the stream is timed next, and for
#: how many calls it counts (``fastloop.patches.write_to_fd`` explains both).
WRITE_TO_FD = _known(PerStreamTallies("WriteStats", state={"timed_at": 0, "weight": 1}))
GIL = _known(LockedTally("GilStats"))
SWITCHINTERVAL = _known(LockedTally("SwitchIntervalStats"))
WATCHDOG = _known(LockedTally("WatchdogStats"))
DASK = _known(Polled("DaskStats", "fastloop.dask.advice:figures"))
