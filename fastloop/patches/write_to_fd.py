"""Blocking-time instrumentation of ``write_to_fd`` on every tornado.iostream stream.

``write_to_fd`` is a "non-blocking" ``send``/``os.write``, yet it can hold
the loop for milliseconds: kernel work on loopback, or reacquiring the GIL
behind busy threads after the syscall (the convoy effect).  Each call is
timed with ``perf_counter_ns``; its result and exception pass through
untouched.  The hot path is two clock reads and the counters and log2
histogram that the stream carries (a tally of ``schema.WriteStats``,
``live.WRITE_TO_FD``); process totals are summed from those when asked,
and the slow-write threshold is only looked at for a call that took long.
With ``write_cpu`` on, thread CPU time is measured too, so that wall minus
CPU ("stalled") shows time spent waiting rather than working.

The stream's counters are one attribute of the stream, ``_fastloop_writes``,
set on its first write through the registry (``PerObject``), which takes it
off every stream at uninstall: ``stream_stats`` must still answer in a
close callback, after Tornado has dropped the stream's buffers.  A tally
taken off its stream stays counted in the process totals until the stream
is collected, so nothing counted is lost, and a write still running at
uninstall bumps the tally it holds (only the stream's loop thread writes
it).  (CPython 3.11+
shares at most 30 attribute names among a class's instances and an
IOStream uses 27; this is one more, and the only one fastloop adds:
tests/test_write_to_fd.py fails when they no longer fit.)

Like stock, the wrapper drops its reference to ``data`` before returning or
raising: a live memoryview export would stop the stream from resizing its
write buffer (tornado PR 2008).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from fastloop.config import settings
from fastloop.patches import Patch
from fastloop.patches.changes import Change, PerObject, Swap
from fastloop.telemetry.live import WRITE_TO_FD

log = logging.getLogger("fastloop")

#: The classes of tornado.iostream that define their own write_to_fd.
CLASSES = ("IOStream", "SSLIOStream", "PipeIOStream")


def check(module: ModuleType) -> str | None:
    for name in CLASSES:
        cls = getattr(module, name, None)
        function = getattr(cls, "__dict__", {}).get("write_to_fd")
        code = getattr(function, "__code__", None)
        if code is None:
            return f"tornado.iostream.{name}.write_to_fd is missing"
        if code.co_varnames[:2] != ("self", "data") or code.co_argcount != 2:
            return f"{name}.write_to_fd(self, data) signature changed"
        if "write_to_fd" in code.co_names:
            return f"{name}.write_to_fd calls another write_to_fd (would count twice)"
    return None


class SlowWriteLog:
    """At most one warning a second, with the number suppressed since the last."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next_ns = 0
        self._suppressed = 0

    def __call__(self, stream: Any, offered: int, elapsed_ns: int) -> None:
        now = time.monotonic_ns()
        with self._lock:
            if now < self._next_ns:
                self._suppressed += 1
                return
            suppressed, self._suppressed = self._suppressed, 0
            self._next_ns = now + 1_000_000_000
        more = (
            f" ({suppressed} more suppressed in the last second)" if suppressed else ""
        )
        log.warning(
            "fastloop: slow write_to_fd: %.1f ms for %d bytes to %s on thread %r%s",
            elapsed_ns / 1e6,
            offered,
            describe_peer(stream),
            threading.current_thread().name,
            more,
        )


def describe_peer(stream: Any) -> str:
    sock = getattr(stream, "socket", None)
    if sock is not None:
        try:
            return repr(sock.getpeername())
        except Exception:  # closed, or not connected any more
            pass
        try:
            return f"fd {sock.fileno()}"
        except Exception:
            return "a closed socket"
    return f"fd {getattr(stream, 'fd', '?')}"


#: Only a call at least this long is compared with the slow-write threshold,
#: so the hot path reads no threshold (a threshold below this acts as this).
SLOW_FLOOR_NS = 50_000


def inlinable(function: Any) -> bool:
    """Is this stock ``IOStream.write_to_fd``: ``self.socket.send(data)`` alone?"""
    code = getattr(function, "__code__", None)
    return code is not None and code.co_names == ("socket", "send")


#: What the wrappers of one install share: counters_of, record, record_failure,
#: cpu_timed, after_slow (a plain tuple: this module loads at start-up).
Recorders = tuple[
    Callable[[Any], Any],
    Callable[[Any, Any, int, int, int], None],
    Callable[[Any, int, int, BaseException], None],
    Callable[[Callable[[Any, Any], int], Any, Any], int],
    Callable[[Any, int, int], None],
]


