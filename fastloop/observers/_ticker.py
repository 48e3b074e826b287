"""The daemon thread behind the watchdog and the profiler.

Both observe loop threads from outside, so both are a thread that wakes
every period, does a little work under the GIL, and must never take the
host process down: an exception is logged and the next tick comes.  A
failure that repeats every tick is logged once a minute, not every tick.

Unlike auto mode's controller (``fastloop.runtime.dormancy``), a ticker
does not sleep while the loops are idle: both observers are opt-in, with
the period the user chose, and an idle loop is what they look at (the
watchdog must see a loop stuck in a callback, which can wake nobody; the
profiler counts the loop's idle samples).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from fastloop.runtime import fork

log = logging.getLogger("fastloop")

#: A tick that keeps failing is logged at most this often.
FAILURE_LOG_INTERVAL_S = 60.0


class Ticker:
    """Calls ``tick()`` every ``period_s`` on a daemon thread until stopped.

    ``tick()`` returning False ends the thread too; ``on_exit`` runs on the
    thread as it ends, however it ends.
    """

    def __init__(
        self,
        name: str,
        period_s: float,
        tick: Callable[[], bool],
        on_exit: Callable[[], None] | None = None,
    ) -> None:
        self._name = name
        self._period_s = period_s
        self._tick = tick
        self._on_exit = on_exit
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        #: Set while the thread ends for a fork: it starts again after it.
        self._pausing = False

    def start(self) -> None:
        self._thread.start()
        fork.across(self)

    def pause_for_fork(self) -> bool:
        if not self.running or self._thread is threading.current_thread():
            return False
        self._pausing = True
        self._stopping.set()
        self._thread.join()
        fork.wait_gone(self._thread.native_id)
        return True

    def resume_after_fork(self) -> None:
        self._pausing = False
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Returns once the thread has ended (idempotent; safe from the thread)."""
        self._stopping.set()
        started = self._thread.ident is not None
        if started and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        quiet_until = 0.0
        failures = 0
        try:
            while not self._stopping.wait(self._period_s):
                try:
                    if not self._tick():
                        return
                except Exception:
                    failures += 1
                    if time.monotonic() >= quiet_until:
                        quiet_until = time.monotonic() + FAILURE_LOG_INTERVAL_S
                        log.exception(
                            "fastloop: %s failed (%d times so far); going on, "
                            "next report of this in a minute at the earliest",
                            self._thread.name,
                            failures,
                        )
        finally:
            if self._on_exit is not None and not self._pausing:
                self._on_exit()
