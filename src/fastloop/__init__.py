"""fastloop: cheaper Tornado IOLoops, with no code change, proven by A/B benchmarks.

import fastloop
fastloop.install()        # all default patches, now or when Tornado is imported
"""

from fastloop import patches as _patches  # noqa: F401  (registers the patch records)
from fastloop._registry import available, install, installed, patched, uninstall
from fastloop.stats import Snapshot, reset_stats, stats

__version__ = "0.1.0"

__all__ = [
    "Snapshot",
    "__version__",
    "available",
    "install",
    "installed",
    "patched",
    "reset_stats",
    "stats",
    "uninstall",
]
