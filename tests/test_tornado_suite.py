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
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tornado

import fastloop
from tests_support import require_installed_pth

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
    "def report():\n"
    "    fastloop = sys.modules.get('fastloop')\n"
    "    active = sorted(fastloop.installed()) if fastloop else []\n"
    "    print('fastloop active:', ','.join(active) or '-', file=sys.stderr)\n"
    "    watched = fastloop.stats().watchdog if fastloop else None\n"
    "    print('fastloop watchdog:', 'on' if watched and watched.watching else 'off',\n"
    "          watched.beats if watched else 0, file=sys.stderr)\n"
    "atexit.register(report)\n"
    "sys.argv = ['tornado.test.runtests']\n"
    "runpy.run_module('tornado.test.runtests', run_name='__main__', alter_sys=True)\n"
)


HELD_COUNT = re.compile(r"^held polls: (\d+)$", re.MULTILINE)


def run_suite(
    fastloop: str | None, profile: Path | None = None, prelude: str = ""
) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
    if fastloop is not None:
        env["FASTLOOP"] = fastloop
        env["FASTLOOP_BLOCK_MS"] = "2000"
        if profile is not None:  # str(None) would profile into a file "None"
            env["FASTLOOP_PROFILE"] = str(profile)
    result = subprocess.run(
        [sys.executable, "-c", prelude + PROBE],
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
        "failed": sorted(
            set(re.findall(r"^(?:FAIL|ERROR): (.+)$", output, re.MULTILINE))
        ),
        "active": active.group(1),
        "watchdog": watchdog.group(1),
        "heartbeats": int(watchdog.group(2)),
        "tail": output[-3000:],
        "held": int(held.group(1)) if (held := HELD_COUNT.search(output)) else 0,
    }


@pytest.mark.slow
def test_tornado_suite_passes_with_the_same_counts_under_fastloop(capsys, tmp_path):
    require_installed_pth()
    stock = run_suite(None)
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
    applicable = sorted(
        name for name, why in fastloop.available().items() if why is None
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
    assert patched["failed"] == stock["failed"], patched["tail"]
    assert (patched["ran"], patched["skipped"]) == (stock["ran"], stock["skipped"])
    assert patched["returncode"] == stock["returncode"], patched["tail"]


@pytest.mark.slow
def test_tornado_suite_passes_when_every_zero_timeout_poll_keeps_the_gil(
    capsys, tmp_path
):
    """The ``poll`` patch's held polls, forced on for the whole suite.

    Without contention they rarely engage, so the run above says little
    about them; here every zero-timeout poll goes through ``epoll_wait``
    with the GIL held, and the outcome must still be stock's.
    """
    require_installed_pth()
    stock = run_suite(None)
    held = run_suite("all,poll", tmp_path / "suite.collapsed", prelude=HELD)
    with capsys.disabled():
        print(
            f"\ntornado {tornado.version} suite with held polls: ran={held['ran']} "
            f"skipped={held['skipped']} rc={held['returncode']} "
            f"held polls={held['held']}"
        )
    assert held["held"] > 1000
    assert held["failed"] == stock["failed"], held["tail"]
    assert (held["ran"], held["skipped"]) == (stock["ran"], stock["skipped"])
    assert held["returncode"] == stock["returncode"], held["tail"]
