"""The write_to_fd patch alone as an in-process arm, for the echo probes."""

from __future__ import annotations

from collections.abc import Callable

import fastloop
from fastloop.patches import write_to_fd
from fastloop.patches.write_to_fd import SAMPLE_EVERY


def write_to_fd_arm(
    workload: Callable[[], float], timing: str, every: int = SAMPLE_EVERY
) -> Callable[[], float]:
    """``workload`` under the patch in ``timing`` mode; an ``every`` other
    than the default tries another sampling gap (10**12: no call timed after
    a stream's first).  The patch reads the gap when it installs."""

    def arm() -> float:
        fastloop.configure(write_timing=timing)
        write_to_fd.SAMPLE_EVERY = every
        try:
            with fastloop.patched(["write_to_fd"]):
                return workload()
        finally:
            fastloop.configure(write_timing="sampled")
            write_to_fd.SAMPLE_EVERY = SAMPLE_EVERY

    return arm
