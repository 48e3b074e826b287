"""Cross-thread state must not survive ``os.fork()``: the child starts clean.

A pending wake-up flag copied from the parent would be held forever in the
child (the parent's byte is not the child's), and the parent's queued
callbacks are not the child's to run.  State objects register here and are
reset in the child, so the hot paths need no per-call fork check.

This is the only module that calls ``os.register_at_fork``, and only where
it exists: on a platform without ``fork`` (Windows) there is nothing to
reset, and importing fastloop must not fail there.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Protocol


class ForkAware(Protocol):
    def reset_after_fork(self) -> None: ...


_tracked: weakref.WeakSet[ForkAware] = weakref.WeakSet()
_functions: list[Callable[[], None]] = []


def track(state: ForkAware) -> None:
    """Reset ``state`` in a forked child; held weakly, so it never leaks."""
    _tracked.add(state)


def in_child(function: Callable[[], None]) -> None:
    """Call ``function`` in every forked child (module-level state; held for good)."""
    _functions.append(function)


def _after_fork_in_child() -> None:
    # State first (fresh locks), then the functions, in registration order
    # (a watchdog restarting in the child needs its counters' lock reset).
    for state in list(_tracked):
        state.reset_after_fork()
    for function in list(_functions):
        function()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
