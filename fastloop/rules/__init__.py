"""Rules for the systems that watch fastloop's metrics, shipped as files.

``prometheus.yml``: recording and alerting rules for Prometheus over the
metrics of ``fastloop.prometheus`` (checked by ``promtool check rules`` and
unit-tested by ``promtool test rules`` in the project's tests).  Point
Prometheus's ``rule_files`` at ``python -m fastloop.rules``'s answer, or
copy the file.
"""

from __future__ import annotations

import os

PROMETHEUS = os.path.join(os.path.dirname(__file__), "prometheus.yml")