def recorders(streams: PerObject) -> Recorders:
    """The steps the wrappers share, with one slow-write log per install.

    A tally's slots are ``schema.WriteStats``'s figures; ``bytes_offered``
    counts only what goes beyond ``bytes_written`` (one update fewer per
    full write) and calls are the histogram's total.
    """
    clock = time.perf_counter_ns
    cpu_clock = time.thread_time_ns
    log_slow = SlowWriteLog()

    def counters_of(stream: Any) -> Any:
        counters = getattr(stream, WRITE_TO_FD.attribute, None)
        if counters is None:
            counters = streams.setdefault(stream, WRITE_TO_FD.track)
        return counters

    def after_slow(stream: Any, offered: int, elapsed: int) -> None:
        threshold = settings.slow_write_ms
        if threshold and elapsed > threshold * 1_000_000:
            counters_of(stream).slow += 1
            log_slow(stream, offered, elapsed)

    def record(
        counters: Any, stream: Any, offered: int, written: int, elapsed: int
    ) -> None:
        # The same steps as the inlined copy in fast_write_to_fd below.
        counters.histogram[elapsed.bit_length()] += 1
        counters.bytes_written += written
        counters.total_ns += elapsed
        if elapsed > counters.max_ns:
            counters.max_ns = elapsed
        if written != offered:
            counters.bytes_offered += offered - written
            if not written:
                counters.would_block += 1
        if elapsed > SLOW_FLOOR_NS:
            after_slow(stream, offered, elapsed)

    def record_failure(
        stream: Any, offered: int, elapsed: int, exc: BaseException
    ) -> None:
        counters = counters_of(stream)
        counters.histogram[elapsed.bit_length()] += 1
        counters.bytes_offered += offered
        counters.total_ns += elapsed
        counters.max_ns = max(counters.max_ns, elapsed)
        if isinstance(exc, BlockingIOError):
            counters.would_block += 1
        else:
            counters.errors += 1
        if elapsed > SLOW_FLOOR_NS:
            after_slow(stream, offered, elapsed)

    def cpu_timed(original: Callable[[Any, Any], int], stream: Any, data: Any) -> int:
        """``write_cpu`` on: thread CPU time around the wall-clock window."""
        offered = len(data)
        cpu_start = cpu_clock()
        start = clock()
        try:
            written = original(stream, data)
        except BaseException as exc:
            elapsed = clock() - start
            cpu_used = cpu_clock() - cpu_start
            del data
            record_failure(stream, offered, elapsed, exc)
            counters = counters_of(stream)
            counters.cpu_ns += cpu_used
            counters.cpu_calls += 1
            raise
        elapsed = clock() - start
        cpu_used = cpu_clock() - cpu_start
        del data
        counters = counters_of(stream)
        record(counters, stream, offered, written, elapsed)
        counters.cpu_ns += cpu_used
        counters.cpu_calls += 1
        return written

    return counters_of, record, record_failure, cpu_timed, after_slow


def instrument(
    original: Callable[[Any, Any], int], shared: Recorders
) -> Callable[[Any, Any], int]:
    counters_of, record, record_failure, cpu_timed, _ = shared
    clock = time.perf_counter_ns

    # A plain function rather than a wrapt FunctionWrapper: it runs on
    # every write of every stream and the proxy layer costs ~100 ns there
    # (bench/write_overhead.py).
    def write_to_fd(self: Any, data: Any) -> int:
        if settings.write_cpu:
            try:
                return cpu_timed(original, self, data)
            finally:
                del data
        start = clock()
        try:
            written = original(self, data)
        except BaseException as exc:
            elapsed = clock() - start
            offered = len(data)
            del data
            record_failure(self, offered, elapsed, exc)
            raise
        elapsed = clock() - start
        offered = len(data)
        del data
        record(counters_of(self), self, offered, written, elapsed)
        return written

    # Look like the original to introspection (Tornado's own API snapshot
    # test walks __module__ and signatures).
    return functools.update_wrapper(write_to_fd, original)


def inline(
    original: Callable[[Any, Any], int], shared: Recorders
) -> Callable[[Any, Any], int]:
    # IOStream, the stream of every TCP connection: stock's one line is
    # inlined and so is record(), which saves two Python frames per
    # write (bench/write_overhead.py: ~120 ns of ~300 ns added per call).
    counters_of, _, record_failure, cpu_timed, after_slow = shared
    clock = time.perf_counter_ns

    def fast_write_to_fd(self: Any, data: Any) -> int:
        if settings.write_cpu:
            try:
                return cpu_timed(original, self, data)
            finally:
                del data
        start = clock()
        try:
            written: int = self.socket.send(data)
        except BaseException as exc:
            elapsed = clock() - start
            offered = len(data)
            del data  # as stock: no live memoryview export (tornado PR 2008)
            record_failure(self, offered, elapsed, exc)
            raise
        elapsed = clock() - start
        try:
            counters = self._fastloop_writes
        except AttributeError:
            counters = counters_of(self)
        counters.histogram[elapsed.bit_length()] += 1
        counters.bytes_written += written
        counters.total_ns += elapsed
        if elapsed > counters.max_ns:
            counters.max_ns = elapsed
        if written != len(data):
            counters.bytes_offered += len(data) - written
            if not written:
                counters.would_block += 1
        if elapsed > SLOW_FLOOR_NS:
            after_slow(self, len(data), elapsed)
        del data
        return written

    return functools.update_wrapper(fast_write_to_fd, original)


def apply(module: ModuleType) -> list[Change]:
    streams = PerObject(WRITE_TO_FD.attribute)
    shared = recorders(streams)
    changes: list[Change] = [streams]
    for name in CLASSES:
        cls = getattr(module, name)
        original = cls.__dict__["write_to_fd"]
        make = inline if name == "IOStream" and inlinable(original) else instrument
        changes.append(Swap(cls, "write_to_fd", make(original, shared)))
    return changes


PATCH = Patch(
    name="write_to_fd",
    target="tornado.iostream",
    summary="tornado.iostream write_to_fd: time, bytes, would-block, slow-call log",
    check=check,
    apply=apply,
)
