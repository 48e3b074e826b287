"""fastloop: cheaper Tornado IOLoops, with no code change, proven by A/B benchmarks.

import fastloop
fastloop.install()        # all default patches, now or when Tornado is imported
...
print(fastloop.report())  # what they did
fastloop.watch(threshold_ms=100)         # log where a blocked loop is stuck
with fastloop.profile() as p: ...        # sample the loop threads

The public surface is this module; each name loads on first use from the
folder that does the work: ``patches`` (what changes Tornado and asyncio,
and the registry that applies and undoes it), ``telemetry`` (the stats
pipeline), ``observers`` (watchdog, profiler, GIL measure), ``runtime``
(start-up, settings in motion, fork and exit) and ``cli``.  The ``.pth``
start-up hook imports ``fastloop.runtime.bootstrap``, hence this package,
in every process started under ``FASTLOOP=1``: it imports nothing (not even
``typing`` or ``importlib``), and the first use of a public name completes a
start-up that is still waiting for the process's first event loop.

PYTEST_DONT_REWRITE: pytest rewrites the asserts of every package that ships
a pytest plugin, and warns when one was imported first, as the .pth does
under FASTLOOP=1 (fastloop has no assert to rewrite).
"""

from __future__ import annotations

TYPE_CHECKING = False  # mypy reads it as true; ``typing`` costs ~2 ms
if TYPE_CHECKING:
    from typing import Any

    from fastloop.observers.profiler import Profile, profile
    from fastloop.observers.watchdog import Watchdog, watch
    from fastloop.patches.registry import (
        available,
        install,
        installed,
        patched,
        uninstall,
    )
    from fastloop.runtime.bootstrap import configure
    from fastloop.telemetry.pipeline import reset_stats, stream_stats
    from fastloop.telemetry.schema import Snapshot, StreamStats

__version__ = "0.1.0"

#: public name -> the module that defines it
_HOMES = {
    "available": "fastloop.patches.registry",
    "install": "fastloop.patches.registry",
    "installed": "fastloop.patches.registry",
    "patched": "fastloop.patches.registry",
    "uninstall": "fastloop.patches.registry",
    "Snapshot": "fastloop.telemetry.schema",
    "StreamStats": "fastloop.telemetry.schema",
    "reset_stats": "fastloop.telemetry.pipeline",
    "stream_stats": "fastloop.telemetry.pipeline",
    "configure": "fastloop.runtime.bootstrap",
    "Profile": "fastloop.observers.profiler",
    "profile": "fastloop.observers.profiler",
    "Watchdog": "fastloop.observers.watchdog",
    "watch": "fastloop.observers.watchdog",
}

__all__ = [
    "Profile",
    "Snapshot",
    "StreamStats",
    "Watchdog",
    "__version__",
    "available",
    "configure",
    "install",
    "installed",
    "patched",
    "profile",
    "report",
    "reset_stats",
    "stats",
    "stream_stats",
    "uninstall",
    "watch",
]


def stats() -> Snapshot:
    """An immutable snapshot of every figure, with the patches active now."""
    from fastloop.runtime.bootstrap import run_if_deferred

    run_if_deferred()
    from fastloop.patches import registry
    from fastloop.telemetry import pipeline

    return pipeline.snapshot(registry.installed())


def report(snapshot: Snapshot | None = None) -> str:
    """A readable table of ``stats()`` (or of ``snapshot``)."""
    from fastloop.telemetry.report import render

    return render(snapshot or stats())


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'fastloop' has no attribute {name!r}")
    import importlib

    from fastloop.runtime.bootstrap import run_if_deferred

    run_if_deferred()
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
