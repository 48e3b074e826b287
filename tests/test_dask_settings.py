"""fastloop.dask.settings: one value from four places, and the first that has it wins.

The precedence is a pure function of the environment, the preload's
arguments and dask's ``fastloop:`` section, so most of it is tested here
without dask; ``test_dask.py`` runs it in real worker processes.
"""

from __future__ import annotations

import logging

import pytest

import fastloop
from fastloop import config
from fastloop.dask import settings
from fastloop.patches import registry
from tests_support import default_set


def test_every_setting_has_a_key_in_dask_config_and_a_preload_option():
    assert settings.keys() == ["patches"] + [
        row.name.replace("_", "-") for row in config.SETTINGS
    ]


def test_nothing_set_means_every_default():
    chosen = settings.choose({}, (), {})
    assert chosen.patches is None  # the default set
    assert chosen.values == {}
    assert set(chosen.sources.values()) == {settings.DEFAULT}
    assert chosen.problems == []


def test_variable_beats_preload_argument_beats_dask_config():
    environ = {"FASTLOOP_BLOCK_MS": "30"}
    arguments = ["--block-ms", "20", "--poll-us=7"]
    section = {"block-ms": 10, "poll_us": 5, "switch-budget": 0.02}
    chosen = settings.choose(environ, arguments, section)
    assert chosen.values == {"block_ms": 30.0, "poll_us": 7.0, "switch_budget": 0.02}
    assert chosen.sources["block_ms"] == "FASTLOOP_BLOCK_MS"
    assert chosen.sources["poll_us"] == "preload argument --poll-us"
    assert chosen.sources["switch_budget"] == "dask config fastloop.switch-budget"
    assert chosen.sources["report"] == settings.DEFAULT


@pytest.mark.parametrize(
    ("environ", "arguments", "section", "patches", "source"),
    [
        ({}, (), {"patches": ["add_callback", "poll"]}, {"add_callback", "poll"},
         "dask config fastloop.patches"),
        ({}, ("--patches", "wakeup"), {"patches": "poll"}, {"wakeup"},
         "preload argument --patches"),
        ({"FASTLOOP": "0"}, ("--patches", "wakeup"), {}, set(), "FASTLOOP"),
        ({}, (), {"patches": False}, set(), "dask config fastloop.patches"),
        ({}, (), {"patches": "all,poll"}, {*default_set(dask=True), "poll"},
         "dask config fastloop.patches"),
    ],
)  # fmt: skip
def test_the_patches_follow_the_same_precedence(
    environ, arguments, section, patches, source
):
    chosen = settings.choose(environ, arguments, section)
    assert chosen.patches == frozenset(patches)
    assert chosen.sources["patches"] == source


def test_a_bad_value_is_one_line_and_the_next_place_applies():
    chosen = settings.choose(
        {"FASTLOOP_BLOCK_MS": "soon"}, ["--block-ms", "-1"], {"block-ms": 40}
    )
    assert chosen.values == {"block_ms": 40.0}
    assert chosen.sources["block_ms"] == "dask config fastloop.block-ms"
    assert [str(p) for p in chosen.problems] == [
        "fastloop: ignoring 'soon' in FASTLOOP_BLOCK_MS='soon'; "
        "accepted: a number > 0 (milliseconds)",
        "fastloop: ignoring '-1' in preload argument --block-ms='-1'; "
        "accepted: a number > 0 (milliseconds)",
    ]


def test_unknown_arguments_and_keys_are_named_once_and_the_rest_applies():
    chosen = settings.choose(
        {}, ["--blok-ms", "5", "--poll-us", "3", "--report"], {"nope": 1, "poll-us": 9}
    )
    assert chosen.values == {"poll_us": 3.0}
    lines = [str(p) for p in chosen.problems]
    assert lines[0].startswith(
        "fastloop: ignoring '--blok-ms', '5', '--report' in preload arguments="
    )
    assert lines[1].startswith("fastloop: ignoring 'nope' in dask config fastloop;")
    assert "accepted: patches, slow-write-ms," in lines[1]
    assert len(lines) == 2


def test_a_section_that_is_not_a_mapping_is_one_line():
    chosen = settings.choose({}, (), ["block-ms"])  # type: ignore[arg-type]
    assert chosen.values == {}
    [problem] = chosen.problems
    assert "accepted: a mapping" in str(problem)


