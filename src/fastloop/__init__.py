"""fastloop: cheaper Tornado IOLoops, with no code change, proven by A/B benchmarks.

import fastloop
fastloop.install()        # all default patches, now or when Tornado is imported
...
print(fastloop.report())  # what they did
fastloop.watch(threshold_ms=100)         # log where a blocked loop is stuck
with fastloop.profile() as p: ...        # sample the loop threads

PYTEST_DONT_REWRITE: pytest rewrites the asserts of every package that ships
a pytest plugin, and warns when one was imported first, as the .pth does
under FASTLOOP=1 (fastloop has no assert to rewrite).
"""

from fastloop import patches as _patches  # noqa: F401  (registers the patch records)
from fastloop._registry import available, install, installed, patched, uninstall
from fastloop._stats import (
    Snapshot,
    StreamStats,
    report,
    reset_stats,
    stats,
    stream_stats,
)
from fastloop.config import configure
from fastloop.profiler import Profile, profile
from fastloop.watchdog import Watchdog, watch

__version__ = "0.1.0"

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
