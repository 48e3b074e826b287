"""The stats pipeline: every figure declared once, counted live, read as snapshots.

``schema`` declares each figure (kind, unit, merge rule, Prometheus metric,
report line) in the sections of ``fastloop.stats()``, with the vocabulary of
``fields``; ``live`` makes from it the counters that the patches and the
observers bump; ``pipeline`` reads them into snapshots (``stats()``,
``reset_stats()``, ``stream_stats()``); ``report`` and ``prometheus`` show a
snapshot.  The pipeline knows nothing of the patches or the observers: they
feed it.  This package imports nothing.
"""
