"""fastloop run (child and grandchild patched, sitecustomize fallback) and doctor."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from fastloop import cli
from fastloop.patches import registry
from tests_support import (
    dask_installed,
    dask_patches,
    default_set,
    doctor_row,
    require_installed_pth,
)

REPO = Path(__file__).resolve().parents[1]
CHILD = textwrap.dedent(
    """
    import os, subprocess, sys
    import tornado.platform.asyncio, tornado.iostream
    import fastloop
    slow = os.environ.get("FASTLOOP_SLOW_WRITE_MS")
    # Flushed: with stdout a pipe the grandchild's line would come first.
    print("child", sorted(fastloop.installed()), slow, flush=True)
    grandchild = (
        "import tornado.platform.asyncio, tornado.iostream, fastloop; "
        "print('grandchild', sorted(fastloop.installed()))"
    )
    subprocess.run([sys.executable, "-c", grandchild], check=True)
    sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    """
)


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without FASTLOOP* variables, nor the buffering it
    happens to ask for: the tests must not depend on PYTHONUNBUFFERED."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("FASTLOOP") and k != "PYTHONUNBUFFERED"
    }
    env.update(extra)
    return env


def fastloop_run(*args: str, env=None, cwd=None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fastloop", "run", *args],
        env=env or clean_env(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_run_patches_the_child_and_its_grandchild(tmp_path):
    require_installed_pth()
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    result = fastloop_run("--slow-write-ms", "7", "--", sys.executable, str(script))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"child {default_set()} 7.0",
        f"grandchild {default_set()}",
    ]


def test_run_chooses_patches_and_passes_the_exit_code_through(tmp_path):
    require_installed_pth()
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    result = fastloop_run("--patches", "wakeup", "--", sys.executable, str(script), "3")
    assert result.returncode == 3
    assert result.stdout.splitlines()[0] == "child ['wakeup'] None"


def test_missing_command_exits_127_like_a_shell():
    result = fastloop_run("--", "no-such-command-fastloop")
    assert result.returncode == 127
    assert result.stderr.strip() == (
        "fastloop run: no-such-command-fastloop: command not found"
    )


def test_run_without_a_command_is_a_usage_error():
    result = fastloop_run()
    assert result.returncode == 2
    assert "missing COMMAND" in result.stderr


def test_sitecustomize_fallback_when_installed_with_target(tmp_path):
    """pip install --target: no site directory scans it for .pth files."""
    target = tmp_path / "target"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-build-isolation",
            "--target",
            str(target),
            str(REPO),
        ],
        check=True,
        timeout=600,
    )
    bare = tmp_path / "bare"  # an interpreter with nothing installed
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True
    )
    python = str(bare / "bin" / "python")
    existing = tmp_path / "existing"  # the application's own sitecustomize
    existing.mkdir()
    (existing / "sitecustomize.py").write_text(
        "import os\nos.environ['CHAINED'] = 'yes'\n"
    )
    script = tmp_path / "child.py"
    script.write_text(
        "import os, tornado.platform.asyncio, tornado.iostream, fastloop\n"
        "print(sorted(fastloop.installed()), os.environ.get('CHAINED'))\n"
    )
    env = clean_env(PYTHONPATH=os.pathsep.join([str(target), str(existing)]))
    without = subprocess.run(
        [python, str(script)],
        env=clean_env(FASTLOOP="1", **{"PYTHONPATH": env["PYTHONPATH"]}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert without.stdout.strip() == "[] yes"  # FASTLOOP alone cannot work here
    result = subprocess.run(
        [python, "-m", "fastloop", "run", "--", python, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    default = str(default_set())
    assert result.stdout.strip() == f"{default} yes"


def test_doctor_reports_ok_and_exit_0(capsys, monkeypatch):
    monkeypatch.delenv("FASTLOOP", raising=False)
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "verdict       ok" in out
    assert doctor_row(out, "add_callback") == "ok (requested)"
    slow = "FASTLOOP_SLOW_WRITE_MS       (unset): slow-write log off (the default)"
    assert slow in out


def test_doctor_says_what_the_slow_write_setting_does(capsys, monkeypatch):
    monkeypatch.setenv("FASTLOOP_SLOW_WRITE_MS", "7.5")
    assert cli.main(["doctor"]) == 0
    assert "slower than 7.5 ms" in capsys.readouterr().out


def test_doctor_flags_a_missing_internal_and_exits_1(capsys, monkeypatch):
    from tornado.ioloop import IOLoop

    monkeypatch.delattr(IOLoop, "_discard_future_result")
    assert cli.main(["doctor", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert (
        report["patches"]["add_callback"] == "IOLoop._discard_future_result is missing"
    )
    assert report["ok"] is False


def test_doctor_flags_invalid_settings(capsys, monkeypatch):
    monkeypatch.setenv("FASTLOOP_WRITE_CPU", "maybe")
    assert cli.main(["doctor"]) == 1
    assert (
        "INVALID: fastloop: ignoring 'maybe' in FASTLOOP_WRITE_CPU"
        in capsys.readouterr().out
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--patches", "nope", "--", "true"], "unknown patch nope"),
        (["run", "--slow-write-ms", "-1", "--", "true"], "expected a number >= 0"),
    ],
)
def test_run_bad_options_are_usage_errors(args, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(args)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_doctor_under_uvloop_reports_wakeup_off_by_design_not_failed(capsys):
    pytest.importorskip("uvloop")
    assert cli.main(["doctor", "--loop", "uvloop"]) == 0
    out = capsys.readouterr().out
    assert "event loop    uvloop: uvloop.Loop" in out
    assert doctor_row(out, "wakeup") == (
        "off under uvloop, by design: uvloop coalesces its "
        "wake-ups already, without asyncio's self-pipe (requested)"
    )
    assert doctor_row(out, "read_interest") == (
        "off under uvloop, by design: it runs reader handles as it polls (requested)"
    )
    assert doctor_row(out, "poll") == (
        "off under uvloop, by design: uvloop.Loop has no "
        "asyncio selector to poll (not requested)"
    )
    assert doctor_row(out, "add_callback") == "ok (requested)"
    assert "verdict       ok: everything requested can apply, or is off by" in out


async def diagnosed_on_the_running_loop():
    from fastloop.cli import doctor

    loop = asyncio.get_running_loop()
    return doctor.diagnose({}), loop.is_closed()


def test_doctor_answers_for_the_loop_that_runs():
    """An application that runs uvloop through a loop factory sets no policy:
    doctor called on its loop reads the loop's class (and leaves it open)."""
    uvloop = pytest.importorskip("uvloop")
    on_uvloop, closed = uvloop.run(diagnosed_on_the_running_loop())
    assert not closed
    assert (on_uvloop["loop"], on_uvloop["event_loop"]) == ("uvloop", "uvloop.Loop")
    missing = dict.fromkeys(
        set() if dask_installed() else dask_patches(), "distributed is not installed"
    )
    assert set(on_uvloop["off_by_design"]) == {"wakeup", "read_interest", "poll"} | set(
        missing
    )
    assert on_uvloop["ok"] is True
    on_asyncio, _ = asyncio.run(diagnosed_on_the_running_loop())
    assert on_asyncio["loop"] == "asyncio"
    assert on_asyncio["off_by_design"] == missing
    assert on_asyncio["patches"] == {**dict.fromkeys(registry.known()), **missing}


