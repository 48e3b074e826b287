"""Cross-thread state must not survive ``os.fork()``: the child starts clean.

A pending wake-up flag copied from the parent would be held forever in the
child (the parent's byte is not the child's), and the parent's queued
callbacks are not the child's to run.  State objects register here and are
reset in the child, so the hot paths need no per-call fork check.
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol


class ForkAware(Protocol):
    def reset_after_fork(self) -> None: ...


_tracked: weakref.WeakSet[ForkAware] = weakref.WeakSet()


def track(state: ForkAware) -> None:
    """Reset ``state`` in a forked child; held weakly, so it never leaks."""
    _tracked.add(state)


def _after_fork_in_child() -> None:
    for state in list(_tracked):
        state.reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
