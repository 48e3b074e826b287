"""Exit outputs (``FASTLOOP_REPORT``, ``FASTLOOP_PROFILE``), written on SIGTERM too.

Docker, systemd, Kubernetes and dask's nanny stop a process with SIGTERM,
whose default action kills it without running ``atexit``: the report and
the profile the user asked for would be lost.  As coverage.py's ``sigterm``
option does, a handler is installed, but only where the application has
none of its own: SIGTERM must be at ``SIG_DFL`` when an output is armed
(at start-up, before the application runs).  An application that installs
its own handler later simply replaces ours, and its handler decides how the
process ends (a normal exit then runs the ``atexit`` writers).  Ours
writes the outputs, restores ``SIG_DFL`` and raises SIGTERM again, so the
exit status stays "killed by SIGTERM".
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

#: Longest wait for the outputs before the process dies anyway: a writer
#: blocked on a lock that the interrupted main thread holds must not turn
#: SIGTERM into a hang.
WRITE_TIMEOUT_S = 10.0

_writers: list[Callable[[], None]] = []
_done: set[int] = set()
_lock = threading.Lock()


def register(writer: Callable[[], None]) -> None:
    """Run ``writer`` once at interpreter exit, or on SIGTERM if the app has no handler.

    ``writer`` must not raise (it reports its own failures in one line).
    """
    with _lock:
        _writers.append(writer)
    atexit.register(_run_once, writer)
    _arm_sigterm()


def _run_once(writer: Callable[[], None]) -> None:
    with _lock:
        if id(writer) in _done:
            return
        _done.add(id(writer))
    writer()


def _arm_sigterm() -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # signal.signal only works there; atexit still writes
    try:
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError, AttributeError):  # no SIGTERM here (Windows)
        pass


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    # The writers run on a thread of their own: the main thread was
    # interrupted at an arbitrary point and may hold a lock they need.
    writing = threading.Thread(
        target=_write_all, name="fastloop-exit-outputs", daemon=True
    )
    writing.start()
    writing.join(WRITE_TIMEOUT_S)
    if writing.is_alive():
        print(
            f"fastloop: exit outputs not written within {WRITE_TIMEOUT_S:g} s "
            "of SIGTERM; exiting anyway",
            file=sys.stderr,
        )
    sys.stderr.flush()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _write_all() -> None:
    with _lock:
        writers = list(_writers)
    for writer in writers:
        _run_once(writer)
