"""Forking beside fastloop's threads: none is there at the fork, all are back after.

From 3.12 CPython warns that forking a multi-threaded process may deadlock
the child (an error under ``-W error``, which Tornado's pre-forking tests
use); stock forks a process of one thread without a word.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests_support import require_installed_pth, run_python

pytestmark = pytest.mark.skipif(
    not os.path.isdir("/proc/self/task") or not hasattr(os, "fork"),
    reason="counts threads in /proc (Linux)",
)

#: The probe's hooks are registered before fastloop is imported: its
#: ``before`` runs after fastloop's (reverse order), its ``after_in_parent``
#: before fastloop's, so both see what the fork warning counts.
PROBE = """
import json, os, threading, time

def threads():
    return len(os.listdir("/proc/self/task"))

seen = {}
os.register_at_fork(
    before=lambda: seen.setdefault("at the fork", threads()),
    after_in_parent=lambda: seen.setdefault("right after", threads()),
)
import fastloop
import tornado.ioloop

fastloop.install()
"""
APP = (
    PROBE
    + """
watching = fastloop.watch(threshold_ms=1000)
# The controller starts with a second thread, and outlives it a while.
helper = threading.Thread(target=time.sleep, args=(0.05,))
helper.start()
helper.join()
time.sleep(0.2)
seen["ours before"] = threads() - 1
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
time.sleep(0.2)
seen["ours after"] = threads() - 1
watching.stop()
print(json.dumps(seen))
"""
)


def test_fastloops_threads_stop_for_a_fork_and_start_again():
    require_installed_pth()
    flags = ["-W", "error::DeprecationWarning"] if sys.version_info >= (3, 12) else []
    result = run_python(APP, *flags, timeout=60)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["ours before"] == 2  # the watchdog's thread and the controller's
    assert seen["at the fork"] == seen["right after"] == 1
    assert seen["ours after"] == 2


#: Auto mode's controller asleep at the fork: the application keeps a thread
#: of its own (so the controller does not end), and no IOLoop is open.
ASLEEP = (
    PROBE
    + """
from fastloop.runtime.dormancy import IDLE

done = threading.Event()
threading.Thread(target=done.wait, daemon=True).start()
deadline = time.monotonic() + 30
while not fastloop.stats().switchinterval.dormant:
    assert time.monotonic() < deadline, "the controller never slept"
    time.sleep(0.01)
seen["ours before"] = threads() - 2
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(write, b"1" if not IDLE.asleep and threads() == 1 else b"0")
    os._exit(0)
seen["child"] = os.read(read, 1).decode()
os.waitpid(pid, 0)
deadline = time.monotonic() + 30
while threads() - 2 < 1:  # the controller starts again, awake
    assert time.monotonic() < deadline, "the controller did not come back"
    time.sleep(0.01)
seen["ours after"] = threads() - 2
print(json.dumps(seen))
"""
)


def test_asleep_at_a_fork_it_ends_for_it_and_starts_again():
    require_installed_pth()
    result = run_python(ASLEEP, timeout=60)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["ours before"] == 1  # the controller, asleep
    assert seen["at the fork"] == seen["right after"] == 2  # the application's
    assert seen["child"] == "1"  # nothing asleep there, one thread
    assert seen["ours after"] == 1
