"""Blocked-loop watchdog: say when, for how long, and where an IOLoop stopped answering.

Tornado 5 had ``IOLoop.set_blocking_signal_threshold`` (a SIGALRM handler,
main thread only) and 6.0 removed it; dask says "Event loop was
unresponsive for 3.4 s" without saying where.  Here a daemon thread posts a
heartbeat callback to each loop every quarter threshold (at most one in
flight per loop) with ``call_soon_threadsafe``.  A heartbeat runs as soon as
the loop comes back to its selector, so one that has waited longer than the
threshold means the loop is stuck in a callback: the thread logs that
callback's stack from ``sys._current_frames()``, once per episode, and one
line when the heartbeat finally runs.  No signals (works off the main thread
and next to dask's own tick monitor) and nothing on the loop's hot path: the
loop pays one tiny callback per heartbeat.

Heartbeat lag (posting to running) feeds the loop-lag histogram of
``fastloop.stats().watchdog``.  A blocked time is measured from the posting
of the heartbeat that waited, so it may start up to a quarter threshold
after the block did.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from fastloop.config import positive_ms
from fastloop.observers import ioloops
from fastloop.observers._ticker import Ticker
from fastloop.runtime import fork
from fastloop.telemetry import live

log = logging.getLogger("fastloop")

DEFAULT_THRESHOLD_MS = 100.0
#: The stack logged for an episode keeps its innermost frames.
STACK_LIMIT = 40

_clock = time.monotonic_ns

#: Where the latest blocked episode's loop was stuck: its innermost frame.
_last_stuck: str | None = None


def last_stuck() -> str | None:
    """``function (file:line)`` where the latest blocked loop was running, if any."""
    return _last_stuck


class _Watched:
    """One loop's heartbeat in flight, and whether it is in a blocked episode."""

    def __init__(self, loop: Any) -> None:
        self.loop = loop
        self.posted_ns: int | None = None
        self.ran_ns: int | None = None
        self.thread: int | None = None
        self.stale = False  # the loop stopped with our heartbeat queued
        self.blocked = False

    def beat(self) -> None:  # runs on the loop thread: keep it tiny
        self.thread = threading.get_ident()
        self.ran_ns = _clock()


