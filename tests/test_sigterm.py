"""The exit outputs (report, profile) survive SIGTERM, as Docker and dask send it.

Real processes: a Tornado app under ``fastloop run``, stopped by SIGTERM,
must leave its report and profile and still die of SIGTERM; an app with a
SIGTERM handler of its own keeps it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests_support import default_set, require_installed_pth

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "SIGTERM") or sys.platform == "win32",
    reason="POSIX signals",
)

APP = textwrap.dedent(
    """
    import os, signal, sys, time
    import tornado.web
    from tornado.ioloop import IOLoop

    class Hello(tornado.web.RequestHandler):
        def get(self):
            self.write("hello")

    if sys.argv[1:] == ["own-handler"]:
        def stop(signum, frame):
            # Not print: the signal may land inside print("ready")'s flush,
            # and a buffered stream refuses a reentrant call.
            os.write(1, b"app handler ran\\n")
            IOLoop.current().add_callback_from_signal(IOLoop.current().stop)
        signal.signal(signal.SIGTERM, stop)

    app = tornado.web.Application([("/", Hello)])
    server = app.listen(0, address="127.0.0.1")
    def ready():
        # Once the profile that --profile started (found by its type) has
        # sampled this loop: its thread may be slow to get a CPU.
        import gc
        profiles = [
            o for o in gc.get_objects()
            if type(o).__module__ == "fastloop.observers.profiler"
            and type(o).__name__ == "Profile"
        ]
        sampled = all(profile.samples for profile in profiles)
        if not sampled and time.monotonic() < give_up:
            IOLoop.current().call_later(0.005, ready)
            return
        print("ready", flush=True)
    give_up = time.monotonic() + 30  # then the test fails, rather than hangs
    IOLoop.current().add_callback(ready)
    IOLoop.current().start()
    print("app returned", flush=True)
    """
)


def wait_for_line(process: subprocess.Popen[str], line: str) -> None:
    assert process.stdout is not None
    for seen in process.stdout:  # ends at EOF if the app dies first
        if seen.strip() == line:
            return
    raise AssertionError(f"the app ended before printing {line!r}")


def start(tmp_path: Path, *app_args: str, report: str) -> subprocess.Popen[str]:
    app = tmp_path / "app.py"
    app.write_text(APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
    command = [
        sys.executable, "-m", "fastloop", "run", "--block-ms", "1000",
        "--report", report, "--profile", str(tmp_path / "term.collapsed"),
        "--", sys.executable, str(app), *app_args,
    ]  # fmt: skip
    return subprocess.Popen(
        command,
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop(process: subprocess.Popen[str]) -> tuple[str, str]:
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    return out, err


def test_sigterm_writes_report_and_profile_and_still_dies_of_sigterm(tmp_path):
    require_installed_pth()
    report = tmp_path / "report.json"
    process = start(tmp_path, report=str(report))
    wait_for_line(process, "ready")  # the profile holds a sample by then
    out, err = stop(process)
    assert process.returncode == -signal.SIGTERM, err
    assert "app returned" not in out
    data = json.loads(report.read_text())
    default = default_set()
    assert sorted(data["installed"]) == default
    assert data["watchdog"]["watching"] is True
    assert (tmp_path / "term.collapsed").read_text().startswith("thread:MainThread")


def test_sigterm_report_on_stderr(tmp_path):
    require_installed_pth()
    process = start(tmp_path, report="stderr")
    wait_for_line(process, "ready")
    _, err = stop(process)
    assert process.returncode == -signal.SIGTERM, err
    assert "fastloop report" in err
    assert f"patches active     {', '.join(default_set())}" in err


def test_an_application_handler_is_left_in_charge(tmp_path):
    require_installed_pth()
    report = tmp_path / "report.json"
    process = start(tmp_path, "own-handler", report=str(report))
    wait_for_line(process, "ready")
    out, err = stop(process)
    # The app's handler stopped its loop and the app ended normally: outputs
    # come from the ordinary exit path.
    assert process.returncode == 0, err
    assert out.splitlines() == ["app handler ran", "app returned"]
    assert json.loads(report.read_text())["installed"]
    assert (tmp_path / "term.collapsed").exists()


def test_sigterm_ignored_by_the_parent_stays_ignored(tmp_path):
    require_installed_pth()
    report = tmp_path / "report.json"
    app = tmp_path / "app.py"
    app.write_text(
        "import signal\nprint(signal.getsignal(signal.SIGTERM) is signal.SIG_IGN)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
    result = subprocess.run(
        [sys.executable, "-m", "fastloop", "run", "--report", str(report), "--",
         sys.executable, str(app)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == "True\n"
    assert report.exists()
