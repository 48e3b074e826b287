"""The ``switchinterval`` patch: set on install, restored on uninstall, never fought."""

from __future__ import annotations

import sys

import pytest

import fastloop
from fastloop import config
from fastloop.patches import switchinterval

DEFAULT_S = switchinterval.CPYTHON_DEFAULT_S


@pytest.fixture(autouse=True)
def cpython_default():
    sys.setswitchinterval(DEFAULT_S)
    before = config.settings.switch_interval_us
    yield
    fastloop.uninstall()
    config.settings.switch_interval_us = before
    sys.setswitchinterval(DEFAULT_S)


def test_opt_in_only():
    assert "switchinterval" not in fastloop.install()
    assert sys.getswitchinterval() == DEFAULT_S


def test_install_sets_and_uninstall_restores():
    assert fastloop.install(["switchinterval"]) == {"switchinterval"}
    assert sys.getswitchinterval() == pytest.approx(
        config.settings.switch_interval_us / 1e6
    )
    fastloop.uninstall(["switchinterval"])
    assert sys.getswitchinterval() == DEFAULT_S


def test_an_application_value_set_after_install_is_kept():
    fastloop.install(["switchinterval"])
    sys.setswitchinterval(0.002)
    fastloop.configure(switch_interval_us=100)  # does not fight it either
    assert sys.getswitchinterval() == pytest.approx(0.002)
    fastloop.uninstall()
    assert sys.getswitchinterval() == pytest.approx(0.002)


def test_an_application_value_set_before_install_declines(caplog):
    sys.setswitchinterval(0.001)
    assert "application chose it" in (fastloop.available()["switchinterval"] or "")
    with caplog.at_level("WARNING", logger="fastloop"):
        assert fastloop.install(["switchinterval"]) == frozenset()
    assert sys.getswitchinterval() == pytest.approx(0.001)
    assert len(caplog.records) == 1
    assert "switchinterval" in caplog.records[0].getMessage()


def test_configure_applies_while_installed():
    fastloop.install(["switchinterval"])
    fastloop.configure(switch_interval_us=250)
    assert sys.getswitchinterval() == pytest.approx(0.00025)
    fastloop.uninstall()
    assert sys.getswitchinterval() == DEFAULT_S


def test_patched_restores_the_prior_interval():
    with fastloop.patched(["switchinterval"]):
        assert sys.getswitchinterval() < DEFAULT_S
    assert sys.getswitchinterval() == DEFAULT_S


@pytest.mark.parametrize("bad", ["0", "-5", "fast", "inf"])
def test_bad_values_are_refused(bad):
    with pytest.raises(ValueError, match="switch_interval_us"):
        fastloop.configure(switch_interval_us=bad)
    chosen, problems = config.settings_from_environ(
        {"FASTLOOP_SWITCH_INTERVAL_US": bad}
    )
    assert chosen == {}
    assert "FASTLOOP_SWITCH_INTERVAL_US" in str(problems[0])