class Watchdog:
    """A running watchdog (``fastloop.watch``); ``stop()`` ends its thread."""

    def __init__(
        self, threshold_ms: float = DEFAULT_THRESHOLD_MS, loop: Any = None
    ) -> None:
        self.threshold_ms = positive_ms("watchdog threshold_ms", threshold_ms)
        self._threshold_ns = int(self.threshold_ms * 1e6)
        self._period_s = min(max(self.threshold_ms / 4000, 0.001), 0.25)
        self._only = None if loop is None else ioloops.asyncio_loop_of(loop)
        self._watched: dict[int, _Watched] = {}
        self._ticker = Ticker(
            "fastloop-watchdog",
            self._period_s,
            self._tick,
            on_exit=lambda: live.WATCHDOG.running("watching", -1),
        )
        live.WATCHDOG.running("watching", +1)
        self._ticker.start()

    @property
    def running(self) -> bool:
        return self._ticker.running

    def stop(self) -> None:
        """Stop watching; returns once the thread has ended (idempotent)."""
        self._ticker.stop()

    def __enter__(self) -> Watchdog:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<fastloop.Watchdog threshold_ms={self.threshold_ms:g} {state}>"

    def _tick(self) -> bool:
        """Check and feed every loop; False once an explicit loop has closed."""
        if self._only is not None:
            if self._only.is_closed():
                self._end_open_episodes(self._watched.values())
                return False
            loops = [self._only]
        else:
            loops = ioloops.tornado_loops()
        now = _clock()
        current = {}
        for loop in loops:
            watched = self._watched.pop(id(loop), None)
            if watched is None or watched.loop is not loop:
                watched = _Watched(loop)
            current[id(loop)] = watched
            self._check(watched, now)
        self._end_open_episodes(self._watched.values())  # their loops closed
        self._watched = current
        return True

    def _end_open_episodes(self, closed: Iterable[_Watched]) -> None:
        """A loop that closed is not blocked any more: end its episode now."""
        now = _clock()
        for watched in closed:
            if watched.blocked and watched.posted_ns is not None:
                self._recovered(watched, now - watched.posted_ns)

    def _check(self, watched: _Watched, now: int) -> None:
        loop = watched.loop
        if watched.posted_ns is not None:
            ran = watched.ran_ns
            if ran is None:
                waited = now - watched.posted_ns
                if watched.stale:
                    return  # runs when the loop starts again; not a block
                if not ioloops.is_running(loop):
                    # Stopped (or closed) with our heartbeat queued: what
                    # follows is not lag.  A block in progress ended here.
                    watched.stale = True
                    if watched.blocked:
                        self._recovered(watched, waited)
                elif waited > self._threshold_ns and not watched.blocked:
                    watched.blocked = True
                    self._log_blocked(watched, waited)
                return
            lag = ran - watched.posted_ns
            if not watched.stale:
                live.WATCHDOG.observe("lag_histogram", lag)
            if watched.blocked:
                self._recovered(watched, lag)
            watched.posted_ns = watched.ran_ns = None
            watched.stale = watched.blocked = False
        if ioloops.is_running(loop):
            watched.posted_ns = _clock()
            try:
                loop.call_soon_threadsafe(watched.beat)
            except RuntimeError:  # closed since we looked
                watched.posted_ns = None

    def _recovered(self, watched: _Watched, blocked_ns: int) -> None:
        watched.blocked = False
        with live.WATCHDOG.lock:
            tally = live.WATCHDOG.tally
            tally.episodes += 1
            tally.blocked_ns += blocked_ns
            tally.max_blocked_ns = max(tally.max_blocked_ns, blocked_ns)
        log.warning(
            "fastloop: event loop on thread %r responsive again after %.1f ms blocked",
            ioloops.thread_name(watched.thread),
            blocked_ns / 1e6,
        )

    def _log_blocked(self, watched: _Watched, blocked_ns: int) -> None:
        global _last_stuck
        thread = ioloops.running_thread(watched.loop) or watched.thread
        frame = sys._current_frames().get(thread) if thread is not None else None
        if frame is not None:
            code = frame.f_code
            line = f"{os.path.basename(code.co_filename)}:{frame.f_lineno}"
            _last_stuck = f"{code.co_name} ({line})"
        if not log.isEnabledFor(logging.WARNING):
            return
        if frame is None:  # uvloop names its thread only once a heartbeat ran
            where = "  (its thread is not known yet: no heartbeat has run on it)\n"
        else:
            where = "".join(traceback.format_stack(frame, limit=STACK_LIMIT))
            del frame
        log.warning(
            "fastloop: event loop on thread %r blocked for %.0f ms so far "
            "(threshold %g ms); it is running:\n%s",
            ioloops.thread_name(thread),
            blocked_ns / 1e6,
            self.threshold_ms,
            where.rstrip("\n"),
        )


def watch(threshold_ms: float = DEFAULT_THRESHOLD_MS, loop: Any = None) -> Watchdog:
    """Watch one loop (an IOLoop or asyncio loop), or every IOLoop when None.

    Returns the running ``Watchdog``; ``stop()`` it, or use it as a context
    manager.  ValueError if ``threshold_ms`` is not a number > 0.
    """
    return Watchdog(threshold_ms, loop)


# --- the process-wide watchdog of FASTLOOP_BLOCK_MS / configure(block_ms=) ----

_process_watchdog: Watchdog | None = None
_setting_lock = threading.Lock()
_restarts_in_child = False


def follow_setting(block_ms: float | None) -> None:
    """Start, re-threshold or stop the process-wide watchdog to match the setting.

    The same threshold again leaves the running watchdog (and any episode it
    is in the middle of) alone.
    """
    global _process_watchdog, _restarts_in_child
    with _setting_lock:
        running = _process_watchdog
        if running is not None and block_ms == running.threshold_ms:
            return
        if running is not None:
            running.stop()
        _process_watchdog = None if block_ms is None else Watchdog(block_ms)
        if block_ms is not None and not _restarts_in_child:
            _restarts_in_child = True
            fork.in_child(_restart_in_child)


def process_watchdog() -> Watchdog | None:
    return _process_watchdog


def _restart_in_child() -> None:
    # Only the forking thread survives a fork: the child needs its own thread
    # (and a fresh lock: the parent's may have been held at the fork).
    global _setting_lock, _process_watchdog
    _setting_lock = threading.Lock()
    if _process_watchdog is not None:
        _process_watchdog = Watchdog(_process_watchdog.threshold_ms)
