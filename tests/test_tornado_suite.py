"""Tornado's own test suite must pass with fastloop active, with the same counts.

Both runs go through the interpreter's start-up exactly as a user's would:
the patched one only sets ``FASTLOOP=all,poll`` (every
patch) and relies on the installed ``.pth`` hook; a small ``atexit`` probe
reports which patches were active.

Tornado's suite fails any test that logs an unexpected warning: the
patched run uses the default settings, under which nothing warns (the
slow-write log is opt-in).  It also has the watchdog (at 2 s, so that only
a real stall would log) and the profiler running throughout, to show they
leave Tornado's behaviour alone.

A few of Tornado's tests depend on timing (``test_request_timeout`` gives
its request 0.1 s, tornadoweb/tornado#1268), and on a loaded machine they
fail now and then, in either arm.  So outcomes are compared test for test,
and a test that failed in one suite run only is run again alone, in fresh
processes of the arm that passed it, up to ``RERUNS`` times
(``flaky_in_both``).  The difference is excused only when it fails there
too: then it fails under stock as well as under fastloop, here and now.  A
difference that fastloop causes every time stays a failure (the arm
without the bug never fails it), so does one that shows only inside the
suite; what this lets through is a failure fastloop would make more
frequent without causing it alone, which the contract and stress tests,
counting every callback and message, are there to catch.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import tornado

import fastloop
from tests_support import dask_patches, require_installed_pth

#: Makes every zero-timeout poll of the ``poll`` patch keep the GIL, as it
#: does under contention, and counts those polls.
HELD = (
    "from fastloop.patches import poll\n"
    "poll.CONTENDED_NS = -(10**15)\n"
    "poll.HELD_SAMPLE_NS = 10**15\n"
    "held = [0]\n"
    "def counting(*args, real=poll.load_epoll_wait()):\n"
    "    held[0] += 1\n"
    "    return real(*args)\n"
    "poll.EPOLL_WAIT = counting\n"
    "import atexit, sys\n"
    "atexit.register(lambda: print('held polls:', held[0], file=sys.stderr))\n"
)

PROBE = (
    "import atexit, runpy, sys\n"
    "tests = sys.argv[1:]\n"
    "def report():\n"
    "    fastloop = sys.modules.get('fastloop')\n"
    "    active = sorted(fastloop.installed()) if fastloop else []\n"
    "    print('fastloop active:', ','.join(active) or '-', file=sys.stderr)\n"
    "    watched = fastloop.stats().watchdog if fastloop else None\n"
    "    print('fastloop watchdog:', 'on' if watched and watched.watching else 'off',\n"
    "          watched.beats if watched else 0, file=sys.stderr)\n"
    "atexit.register(report)\n"
    "sys.argv = ['tornado.test.runtests', *tests]\n"
    "runpy.run_module('tornado.test.runtests', run_name='__main__', alter_sys=True)\n"
)


HELD_COUNT = re.compile(r"^held polls: (\d+)$", re.MULTILINE)


#: A failed test as unittest names it: ``name (module.Class)`` before
#: Python 3.11, ``name (module.Class.name)`` since.
FAILED = re.compile(r"^(?:FAIL|ERROR): (.+)$", re.MULTILINE)
FAILED_NAME = re.compile(r"^(test\w*) \(([\w.]+)\)$")
#: How often a test that failed in one suite run only is run alone, per arm.
RERUNS = 5


def runnable_id(failure: str) -> str | None:
    """The dotted id ``runtests`` takes for a failure line, if it names a test."""
    match = FAILED_NAME.match(failure)
    if match is None:
        return None
    name, where = match.groups()
    return where if where.endswith(f".{name}") else f"{where}.{name}"


def run_suite(
    fastloop: str | None,
    profile: Path | None = None,
    prelude: str = "",
    tests: tuple[str, ...] = (),
) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
    if fastloop is not None:
        env["FASTLOOP"] = fastloop
        env["FASTLOOP_BLOCK_MS"] = "2000"
        if profile is not None:  # str(None) would profile into a file "None"
            env["FASTLOOP_PROFILE"] = str(profile)
    result = subprocess.run(
        [sys.executable, "-c", prelude + PROBE, *tests],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    output = result.stdout + result.stderr
    ran = re.search(r"^Ran (\d+) tests?", output, re.MULTILINE)
    skipped = re.search(r"skipped=(\d+)", output)
    active = re.search(r"^fastloop active: (\S+)$", output, re.MULTILINE)
    watchdog = re.search(r"^fastloop watchdog: (on|off) (\d+)$", output, re.MULTILINE)
    assert ran and active and watchdog, output[-3000:]
    return {
        "returncode": result.returncode,
        "ran": int(ran.group(1)),
        "skipped": int(skipped.group(1)) if skipped else 0,
        "failed": sorted(set(FAILED.findall(output))),
        "active": active.group(1),
        "watchdog": watchdog.group(1),
        "heartbeats": int(watchdog.group(2)),
        "tail": output[-3000:],
        "held": int(held.group(1)) if (held := HELD_COUNT.search(output)) else 0,
    }


def flaky_in_both(
    stock: list[str],
    patched: list[str],
    failures_alone: Callable[[str, str], list[str]],
    reruns: int = RERUNS,
) -> dict[str, str]:
    """The tests that failed in one suite run only and, run alone, failed in
    the other arm too, each with what showed it.

    ``failures_alone(test id, arm)`` runs one test in a fresh process of
    that arm (``"stock"`` or ``"patched"``) and gives its failure lines; the
    arm that passed the test in the suite runs it alone up to ``reruns``
    times, until it fails with the same line (a name that loads no test
    fails differently, and excuses nothing).
    """
    excused = {}
    for failure in sorted(set(stock) ^ set(patched)):
        test = runnable_id(failure)
        if test is None:
            continue
        failed, other = (
            ("stock", "patched") if failure in stock else ("patched", "stock")
        )
        for run in range(1, reruns + 1):
            if failure in failures_alone(test, other):
                excused[failure] = (
                    f"failed in the {failed} suite run, "
                    f"and under {other} alone on run {run} of {reruns}"
                )
                break
    return excused


def rerun_alone(
    fastloop: str, profile: Path, prelude: str = ""
) -> Callable[[str, str], list[str]]:
    """``failures_alone`` for ``flaky_in_both``: the patched arm as in the
    suite (``profile``: a file of its own, the suite's is checked)."""

    def failures_alone(test: str, arm: str) -> list[str]:
        if arm == "stock":
            result = run_suite(None, tests=(test,))
        else:
            result = run_suite(fastloop, profile, prelude, tests=(test,))
        failed = result["failed"]
        assert isinstance(failed, list)
        return failed

    return failures_alone


def assert_same_outcome(
    stock: dict[str, object],
    patched: dict[str, object],
    failures_alone: Callable[[str, str], list[str]],
) -> dict[str, str]:
    """Test for test, what failed in one arm failed in the other, bar the
    tests ``flaky_in_both`` shows failing in both; those are returned."""
    assert (patched["ran"], patched["skipped"]) == (stock["ran"], stock["skipped"])
    stock_failed, patched_failed = stock["failed"], patched["failed"]
    assert isinstance(stock_failed, list) and isinstance(patched_failed, list)
    excused = flaky_in_both(stock_failed, patched_failed, failures_alone)
    kept = [name for name in patched_failed if name not in excused]
    expected = [name for name in stock_failed if name not in excused]
    assert kept == expected, patched["tail"]
    if not excused:  # with an excused failure in one arm the exit codes differ
        assert patched["returncode"] == stock["returncode"], patched["tail"]
    return excused


def print_excused(excused: dict[str, str]) -> None:
    for failure, why in excused.items():
        print(f"  timing-dependent, failed in both arms: {failure}: {why}")


@pytest.fixture(scope="module")
def stock() -> dict[str, object]:
    """Tornado's suite under stock Tornado, run once for both comparisons."""
    require_installed_pth()
    return run_suite(None)


@pytest.mark.slow
def test_tornado_suite_passes_with_the_same_counts_under_fastloop(
    stock, capsys, tmp_path
):
    profile = tmp_path / "suite.collapsed"
    patched = run_suite("all,poll", profile)
    with capsys.disabled():  # the counts belong in the CI log
        print(
            f"\ntornado {tornado.version} suite: stock ran={stock['ran']} "
            f"skipped={stock['skipped']} rc={stock['returncode']}; "
            f"FASTLOOP=all,poll ran={patched['ran']} "
            f"skipped={patched['skipped']} "
            f"rc={patched['returncode']} active={patched['active']} "
            f"watchdog heartbeats={patched['heartbeats']} "
            f"profile lines={len(profile.read_text().splitlines())}"
        )
    # distributed's patches wait for its import, which Tornado's suite never
    # does (this process may have imported it: the full suite does).
    applicable = sorted(
        name
        for name, why in fastloop.available().items()
        if why is None and name not in dask_patches()
    )
    assert stock["active"] == "-"
    assert stock["watchdog"] == "off"
    # The watchdog ran to the end (heartbeats depend on how long the suite's
    # loops run at a stretch: its period at 2 s is 250 ms, most tests are
    # shorter, so the count is printed, not asserted).
    assert patched["watchdog"] == "on"
    assert "tornado/test/" in profile.read_text()  # and the profiler sampled them
    assert patched["active"].split(",") == applicable
    # A test that fails under stock Tornado too is Tornado's business on this
    # Python, not ours: what must match is the outcome, test for test.
    alone = rerun_alone("all,poll", tmp_path / "alone.collapsed")
    excused = assert_same_outcome(stock, patched, alone)
    with capsys.disabled():
        print_excused(excused)


@pytest.mark.slow
def test_tornado_suite_passes_when_every_zero_timeout_poll_keeps_the_gil(
    stock, capsys, tmp_path
):
    """The ``poll`` patch's held polls, forced on for the whole suite.

    Without contention they rarely engage, so the run above says little
    about them; here every zero-timeout poll goes through ``epoll_wait``
    with the GIL held, and the outcome must still be stock's.
    """
    held = run_suite("all,poll", tmp_path / "suite.collapsed", prelude=HELD)
    with capsys.disabled():
        print(
            f"\ntornado {tornado.version} suite with held polls: ran={held['ran']} "
            f"skipped={held['skipped']} rc={held['returncode']} "
            f"held polls={held['held']}"
        )
    assert held["held"] > 1000
    alone = rerun_alone("all,poll", tmp_path / "alone.collapsed", HELD)
    excused = assert_same_outcome(stock, held, alone)
    with capsys.disabled():
        print_excused(excused)


SHAPES = {
    "test_a (tornado.test.x_test.Case.test_a)": "tornado.test.x_test.Case.test_a",
    "test_a (tornado.test.x_test.Case)": "tornado.test.x_test.Case.test_a",
    "setUpClass (tornado.test.x_test.Case)": None,  # not a test to run alone
    "test_a (tornado.test.x_test.Case.test_a) (n=1)": None,  # a subtest
}


@pytest.mark.parametrize(("failure", "expected"), SHAPES.items())
def test_a_failure_line_gives_the_id_to_run_it_alone(failure, expected):
    assert runnable_id(failure) == expected


FLAKY = "test_a (tornado.test.x_test.Case.test_a)"


def scripted(
    outcomes: dict[str, list[bool]],
) -> tuple[Callable[[str, str], list[str]], list[str]]:
    """``failures_alone`` failing FLAKY or not from a script per arm (True:
    passes), and the log of calls."""
    calls: list[str] = []

    def failures_alone(test: str, arm: str) -> list[str]:
        assert test == "tornado.test.x_test.Case.test_a"
        calls.append(arm)
        return [] if outcomes[arm].pop(0) else [FLAKY]

    return failures_alone, calls


def test_a_failure_stock_shows_too_when_run_alone_is_excused():
    failures_alone, calls = scripted({"stock": [True, False], "patched": []})
    excused = flaky_in_both([], [FLAKY], failures_alone)
    assert excused == {
        FLAKY: "failed in the patched suite run, and under stock alone on run 2 of 5"
    }
    assert calls == ["stock", "stock"]  # stopped at the first failure


def test_a_failure_only_the_patched_arm_ever_shows_is_kept():
    failures_alone, calls = scripted({"stock": [True] * RERUNS, "patched": []})
    assert flaky_in_both([], [FLAKY], failures_alone) == {}
    assert calls == ["stock"] * RERUNS


def test_a_failure_that_shows_only_in_the_suite_is_kept():
    failures_alone, calls = scripted({"stock": [], "patched": [True] * RERUNS})
    assert flaky_in_both([FLAKY], [], failures_alone) == {}
    assert calls == ["patched"] * RERUNS  # stock's failure is checked the same way


def test_a_run_alone_that_fails_otherwise_excuses_nothing():
    def not_loaded(test: str, arm: str) -> list[str]:
        return [f"test_a (unittest.loader._FailedTest.{test})"]

    assert flaky_in_both([], [FLAKY], not_loaded) == {}


def test_a_failure_in_both_suite_runs_is_no_difference_and_not_rerun():
    failures_alone, calls = scripted({"stock": [], "patched": []})
    assert flaky_in_both([FLAKY], [FLAKY], failures_alone) == {}
    assert calls == []


def test_outcomes_that_differ_only_by_an_excused_test_are_the_same():
    stock = {"ran": 3, "skipped": 0, "failed": [], "returncode": 0, "tail": ""}
    patched = {**stock, "failed": [FLAKY, "test_b (m.C.test_b)"], "returncode": 1}
    failures_alone, _ = scripted({"stock": [False], "patched": []})

    def only_a(test: str, arm: str) -> list[str]:
        return failures_alone(test, arm) if test.endswith("test_a") else []

    with pytest.raises(AssertionError):  # test_b fails under fastloop alone
        assert_same_outcome(stock, patched, only_a)
    patched["failed"] = [FLAKY]
    failures_alone, _ = scripted({"stock": [False], "patched": []})
    assert list(assert_same_outcome(stock, patched, failures_alone)) == [FLAKY]
