"""fastloop: cheaper Tornado IOLoops, with no code change, proven by A/B benchmarks.

import fastloop
fastloop.install()        # all default patches, now or when Tornado is imported
...
print(fastloop.report())  # what they did
fastloop.watch(threshold_ms=100)         # log where a blocked loop is stuck
with fastloop.profile() as p: ...        # sample the loop threads

The names below load on first use: the ``.pth`` start-up hook imports
``fastloop._bootstrap``, hence this package, and must not pay for the
counters, the watchdog or the profiler unless they are asked for.

PYTEST_DONT_REWRITE: pytest rewrites the asserts of every package that ships
a pytest plugin, and warns when one was imported first, as the .pth does
under FASTLOOP=1 (fastloop has no assert to rewrite).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastloop._bootstrap import configure
    from fastloop._registry import available, install, installed, patched, uninstall
    from fastloop._report import report
    from fastloop._snapshot import Snapshot, StreamStats
    from fastloop._stats import reset_stats, stats, stream_stats
    from fastloop.observers.profiler import Profile, profile
    from fastloop.observers.watchdog import Watchdog, watch

__version__ = "0.1.0"

#: public name -> the module that defines it
_HOMES = {
    "available": "fastloop._registry",
    "install": "fastloop._registry",
    "installed": "fastloop._registry",
    "patched": "fastloop._registry",
    "uninstall": "fastloop._registry",
    "Snapshot": "fastloop._snapshot",
    "StreamStats": "fastloop._snapshot",
    "report": "fastloop._report",
    "reset_stats": "fastloop._stats",
    "stats": "fastloop._stats",
    "stream_stats": "fastloop._stats",
    "configure": "fastloop._bootstrap",
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


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'fastloop' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
