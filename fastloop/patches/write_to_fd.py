"""Exact counts and sampled durations of ``write_to_fd`` on every tornado stream.

``write_to_fd`` is a "non-blocking" ``send``/``os.write``, yet it can hold
the loop for milliseconds: kernel work on loopback, or reacquiring the GIL
behind busy threads after the syscall (the convoy effect).  Every call is
counted exactly: calls, bytes offered and written, would-block, errors; its
result and exception pass through untouched.  Timing a call costs two clock
reads and the histogram, sum and maximum, which alone take the whole budget
of a 64-byte echo (``bench/echo_floor.py``), so by default only a sample of
calls is timed, the way sampling profilers and Go's runtime metrics stay on.

Sampling.  Each call is timed with probability 1/``SAMPLE_EVERY``,
independently of every other: a stream draws how many calls pass before its
next timed one from the geometric distribution (the count of a coin tossed
per call, drawn once per timed call, from a generator of fastloop's own so
that an application's ``random`` sequence stays its own).  A counter modulo
N would time one phase of any pattern whose period divides N (alternate
small and large writes: only the small ones); coin tosses line up with no
pattern.  A stream's first call is always timed.  Each timed call counts in
the histogram and the time total for the calls it stands for, the inverse
of its chance of being timed (Horvitz-Thompson): ``SAMPLE_EVERY`` for a
sampled call, 1 for a first call or when every call is timed.  So the
histogram of any mix (processes in different modes, a mode changed on the
way) estimates that of every call, and histograms still merge by adding;
``timed_calls`` beside ``calls`` tells which mode produced them, and the
maximum is the largest call seen.

Every call is timed when ``write_timing`` is ``"every"``, or when the
slow-write log (``slow_write_ms``) or the CPU split (``write_cpu``) is on,
which must see every call; a change of these settings makes each live
stream's next call timed (``follow_setting``), so the new mode applies from
there.  With ``write_cpu`` thread CPU time is measured too, so that wall
minus CPU ("stalled") shows time spent waiting rather than working.

The hot path, an untimed call, bumps the call count, compares it with the
stream's next timed call and adds the bytes written; a timed call, out of
line (``timed``), also reads the clock around the write and files the
duration (``filed``, which draws the next timed call).  Process totals are
summed from the streams' tallies (``live.WRITE_TO_FD``) when asked, and the
slow-write threshold is only looked at for a call that took long.

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
import math
import random
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from fastloop.config import settings
from fastloop.patches import Patch
from fastloop.patches.changes import Change, PerObject, Swap
from fastloop.runtime import fork
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

#: 1 call in this many is timed (on average) unless every call is asked for:
#: a timed call costs far more than its clock reads, and at this rate the
#: sample costs less than an echo can resolve
#: (docs/design.md#sampling-write_to_fd-durations).  A quiet stream's first
#: call is always timed, and FASTLOOP_WRITE_TIMING=every times them all.
SAMPLE_EVERY = 256

#: The clocks of a timed call (tests substitute them, and benchmarks
#: SAMPLE_EVERY, before install).
clock: Callable[[], int] = time.perf_counter_ns
cpu_clock: Callable[[], int] = time.thread_time_ns
#: The sampler's coin, uniform in [0, 1): fastloop's own generator, reseeded
#: in a forked child (tests substitute a seeded one before install).
_generator = random.Random()
fork.in_child(_generator.seed)
coin: Callable[[], float] = _generator.random


def every_call_timed() -> bool:
    """Do the settings ask for every call's duration (not a sample)?"""
    return bool(
        settings.write_timing == "every" or settings.slow_write_ms or settings.write_cpu
    )


#: Whether timed calls draw the next one at random (else every call is
#: timed): ``every_call_timed()`` kept current by ``follow_setting``, which
#: every change of the three settings calls, so a timed call reads one name.
SAMPLING = not every_call_timed()


def follow_setting(value: object) -> None:
    """A timing setting changed: each live stream times its next call (weight 1)."""
    global SAMPLING
    SAMPLING = not every_call_timed()
    for tally in WRITE_TO_FD.live():
        tally.weight = 1
        tally.timed_at = 0


def inlinable(function: Any) -> bool:
    """Is this stock ``IOStream.write_to_fd``: ``self.socket.send(data)`` alone?"""
    code = getattr(function, "__code__", None)
    return code is not None and code.co_names == ("socket", "send")


def count_failure(counters: Any, offered: int, exc: BaseException) -> None:
    """A call that raised: what it offered, and whether it would have blocked."""
    counters.bytes_offered += offered
    if isinstance(exc, BlockingIOError):
        counters.would_block += 1
    else:
        counters.errors += 1


#: What the wrappers of one install share: counters_of (a stream's tally,
#: attached on its first write) and timed (a call that is timed, with the
#: call and its duration filed).  A plain tuple: this module loads at
#: start-up.
Recorders = tuple[
    Callable[[Any], Any],
    Callable[[Callable[[Any, Any], int], Any, Any, Any], int],
]


