"""fastloop/rules/prometheus.yml: valid for Prometheus, and each alert unit-tested.

``promtool`` (Debian's ``prometheus`` package, which ``.ci/run`` installs)
checks the rules and runs ``tests/prometheus/rules_test.yml`` against the
installed wheel's copy; ``test_dask_prometheus.py`` loads them into a real
Prometheus that scrapes a cluster.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fastloop.rules import PROMETHEUS as RULES

PROMTOOL = shutil.which("promtool")
UNIT_TESTS = Path(__file__).parent / "prometheus" / "rules_test.yml"
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="needs promtool (Debian: prometheus); .ci/run installs it"
)


def promtool(*arguments: str) -> str:
    assert PROMTOOL is not None
    done = subprocess.run(
        [PROMTOOL, *arguments], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@needs_promtool
def test_promtool_checks_the_shipped_rules():
    assert "SUCCESS: 8 rules found" in promtool("check", "rules", RULES)


@needs_promtool
def test_the_alerts_fire_where_they_should_and_only_there(tmp_path):
    text = UNIT_TESTS.read_text().replace("../../fastloop/rules/prometheus.yml", RULES)
    (tmp_path / "rules_test.yml").write_text(text)
    assert "SUCCESS" in promtool("test", "rules", str(tmp_path / "rules_test.yml"))


def test_every_alert_has_a_unit_test():
    alerts = set(re.findall(r"- alert: (\w+)", Path(RULES).read_text()))
    tested = set(re.findall(r"alertname: (\w+)", UNIT_TESTS.read_text()))
    assert alerts == tested
    assert len(alerts) == 4
