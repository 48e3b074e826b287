"""FASTLOOP parsing: what is accepted, and one clear line for what is not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fastloop import config
from fastloop.patches import registry
from fastloop.runtime import bootstrap

KNOWN = ("add_callback", "wakeup", "write_to_fd")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", None),
        ("true", None),
        ("all", None),
        (" TRUE ", None),
        ("All", None),
        ("0", frozenset()),
        ("false", frozenset()),
        ("", frozenset()),
        ("   ", frozenset()),
        ("add_callback", frozenset({"add_callback"})),
        ("wakeup, Write_To_Fd", frozenset({"wakeup", "write_to_fd"})),
        ("add_callback,", frozenset({"add_callback"})),
        ("all,add_callback", frozenset(KNOWN)),
        ("1,add_callback", frozenset(KNOWN)),
        ("True, wakeup", frozenset(KNOWN)),
    ],
)
def test_accepted_values(value, expected):
    assert config.parse_patches(value, KNOWN) == (expected, [])


@pytest.mark.parametrize(
    ("value", "expected", "bad"),
    [
        ("yes", frozenset(), ("yes",)),
        ("2", frozenset(), ("2",)),
        ("-1", frozenset(), ("-1",)),
        ("on", frozenset(), ("on",)),
        ("add-callback", frozenset(), ("add-callback",)),
        ("add_callback;wakeup", frozenset(), ("add_callback;wakeup",)),
        ("add_callback,bogus", frozenset({"add_callback"}), ("bogus",)),
        ("true,false", frozenset(KNOWN), ("false",)),
        ("0,wakeup", frozenset({"wakeup"}), ("0",)),
        ("wakeup,,nope, zzz", frozenset({"wakeup"}), ("nope", "zzz")),
        ("\u2713", frozenset(), ("\u2713",)),
        ("add_callback wakeup", frozenset(), ("add_callback wakeup",)),
    ],
)
def test_malformed_values_keep_the_valid_part_and_name_the_bad_tokens(
    value, expected, bad
):
    chosen, problems = config.parse_patches(value, KNOWN)
    assert chosen == expected
    assert len(problems) == 1
    line = str(problems[0])
    assert "\n" not in line
    assert line.startswith("fastloop: ignoring ")
    assert f"FASTLOOP={value!r}" in line
    for token in bad:
        assert repr(token) in line
    assert (
        "accepted: 1, true, all, 0, false, empty, or a comma list of add_callback"
        in line
    )
    installed = ", ".join(sorted(expected)) if expected else "nothing"
    assert line.endswith(f"; installing {installed}")


@pytest.mark.parametrize(
    "value", ["1e308", "1e-9", "0.5", "1000001", "inf", "nan", "-5", "0", "fast"]
)
def test_a_switch_interval_out_of_range_is_refused_with_the_range(value):
    with pytest.raises(config.SettingError, match="from 1 to 1000000"):
        config.parse_setting("switch_interval_us", value)


@pytest.mark.parametrize("value", ["1", "1000000", "200", " auto "])
def test_a_switch_interval_in_range_is_taken(value):
    parsed = config.parse_setting("switch_interval_us", value)
    assert parsed == "auto" or parsed == float(value)


def test_bootstrap_never_raises(monkeypatch, capsys):
    def explode(names):
        raise RuntimeError("simulated failure")

    monkeypatch.setenv("FASTLOOP", "1")
    monkeypatch.setattr(registry, "install", explode)
    monkeypatch.setattr(bootstrap, "_started", False)
    bootstrap.run()
    bootstrap.run()  # a second .pth pass does nothing
    err = capsys.readouterr().err
    assert err == "fastloop: not activated: RuntimeError('simulated failure')\n"


def test_every_setting_is_one_row_that_start_up_run_and_doctor_read():
    import importlib

    from fastloop.cli import doctor

    rendered = doctor.render(doctor.diagnose({}, loop="asyncio"))
    run_help = subprocess.run(
        [sys.executable, "-m", "fastloop", "run", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    settings_page = Path(__file__).resolve().parents[1] / "docs" / "adopting.md"
    for row in config.SETTINGS:
        assert hasattr(config.settings, row.name)
        assert f"  {row.variable}" in rendered  # doctor's line
        if row.flag is not None:
            assert row.flag.option in run_help
        if row.on_change:
            module, _, function = row.on_change.partition(":")
            assert callable(getattr(importlib.import_module(module), function))
        if settings_page.exists():
            assert f"`{row.variable}`" in settings_page.read_text()
    assert config.ACTIVATING[0] == "FASTLOOP"