def recorders(streams: PerObject) -> Recorders:
    """The steps the wrappers share, with one slow-write log per install.

    A tally's slots are ``schema.WriteStats``'s figures, and ``timed_at``,
    ``weight`` (the sampling state); ``bytes_offered`` counts only what goes
    beyond ``bytes_written`` (one update fewer per full write).
    """
    wall, cpu_time, toss, log = clock, cpu_clock, coin, math.log
    every = SAMPLE_EVERY
    log_untimed = math.log1p(-1 / every)  # a geometric draw divides by it
    log_slow = SlowWriteLog()

    def counters_of(stream: Any) -> Any:
        counters = getattr(stream, WRITE_TO_FD.attribute, None)
        if counters is None:
            counters = streams.setdefault(stream, WRITE_TO_FD.track)
        return counters

    def filed(counters: Any, stream: Any, offered: int, elapsed: int) -> None:
        weight = counters.weight
        counters.timed_calls += 1
        counters.histogram[elapsed.bit_length()] += weight
        counters.total_ns += elapsed * weight
        if elapsed > counters.max_ns:
            counters.max_ns = elapsed
        if SAMPLING:
            # The untimed calls before the next timed one are geometric.
            counters.weight = every
            gap = int(log(1.0 - toss()) / log_untimed)
            counters.timed_at = counters.calls + 1 + gap
        else:
            counters.weight = 1
            counters.timed_at = counters.calls + 1
        if elapsed > SLOW_FLOOR_NS:
            threshold = settings.slow_write_ms
            if threshold and elapsed > threshold * 1_000_000:
                counters.slow += 1
                log_slow(stream, offered, elapsed)

    def timed(
        original: Callable[[Any, Any], int], stream: Any, data: Any, counters: Any
    ) -> int:
        """A timed call: wall clock, and thread CPU time with ``write_cpu``."""
        counters.calls += 1
        offered = len(data)
        cpu_start = cpu_time() if settings.write_cpu else -1
        start = wall()
        try:
            written = original(stream, data)
        except BaseException as exc:
            elapsed = wall() - start
            if cpu_start >= 0:
                counters.cpu_ns += cpu_time() - cpu_start
                counters.cpu_calls += 1
            del data
            count_failure(counters, offered, exc)
            filed(counters, stream, offered, elapsed)
            raise
        elapsed = wall() - start
        if cpu_start >= 0:
            counters.cpu_ns += cpu_time() - cpu_start
            counters.cpu_calls += 1
        del data
        count_written(counters, offered, written)
        filed(counters, stream, offered, elapsed)
        return written

    return counters_of, timed


def count_written(counters: Any, offered: int, written: int) -> None:
    """A call that returned: the bytes it wrote and any it left."""
    counters.bytes_written += written
    if written != offered:
        counters.bytes_offered += offered - written
        if not written:
            counters.would_block += 1


# The wrappers below keep only the untimed call in line, a dozen bytecodes
# over stock's; the timed call, 1 in SAMPLE_EVERY, takes a frame or two
# more out of line, and each free variable of a closure is copied on every
# call, so they have three (bench/write_overhead.py: 76 ns a call over stock,
# 107 ns with the timed steps in line).  They are plain functions rather
# than wrapt FunctionWrappers: the proxy layer costs ~100 ns a write.  Like
# stock, each drops ``data`` before it returns or raises: a live memoryview
# export would stop the stream from resizing its buffer (tornado PR 2008).


def instrument(
    original: Callable[[Any, Any], int], shared: Recorders
) -> Callable[[Any, Any], int]:
    counters_of, timed = shared

    def write_to_fd(self: Any, data: Any) -> int:
        try:
            counters = self._fastloop_writes
        except AttributeError:  # the stream's first write, always timed
            counters = counters_of(self)
        calls = counters.calls + 1
        if calls >= counters.timed_at:
            try:
                return timed(original, self, data, counters)
            finally:
                del data
        counters.calls = calls
        try:
            written = original(self, data)
        except BaseException as exc:
            offered = len(data)
            del data
            count_failure(counters, offered, exc)
            raise
        counters.bytes_written += written
        if written != len(data):
            counters.bytes_offered += len(data) - written
            if not written:
                counters.would_block += 1
        del data
        return written

    # Look like the original to introspection (Tornado's own API snapshot
    # test walks __module__ and signatures).
    return functools.update_wrapper(write_to_fd, original)


def inline(
    original: Callable[[Any, Any], int], shared: Recorders
) -> Callable[[Any, Any], int]:
    # IOStream, the stream of every TCP connection: stock's one line,
    # ``self.socket.send(data)``, is inlined, which saves a Python frame per
    # untimed write.  Otherwise the steps of write_to_fd above.
    counters_of, timed = shared

    def fast_write_to_fd(self: Any, data: Any) -> int:
        try:
            counters = self._fastloop_writes
        except AttributeError:
            counters = counters_of(self)
        calls = counters.calls + 1
        if calls >= counters.timed_at:
            try:
                return timed(original, self, data, counters)
            finally:
                del data
        counters.calls = calls
        try:
            written: int = self.socket.send(data)
        except BaseException as exc:
            offered = len(data)
            del data
            count_failure(counters, offered, exc)
            raise
        counters.bytes_written += written
        if written != len(data):
            counters.bytes_offered += len(data) - written
            if not written:
                counters.would_block += 1
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
    summary="tornado.iostream write_to_fd: exact counts, sampled times, slow-call log",
    replaces=(
        "`write_to_fd` of `tornado.iostream.IOStream`, `SSLIOStream`, "
        "`PipeIOStream` (wrapped, result untouched)"
    ),
    relies_on=("the signature `write_to_fd(self, data)`"),
    verifies=(
        "tornado.iostream:IOStream.write_to_fd",
        "tornado.iostream:SSLIOStream.write_to_fd",
        "tornado.iostream:PipeIOStream.write_to_fd",
    ),
    check=check,
    apply=apply,
)
