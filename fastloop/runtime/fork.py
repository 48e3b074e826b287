"""Cross-thread state must not survive ``os.fork()``: the child starts clean.

A pending wake-up flag copied from the parent would be held forever in the
child (the parent's byte is not the child's), a lock held by a parent's
thread would never be released, and the parent's threads are not the
child's.  Whatever holds such state registers a reset here, run in the
child, so the hot paths need no per-call fork check.

One way to register: ``in_child(function)``.  A bound method is held
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
import weakref
from collections.abc import Callable
from types import MethodType

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
    for reset in list(_resets):
        function = reset()
        if function is not None:
            function()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
