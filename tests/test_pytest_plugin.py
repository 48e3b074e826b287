"""The pytest plugin (entry point ``pytest11``), driven through ``pytester``.

Tornado's patched modules are imported here, before any inner run: an
inline pytester run drops from ``sys.modules`` whatever it imported.
A/B workloads return made-up seconds that depend on whether patches are
installed, so every ratio is decided by construction, never by timing.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
import tornado.iostream
import tornado.platform.asyncio  # noqa: F401  (the docstring says why)

import fastloop
from tests_support import default_set, require_installed_pth

pytest_plugins = ["pytester"]

WORKLOADS = """
import itertools
import tornado.ioloop  # the patches apply to an imported Tornado
import fastloop

def half():
    return 0.5 if fastloop.installed() else 1.0

def slower():
    return 1.2 if fastloop.installed() else 1.0

_scatter = itertools.cycle([0.8, 1.25])

def scattered():
    return next(_scatter) if fastloop.installed() else 1.0
"""


@pytest.fixture
def ab_workloads(pytester):
    pytester.makepyfile(ab_workloads=WORKLOADS)


def test_option_installs_for_the_session_exports_and_restores(pytester, monkeypatch):
    require_installed_pth()  # the subprocess activates through the .pth
    monkeypatch.delenv("FASTLOOP", raising=False)
    pytester.makepyfile(
        """
        import os, subprocess, sys
        import tornado.ioloop
        import fastloop

        def test_patched_in_process_and_in_subprocesses():
            assert fastloop.installed() == {"add_callback", "wakeup"}
            assert os.environ["FASTLOOP"] == "add_callback,wakeup"
            code = (
                "import tornado.platform.asyncio, fastloop; "
                "print(sorted(fastloop.installed()))"
            )
            child = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True
            )
            assert child.stdout.strip() == "['add_callback', 'wakeup']"
        """
    )
    result = pytester.runpytest("--fastloop=wakeup,add_callback")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "fastloop: add_callback, wakeup installed in-process, "
            "FASTLOOP=add_callback,wakeup for subprocesses"
        ]
    )
    assert fastloop.installed() == frozenset()
    assert "FASTLOOP" not in os.environ


def test_option_alone_installs_the_default_set_and_keeps_a_prior_state(
    pytester, monkeypatch
):
    monkeypatch.setenv("FASTLOOP", "wakeup")
    fastloop.install(["wakeup"])
    # distributed's patches are active only where it is imported already (the
    # inner run shares this process's modules).
    active = default_set(dask="distributed" in sys.modules)
    pytester.makepyfile(
        """
        import os
        import tornado.ioloop
        import fastloop

        DEFAULT = DEFAULT_SET

        def test_default_set():
            assert sorted(fastloop.installed()) == DEFAULT
            assert os.environ["FASTLOOP"] == "1"
        """.replace("DEFAULT_SET", repr(active))
    )
    result = pytester.runpytest("--fastloop")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"fastloop: {', '.join(active)} *"])
    assert fastloop.installed() == {"wakeup"}
    assert os.environ["FASTLOOP"] == "wakeup"


def test_a_bad_patch_name_is_a_usage_error(pytester):
    pytester.makepyfile("def test_nothing(): pass")
    result = pytester.runpytest("--fastloop", "test_bad_patch_name.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--fastloop: 'test_bad_patch_name.py' is not a patch*put test paths before*"]
    )
    assert fastloop.installed() == frozenset()


def test_without_the_option_the_plugin_imports_and_changes_nothing(
    pytester, monkeypatch
):
    monkeypatch.delenv("FASTLOOP", raising=False)
    pytester.makepyfile(
        """
        import os, sys

        def test_untouched():
            assert not [m for m in sys.modules if m.startswith("fastloop")]
            assert "FASTLOOP" not in os.environ
        """
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)
    assert "fastloop:" not in result.stdout.str()
    result.stdout.fnmatch_lines(["plugins:*fastloop-*"])


def test_fastloop_set_at_start_up_gives_no_assert_rewrite_warning(
    pytester, monkeypatch
):
    # The .pth imports fastloop before pytest marks the plugin's package for
    # assert rewriting: PYTEST_DONT_REWRITE keeps that from warning.
    require_installed_pth()
    monkeypatch.setenv("FASTLOOP", "1")
    pytester.makepyfile(
        """
        import sys

        def test_activated_by_the_pth():
            assert "fastloop" in sys.modules
        """
    )
    result = pytester.runpytest_subprocess(
        "-W", "error::pytest.PytestAssertRewriteWarning"
    )
    result.assert_outcomes(passed=1)


def summary_row(result, test_id):
    """The summary table's cells for one test id."""
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if "fastloop A/B" in line)
    assert lines[start + 1].split() == [
        "workload",
        "patched/stock",
        "95%",
        "interval",
        "rounds",
        "noisy",
    ]
    [row] = [line for line in lines[start + 2 :] if line.startswith(test_id + " ")]
    return row.split()


