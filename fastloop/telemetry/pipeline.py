"""``stats()``, ``reset_stats()`` and ``stream_stats()``: the live counters, read.

Sources count from start-up; ``reset_stats()`` records a baseline reading
instead of swapping objects, so patched code can bind counters once, and
starts the maxima from zero.  A snapshot is each source's reading less its
baseline, kind by kind (``Section.since``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from fastloop.telemetry import live
from fastloop.telemetry.fields import Part, Section
from fastloop.telemetry.schema import Snapshot, StreamStats

#: Snapshot part -> the name of its section, whose source counts it.
PARTS = {
    field.name: field.section.__name__
    for field in Snapshot.fields
    if isinstance(field, Part)
}
_lock = threading.Lock()
_baselines: dict[str, Section] = {}


def _source(part: str) -> live.Source:
    """The part's source; a section of counts nothing asked for yet reads zeros."""
    return live.SOURCES.get(PARTS[part]) or live.counters(PARTS[part])


def snapshot(installed: Iterable[str]) -> Snapshot:
    """An immutable snapshot of every figure, with the patches active now."""
    with _lock:
        parts = {}
        for name in PARTS:
            reading = _source(name).read()
            base = _baselines.get(name)
            parts[name] = reading if base is None else reading.since(base)
    return Snapshot(**parts, installed=tuple(sorted(installed)))


def reset_stats() -> None:
    """Start every figure from zero (the maxima too); a stream's own stay whole."""
    with _lock:
        for name in PARTS:
            source = _source(name)
            _baselines[name] = source.read()
            source.reset_maxima()


def stream_stats(stream: object) -> StreamStats:
    """The write figures of one IOStream (zeros if it never wrote while patched)."""
    return live.WRITE_TO_FD.of(stream, StreamStats)
