"""fastloop: cheaper Tornado IOLoops, with no code change, proven by A/B benchmarks.

import fastloop
fastloop.install()        # all default patches, now or when Tornado is imported
...
print(fastloop.report())  # what they did
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

__version__ = "0.1.0"

__all__ = [
    "Snapshot",
    "StreamStats",
    "__version__",
    "available",
    "configure",
    "install",
    "installed",
    "patched",
    "report",
    "reset_stats",
    "stats",
    "stream_stats",
    "uninstall",
]