@pytest.mark.usefixtures("ab_workloads")
def test_fixture_records_prints_and_writes_json(pytester, tmp_path):
    pytester.makepyfile(
        test_recorded="""
        from ab_workloads import half, scattered

        def test_half(fastloop_ab):
            result = fastloop_ab(half, rounds=9)
            assert len(result.ratios) == 9  # narrow at once: no added rounds
            result.assert_faster()

        def test_scattered(fastloop_ab):
            result = fastloop_ab(scattered, 8, max_rounds=20, name="scattered")
            assert len(result.ratios) == 20 and result.noisy
            result.assert_not_slower()  # the interval holds 1: a noisy pass
        """
    )
    path = tmp_path / "ab.json"
    result = pytester.runpytest("-rP", "--fastloop-ab-json", str(path))
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_recorded.py::test_half: patched/stock = 0.500 "
            "[[]0.500, 0.500[]] over 9 rounds"
        ]
    )
    assert summary_row(result, "test_recorded.py::test_half") == [
        "test_recorded.py::test_half",
        "0.500",
        "[0.500,",
        "0.500]",
        "9",
    ]
    assert summary_row(result, "scattered")[-2:] == [
        "20",
        "noisy",
    ]
    results = json.loads(path.read_text())["results"]
    assert [(r["name"], r["ratio"], r["rounds"], r["noisy"]) for r in results] == [
        ("test_recorded.py::test_half", 0.5, 9, False),
        ("scattered", pytest.approx(1.0, abs=0.3), 20, True),
    ]
    assert results[1]["test"] == "test_recorded.py::test_scattered"


@pytest.mark.usefixtures("ab_workloads")
def test_a_slower_ratio_fails_its_test_with_the_interval(pytester):
    pytester.makepyfile(
        test_slow="""
        from ab_workloads import slower

        def test_slower(fastloop_ab):
            fastloop_ab(slower, rounds=7).assert_not_slower(0.1)
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*AssertionError: patched slower than stock: the whole 95% interval is "
            "above 1.100: test_slow.py::test_slower: patched/stock = 1.200 "
            "[[]1.200, 1.200[]] over 7 rounds"
        ]
    )


def test_the_patches_chosen_by_the_option_are_the_fixture_default(pytester):
    pytester.makepyfile(
        test_choice="""
        import fastloop

        def test_arms(fastloop_ab):
            seen = set()
            fastloop_ab(lambda: seen.add(fastloop.installed()) or 1.0, rounds=6)
            assert seen == {frozenset(), frozenset({"wakeup"})}
        """
    )
    pytester.runpytest("--fastloop=wakeup").assert_outcomes(passed=1)


@pytest.mark.usefixtures("ab_workloads")
def test_ab_tests_are_marked_so_a_quick_run_deselects_them(pytester):
    pytester.makepyfile(
        test_marks="""
        import pytest
        from ab_workloads import half

        def test_ab(fastloop_ab):
            fastloop_ab(half, rounds=6)

        @pytest.mark.fastloop_ab
        def test_marked_by_hand():
            pass

        def test_plain():
            pass
        """
    )
    result = pytester.runpytest("--strict-markers", "-m", "not fastloop_ab")
    result.assert_outcomes(passed=1, deselected=2)
    assert "fastloop A/B" not in result.stdout.str()
    pytester.runpytest("--strict-markers", "-m", "fastloop_ab").assert_outcomes(
        passed=2, deselected=1
    )