def test_the_preload_applies_them_and_its_log_line_says_where_from(monkeypatch, caplog):
    from fastloop.dask import setup

    monkeypatch.delenv("FASTLOOP", raising=False)
    monkeypatch.setenv("FASTLOOP_SWITCH_BUDGET", "0.04")
    monkeypatch.setattr(
        settings,
        "dask_section",
        lambda: {"patches": ["add_callback", "write_to_fd"], "poll-us": 12},
    )
    with caplog.at_level(logging.INFO, logger="distributed.preloading"):
        setup(object(), ["--write-timing", "every", "--nope"])
    assert fastloop.installed() == {"add_callback", "write_to_fd"}
    assert config.settings.poll_us == 12.0
    assert config.settings.write_timing == "every"
    assert config.settings.switch_budget == 0.04
    assert config.sources["poll_us"] == "dask config fastloop.poll-us"
    assert config.sources["write_timing"] == "preload argument --write-timing"
    assert config.sources["switch_budget"] == "FASTLOOP_SWITCH_BUDGET"
    [warning] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning.startswith("fastloop: ignoring '--nope' in preload arguments=")
    [line] = [r.getMessage() for r in caplog.records if "preload in" in r.getMessage()]
    assert line.endswith(
        "; settings: write-timing=every (preload argument --write-timing), "
        "poll-us=12.0 (dask config fastloop.poll-us)"
    )


def test_the_command_line_preload_is_a_click_command_that_takes_any_arguments():
    click = pytest.importorskip("click")
    from fastloop.dask.cli import dask_setup

    assert isinstance(dask_setup, click.Command)
    # As distributed.preloading.Preload.start calls it:
    context = dask_setup.make_context(
        "dask_setup", ["--block-ms", "5", "--what"], allow_extra_args=False
    )
    assert context.params == {"arguments": ("--block-ms", "5", "--what")}


class Preload:
    """What dask keeps per preload (``distributed.preloading.Preload``)."""

    def __init__(self, module, argv):
        self.module, self.argv = module, argv


def test_the_plain_preload_finds_its_own_arguments_among_the_servers_preloads(
    monkeypatch,
):
    import sys
    import types

    import fastloop.dask

    server = types.SimpleNamespace(
        preloads=[
            Preload(types.ModuleType("other"), ["--other"]),
            Preload(sys.modules["fastloop.dask"], ["--poll-us", "4"]),
        ]
    )
    seen = []
    monkeypatch.setattr(fastloop.dask, "setup", lambda s, a: seen.append(list(a)))
    fastloop.dask.dask_setup(server)
    fastloop.dask.dask_setup(object())  # a server without preloads: none
    assert seen == [["--poll-us", "4"], []]


def test_what_the_application_set_in_code_is_left_alone(monkeypatch):
    from fastloop.dask import setup

    monkeypatch.delenv("FASTLOOP", raising=False)
    fastloop.configure(poll_us=21)
    monkeypatch.setattr(settings, "dask_section", lambda: {"poll-us": 12})
    setup(object(), ["--switch-budget", "0.03"])
    assert config.settings.poll_us == 21.0
    assert config.sources["poll_us"] == "fastloop.configure()"
    assert config.settings.switch_budget == 0.03


def test_patches_nothing_usable_in_a_place_falls_through_to_the_next():
    chosen = settings.choose(
        {}, ("--patches", "bogus"), {"patches": "wakeup,write_to_fd"}
    )
    assert chosen.patches == {"wakeup", "write_to_fd"}
    assert chosen.sources["patches"] == "dask config fastloop.patches"
    [problem] = chosen.problems
    assert str(problem).endswith("; the next place applies")


@pytest.mark.parametrize("value", ["banana", "yes", "1,poll", "0,wakeup", "on,off"])
def test_the_preload_installs_what_start_up_installed_for_a_bad_fastloop(value):
    known, default = registry.known(), registry.default_set()
    at_start_up, problems = config.patches_from_environ(
        {"FASTLOOP": value}, known, default
    )
    chosen = settings.choose({"FASTLOOP": value}, ("--patches", "wakeup"), {})
    assert chosen.patches == at_start_up
    assert chosen.sources["patches"] == "FASTLOOP"
    assert [str(p) for p in chosen.problems] == [str(p) for p in problems]
