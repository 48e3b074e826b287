"""The patches, one module each: what fastloop changes in Tornado, asyncio and dask.

Each patch module holds a ``PATCH`` record (``Patch``, below) whose
``apply()`` lists its changes (``changes``: class attributes, per-object
state, process settings); the registry (``registry``) performs and undoes
them all.  ``RECORDS`` names each patch, its target module and its own
module, in default-set order; the registry knows the patches by that row and
imports a patch's module only with its target (start-up pays for no patch
whose target the application never imports).  This package imports no
other fastloop module.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastloop.patches.changes import Change

#: (name, target module, the patch's module, in the default set)
RECORDS = (
    ("add_callback", "tornado.platform.asyncio", f"{__name__}.add_callback", True),
    ("wakeup", "asyncio.selector_events", f"{__name__}.wakeup", True),
    ("write_to_fd", "tornado.iostream", f"{__name__}.write_to_fd", True),
    (
        "read_interest",
        "tornado.platform.asyncio",
        f"{__name__}.read_interest",
        True,
    ),
    ("read_buffer", "tornado.iostream", f"{__name__}.read_buffer", True),
    ("write_callback", "tornado.iostream", f"{__name__}.write_callback", True),
    ("poll", "asyncio.selector_events", f"{__name__}.poll", False),
    ("switchinterval", "tornado.ioloop", f"{__name__}.switchinterval", True),
    (
        "dask_loop_profile",
        "distributed.profile",
        f"{__name__}.dask_loop_profile",
        True,
    ),
    (
        "dask_task_profile",
        "distributed.worker",
        f"{__name__}.dask_task_profile",
        True,
    ),
    ("dask_tick", "distributed.core", f"{__name__}.dask_tick", True),
    ("dask_memory", "distributed.worker_memory", f"{__name__}.dask_memory", True),
    ("dask_timeouts", "distributed.scheduler", f"{__name__}.dask_timeouts", True),
)

#: Packages fastloop never imports itself, though patches target them: they
#: apply when the application imports the package (importing distributed
#: configures logging and reads dask's config, which is the application's to do).
ON_IMPORT_ONLY = ("distributed",)

#: How every decline for want of a GIL starts (``fastloop doctor`` tells
#: those apart: off by design in this build, not a failure).
NO_GIL = "no GIL in this build (free-threaded)"


def gil_enabled() -> bool:
    """False on a free-threaded build running without its GIL (3.13t and later)."""
    is_enabled = getattr(sys, "_is_gil_enabled", None)
    return True if is_enabled is None else bool(is_enabled())


def stretch_unsupported() -> str | None:
    """Why a patch cannot stretch a Tornado ``PeriodicCallback`` by setting
    its ``callback_time`` during a run (``dask_tick``, ``dask_memory``,
    ``dask_timeouts``), or None."""
    from tornado.ioloop import PeriodicCallback

    update = getattr(PeriodicCallback.__dict__.get("_update_next"), "__code__", None)
    if update is None or not {"callback_time", "_next_timeout"} <= set(update.co_names):
        return "PeriodicCallback no longer reads callback_time when it reschedules"
    return None


def after_timers(loop: Any, callback: Callable[[], None]) -> None:
    """Run ``callback`` on ``loop`` behind its next iteration's handles: as a
    timer due now, which asyncio moves to the ready queue behind what is
    there and behind the timers due before it.  Called as an iteration
    begins (a listener, before the due timers move), it runs last in that
    iteration; whatever is ready then is for the iteration after."""
    loop.call_at(loop.time(), callback)


#: How long after a timer its loop has anyway a stretched callback runs: by
#: then the wake-up for that timer is under way, and asyncio runs every
#: timer due (its epoll timeout is rounded up to the millisecond).
SHARE_S = 20e-6


def stretch(pc: Any, longest_s: float, interval_s: float) -> float:
    """From ``pc``'s own run, set its next run at most ``longest_s`` from
    now and never sooner than its ``interval_s``: just after the latest
    timer its loop has anyway in the second half of that span, if any, so
    that one wake-up serves both.  Returns the ``callback_time`` set (ms),
    which Tornado reads as the run ends.  Each sleeping run stretches
    again: the value holds for one run only."""
    ioloop = pc.io_loop
    loop = ioloop.asyncio_loop
    now = loop.time()
    span = max(longest_s, interval_s)
    early, late = now + max(span / 2, interval_s), now + span - SHARE_S
    shared = max(
        (
            handle.when()
            for handle in getattr(loop, "_scheduled", ())
            if early <= handle.when() <= late and not handle.cancelled()
        ),
        default=None,
    )
    delay = span if shared is None else shared - now + SHARE_S
    # Tornado's next run is _next_timeout (this run's, on its own clock)
    # plus callback_time, while the run ends within it.  A wall clock that
    # stepped back past this run's deadline would make that negative:
    # count from now instead, as Tornado does for a late run.
    current = ioloop.time()
    if pc._next_timeout > current:
        pc._next_timeout = current
    callback_time: float = (current + delay - pc._next_timeout) * 1000
    pc.callback_time = callback_time
    return callback_time


def rewind(pc: Any, callback_time: float) -> None:
    """Put a stretched ``PeriodicCallback`` back to ``callback_time``, its
    next run that long from now: unless a run is due or under way (its
    timer has fired; from Tornado 6.3 the run, a coroutine, starts an
    iteration later), which reschedules with ``callback_time`` as it ends,
    where a restart would leave two timer chains."""
    pc.callback_time = callback_time
    if pc.is_running() and pc._next_timeout > pc.io_loop.time():
        pc.stop()
        pc.start()


def changed_method(cls: type, needs: Mapping[str, set[str]]) -> str | None:
    """The first method of ``cls`` (its own, not a base's) whose code no longer
    uses every name ``needs`` lists for it; None if all still do."""
    for name, names in needs.items():
        code = getattr(cls.__dict__.get(name), "__code__", None)
        if code is None or not names <= set(code.co_names):
            return name
    return None


def loop_class(loop: object) -> str:
    """The qualified name of an event loop's class: ``uvloop.Loop``."""
    kind = type(loop)
    return f"{kind.__module__}.{kind.__qualname__}"


def needs_gil(why: str) -> str | None:
    """A ``check()``'s decline where there is no GIL (``why``: what relies on it)."""
    return None if gil_enabled() else f"{NO_GIL}: {why}"


class Patch:
    """A patch record (a plain class: it is built while the interpreter starts
    under FASTLOOP=1, where a NamedTuple costs ~0.1-0.3 ms to define and a
    dataclass ~0.4 ms, ``python -X importtime``).

    ``check(module)`` returns None when the internals it replaces look exactly
    as expected, else a one-line reason.  ``apply(module)`` returns the
    changes, in the order the registry makes them; it must not change
    anything itself.  ``check_loop(loop)``, where a patch acts only on some
    kinds of asyncio loop, returns None for a loop it acts on, else why that
    loop keeps stock behaviour (the reason ``declined_on_loop`` logs); the
    class-level ``check()`` never asks which loop the application runs.

    ``replaces`` and ``relies_on`` say, in Markdown, what the patch swaps and
    which private names it depends on (the docs' "What it replaces" table).
    ``verifies`` names the Python functions among those, as
    ``"module:Qualified.name"``: the patch applies only where each one's
    source is one the suite passed on (``fingerprints``).
    """

    __slots__ = (
        "apply",
        "check",
        "check_loop",
        "name",
        "relies_on",
        "replaces",
        "summary",
        "target",
        "verifies",
    )

    def __init__(
        self,
        *,
        name: str,
        target: str,
        summary: str,
        replaces: str,
        relies_on: str,
        verifies: tuple[str, ...],
        check: Callable[[ModuleType], str | None],
        apply: Callable[[ModuleType], list[Change]],
        check_loop: Callable[[Any], str | None] | None = None,
    ) -> None:
        self.name = name
        self.target = target
        self.summary = summary
        self.replaces = replaces
        self.relies_on = relies_on
        self.verifies = verifies
        self.check = check
        self.apply = apply
        self.check_loop = check_loop
