"""Cross-thread state must not survive ``os.fork()``: the child starts clean.

A pending wake-up flag copied from the parent would be held forever in the
child (the parent's byte is not the child's), a lock held by a parent's
thread would never be released, and the parent's threads are not the
child's.  Whatever holds such state registers a reset here, run in the
child, so the hot paths need no per-call fork check.

Threads of fastloop's own (the watchdog, the profiler, auto mode's
controller) stop just before a fork and start again after it in the parent
(``across(owner)``): from 3.12 CPython warns that forking a multi-threaded
process may deadlock the child, an error under ``-W error`` (3.15 raises it
in Tornado's pre-forking tests), and stock forks with no thread of ours.

One way to register a reset: ``in_child(function)``.  A bound method is held
weakly (its object, a loop's state, may be collected long before any fork);
anything else is held for good.  Resets run in registration order: module
state registered at import comes before what starts later (a watchdog that
restarts in the child finds its recorder's lock already fresh).

This is the only module that calls ``os.register_at_fork``, and only where
it exists: on a platform without ``fork`` (Windows) there is nothing to
reset, and importing fastloop must not fail there.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable
from types import MethodType
from typing import Any, Protocol

_resets: list[Callable[[], Callable[[], None] | None]] = []
_pruned_at = 64


def in_child(function: Callable[[], None]) -> None:
    """Call ``function`` in every child made by ``os.fork``."""
    global _pruned_at
    if isinstance(function, MethodType):
        _resets.append(weakref.WeakMethod(function))
    else:
        _resets.append(lambda: function)
    if len(_resets) > _pruned_at:  # forget collected objects, amortised
        _resets[:] = [reset for reset in _resets if reset() is not None]
        _pruned_at = 2 * len(_resets) + 64


def _after_fork_in_child() -> None:
    _paused.clear()  # the parent's threads are not the child's to resume
    for reset in list(_resets):
        function = reset()
        if function is not None:
            function()


class Pausable(Protocol):
    def pause_for_fork(self) -> bool:
        """Stop the thread, if it runs, and wait for it; True if it ran."""

    def resume_after_fork(self) -> None:
        """Start it again (in the parent)."""


_owners: weakref.WeakSet[Any] = weakref.WeakSet()
_paused: list[Pausable] = []


def across(owner: Pausable) -> None:
    """Pause ``owner``'s thread around every ``os.fork`` (held weakly)."""
    _owners.add(owner)


def _before_fork() -> None:
    for owner in list(_owners):
        if owner.pause_for_fork():
            _paused.append(owner)


def _after_fork_in_parent() -> None:
    paused = list(_paused)
    _paused.clear()
    for owner in paused:
        owner.resume_after_fork()


def wait_gone(native_id: int | None, timeout_s: float = 0.1) -> None:
    """Until the OS no longer lists thread ``native_id`` (Linux; at most
    ``timeout_s``): a joined thread may still be ending, and the fork
    warning counts the process's threads as the OS does."""
    if native_id is None:
        return
    task = f"/proc/self/task/{native_id}"
    deadline = time.monotonic() + timeout_s
    while os.path.exists(task) and time.monotonic() < deadline:
        time.sleep(0.0002)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
