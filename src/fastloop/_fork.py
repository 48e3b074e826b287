"""A fork generation: per-loop cross-thread state created before ``os.fork()``
belongs to the parent, and the child must start clean (no pending wake-up
flag it would wait on forever, no parent's queued callbacks)."""

from __future__ import annotations

import os

#: Bumped in a forked child; state records the generation it was made in.
generation = [0]


def _after_fork_in_child() -> None:
    generation[0] += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