def test_doctor_follows_a_uvloop_policy_the_application_set():
    """The deprecated way to run uvloop (``uvloop.install()``), still
    supported up to 3.15: doctor reads it from the loop the default factory
    makes, not from the policy API."""
    uvloop = pytest.importorskip("uvloop")
    if not hasattr(asyncio, "set_event_loop_policy"):
        pytest.skip("no event loop policy in this Python")
    from fastloop.cli import doctor

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        saved = asyncio.get_event_loop_policy()
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        report = doctor.diagnose({})
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            asyncio.set_event_loop_policy(saved)
    assert (report["loop"], report["event_loop"]) == ("uvloop", "uvloop.Loop")
    assert "wakeup" in report["off_by_design"]
    assert doctor.diagnose({})["loop"] == "asyncio"


@pytest.mark.parametrize(
    "args",
    [[], ["--json"], ["--loop", "uvloop"], ["--loop", "uvloop", "--json"]],
    ids=["text", "json", "uvloop", "uvloop-json"],
)
def test_doctor_under_w_error_exits_0_and_warns_nothing(args, tmp_path):
    """No fastloop module calls an API deprecated in the running Python."""
    if "uvloop" in args:
        pytest.importorskip("uvloop")
    result = subprocess.run(
        [sys.executable, "-W", "error", "-m", "fastloop", "doctor", *args],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert "Warning" not in result.stdout
    loop = "uvloop" if "uvloop" in args else "asyncio"
    if "--json" in args:
        assert json.loads(result.stdout)["loop"] == loop
    else:
        assert f"\nevent loop    {loop}: " in result.stdout


def test_doctor_under_fastloop_1_reads_stock_code_not_the_patches(tmp_path):
    """A fresh ``FASTLOOP=1 fastloop doctor``: distributed's patches apply
    as doctor imports it, and come off for the look like the others (their
    checks once read fastloop's replacements and said "declines")."""
    require_installed_pth()
    result = subprocess.run(
        [sys.executable, "-m", "fastloop", "doctor", "--loop", "asyncio"],
        env=clean_env(FASTLOOP="1"),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for name in dask_patches():
        expected = "ok" if dask_installed() else "off, by design: distributed is"
        assert doctor_row(result.stdout, name).startswith(expected), name
    assert "\nverdict       ok" in result.stdout


def test_doctor_answers_for_asyncio_with_patches_already_active(capsys):
    import fastloop

    fastloop.install()
    assert cli.main(["doctor", "--loop", "asyncio", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    # distributed's patches: off by design where it is not installed; where
    # it is, doctor imported it, which applied them.
    missing = dict.fromkeys(
        set() if dask_installed() else dask_patches(), "distributed is not installed"
    )
    assert report["patches"] == {**dict.fromkeys(registry.known()), **missing}
    assert report["off_by_design"] == missing
    assert sorted(fastloop.installed()) == default_set(dask=dask_installed())


def test_doctor_flags_output_paths_that_cannot_be_written(
    capsys, monkeypatch, tmp_path
):
    monkeypatch.setenv("FASTLOOP_REPORT", str(tmp_path / "nope" / "report.json"))
    monkeypatch.setenv("FASTLOOP_PROFILE", str(tmp_path))
    assert cli.main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert f"directory {tmp_path / 'nope'} does not exist" in out
    assert f"INVALID: fastloop: ignoring '{tmp_path}' in FASTLOOP_PROFILE" in out
    assert f"({tmp_path} is a directory)" in out


def test_unwritable_outputs_are_one_line_each_at_start_up(tmp_path):
    require_installed_pth()
    report = tmp_path / "nope" / "report.json"
    result = subprocess.run(
        [sys.executable, "-c", "print('app ran')"],
        env=clean_env(FASTLOOP_REPORT=str(report), FASTLOOP_PROFILE=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0
    assert result.stdout == "app ran\n"
    lines = result.stderr.splitlines()
    assert len(lines) == 2, result.stderr
    assert lines[0].startswith(f"fastloop: ignoring '{report}' in FASTLOOP_REPORT=")
    assert lines[1].startswith(f"fastloop: ignoring '{tmp_path}' in FASTLOOP_PROFILE=")


def test_report_alone_says_nothing_is_installed(tmp_path):
    require_installed_pth()
    result = subprocess.run(
        [sys.executable, "-c", "import tornado.ioloop"],
        env=clean_env(FASTLOOP_REPORT="1"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "patches active     none: no patch is installed in this process" in (
        result.stderr
    )
