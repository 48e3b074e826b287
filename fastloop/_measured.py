"""Measured figures that fastloop's advice quotes (``stats().dask``).

Written by ``bench/render_docs.py`` from ``bench/results/``; the
docs test fails when they differ.
"""

DIRECT_TO_WORKERS = (
    "measured 0.73 [0.71, 0.76] of the time of an idle actor call on stock "
    "(bench/results/dask_idle_streams.json)"
)
UVLOOP = (
    "measured 0.92 [0.90, 0.94] of the time of an idle actor call on stock "
    "(bench/results/dask_idle_streams.json)"
)
