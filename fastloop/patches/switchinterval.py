"""A shorter interpreter switch interval while installed.

A thread that wants the GIL waits until the holder drops it, and a thread
running pure Python drops it only when the switch interval (5 ms by
default) has passed since the waiter asked.  The loop thread asks after
every syscall (poll, ``send``, the self-pipe read), so beside one busy task
thread each of those costs up to 5 ms: dask's "1 ms actor calls take 5 ms".
A shorter interval bounds that wait; the price is more GIL hand-overs
between compute threads, measured in the README's switch-interval table.

Rules: the value found at install is put back at uninstall, only if the
interval is still the one we set (an application that set its own after
us keeps it); a process whose interval is not CPython's default when we
install has chosen its own, and the patch declines rather than override
it.  ``configure(switch_interval_us=...)`` applies at once while the
interval is still ours.
"""

from __future__ import annotations

import logging
import sys
from types import ModuleType

from fastloop.config import settings
from fastloop.patches import Patch, registry
from fastloop.patches.changes import Change

log = logging.getLogger("fastloop")

#: CPython's default switch interval, in seconds.
CPYTHON_DEFAULT_S = 0.005


def check(module: ModuleType) -> str | None:
    if not callable(getattr(module, "setswitchinterval", None)):
        return "sys.setswitchinterval is missing"
    found = module.getswitchinterval()
    if abs(found - CPYTHON_DEFAULT_S) > 1e-9:
        return (
            f"the switch interval is {found * 1e6:g} us, not CPython's default "
            f"{CPYTHON_DEFAULT_S * 1e6:g} us: the application chose it, left alone"
        )
    return None


class ShorterInterval(Change):
    """The interval we set, and the one we found: a process setting, undone."""

    __slots__ = ("found", "ours")

    def __init__(self) -> None:
        self.found = self.ours = 0.0

    def do(self) -> None:
        self.found = self.ours = sys.getswitchinterval()
        self.follow()

    def follow(self) -> None:
        """Set ``settings.switch_interval_us``, unless someone changed ours."""
        if sys.getswitchinterval() != self.ours:
            log.info("fastloop: the switch interval was changed by someone else: kept")
            return
        sys.setswitchinterval(settings.switch_interval_us / 1e6)
        self.ours = sys.getswitchinterval()

    def undo(self) -> None:
        if sys.getswitchinterval() == self.ours:
            sys.setswitchinterval(self.found)
        else:
            log.info(
                "fastloop: switch interval %g us was set by the application: kept",
                sys.getswitchinterval() * 1e6,
            )


def apply(module: ModuleType) -> list[Change]:
    return [ShorterInterval()]


def follow_setting(interval_us: float) -> None:
    """``configure(switch_interval_us=...)``: apply it now if installed."""
    change = registry.applied_change("switchinterval", ShorterInterval)
    if change is not None:
        change.follow()


PATCH = Patch(
    name="switchinterval",
    target="sys",
    summary="a shorter interpreter switch interval while installed",
    check=check,
    apply=apply,
)
