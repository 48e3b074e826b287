"""FASTLOOP activation through the .pth file of a really installed wheel.

These run ``sys.executable`` in subprocesses, so they exercise the
``fastloop.pth`` that pip put into site-packages, exactly as a user's
``FASTLOOP=1 python app.py`` would.  With an editable install there is no
such file: the tests skip locally and fail under CI (``CI`` set).
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from fastloop.patches import RECORDS
from tests_support import default_set, require_installed_pth, run_python

REPO = Path(__file__).resolve().parents[1]
PROBE = (
    "import tornado.platform.asyncio, tornado.iostream, fastloop; "
    "print(sorted(fastloop.installed()))"
)
ALL = str(default_set())


@pytest.fixture(scope="module")
def pth() -> Path:
    return require_installed_pth()


def run(
    code: str, fastloop: str | None, *flags: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    chosen = {} if fastloop is None else {"FASTLOOP": fastloop}
    return run_python(code, *flags, env={**(env or {}), **chosen})


def test_wheel_ships_the_pth_at_its_root(tmp_path):
    if not (REPO / "pyproject.toml").exists():
        pytest.skip("needs the source tree")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        check=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("tornado_fastloop-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert "fastloop.pth" in archive.namelist()
        shipped = archive.read("fastloop.pth").decode()
        assert "fastloop/py.typed" in archive.namelist()
    assert shipped == (REPO / "fastloop.pth").read_text()


def test_installed_pth_is_the_one_line_we_ship(pth):
    lines = [line for line in pth.read_text().splitlines() if line.strip()]
    assert len(lines) == 1
    assert lines[0].startswith("import os;")
    # The line spells out the activating variables (it must import nothing
    # while they are unset): the same ones as the settings table's.
    from fastloop import config

    spelled = re.findall(r'os\.environ\.get\("(\w+)"\)', lines[0])
    assert tuple(spelled) == config.ACTIVATING
    from fastloop.runtime import bootstrap

    assert ("FASTLOOP", *bootstrap.OUTPUTS) == config.ACTIVATING


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", ALL),
        ("true", ALL),
        ("all", ALL),
        (" ALL ", ALL),
        ("add_callback", "['add_callback']"),
        ("wakeup", "['wakeup']"),
    ],
)
def test_fastloop_set_installs_at_start_up(pth, value, expected):
    result = run(PROBE, value)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected
    assert result.stderr == ""


@pytest.mark.parametrize("value", ["0", "false"])
def test_fastloop_off_installs_nothing(pth, value):
    result = run(PROBE, value)
    assert (result.returncode, result.stdout.strip(), result.stderr) == (0, "[]", "")


@pytest.mark.parametrize("value", [None, ""])
def test_unset_imports_no_fastloop_module_at_start_up(pth, value):
    result = run(
        "import sys; print(sorted(m for m in sys.modules if 'fastloop' in m))", value
    )
    assert (result.returncode, result.stdout.strip()) == (0, "[]")
    timing = run("pass", value, "-X", "importtime")
    assert timing.returncode == 0
    assert "import time:" in timing.stderr  # the probe itself works
    assert "fastloop" not in timing.stderr


def test_set_does_not_import_tornado_at_start_up(pth):
    result = run(
        "import sys; print('tornado' in sys.modules, 'fastloop' in sys.modules)", "1"
    )
    assert (result.returncode, result.stdout.split()) == (0, ["False", "True"])


@pytest.mark.parametrize(
    ("value", "expected", "bad"),
    [
        ("yes", "[]", "'yes'"),
        ("2", "[]", "'2'"),
        ("on", "[]", "'on'"),
        ("add-callback", "[]", "'add-callback'"),
        ("add_callback;wakeup", "[]", "'add_callback;wakeup'"),
        ("wakeup,bogus", "['wakeup']", "'bogus'"),
        ("add_callback,bogus", "['add_callback']", "'bogus'"),
        ("true,false", ALL, "'false'"),
        ("\u2713", "[]", "'\u2713'"),
        ("-1", "[]", "'-1'"),
        ("add_callback wakeup", "[]", "'add_callback wakeup'"),
        ("0,add_callback", "['add_callback']", "'0'"),
        ("all,nope", ALL, "'nope'"),
    ],
)
def test_malformed_values_print_one_line_and_the_program_runs_on(
    pth, value, expected, bad
):
    result = run(PROBE + "; print('app ran')", value)
    assert result.returncode == 0
    assert result.stdout.splitlines() == [expected, "app ran"]
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"fastloop: ignoring {bad} in FASTLOOP=")
    assert "accepted:" in lines[0]
    assert lines[0].endswith("; installing nothing") == (expected == "[]")


@pytest.mark.parametrize(
    ("variable", "value", "bad"),
    [
        ("FASTLOOP_SLOW_WRITE_MS", "soon", "'soon'"),
        ("FASTLOOP_SLOW_WRITE_MS", "-3", "'-3'"),
        ("FASTLOOP_SLOW_WRITE_MS", "nan", "'nan'"),
        ("FASTLOOP_WRITE_CPU", "maybe", "'maybe'"),
    ],
)
def test_malformed_settings_print_one_line_and_the_rest_applies(
    pth, variable, value, bad
):
    code = (
        PROBE + "; from fastloop.config import settings; print(settings.slow_write_ms)"
    )
    result = run(code, "1", env={variable: value})
    assert result.returncode == 0
    assert result.stdout.splitlines() == [ALL, "0.0"]
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"fastloop: ignoring {bad} in {variable}=")


#: Ways a process starts fastloop under FASTLOOP alone: its first asyncio
#: loop, its first Tornado IOLoop, its first use of fastloop's API.
FIRST_LOOPS = [
    "import asyncio; asyncio.new_event_loop().close()",
    "import tornado.ioloop; tornado.ioloop.IOLoop().close()",
    "import fastloop; fastloop.installed()",
]


@pytest.mark.parametrize("first", FIRST_LOOPS)
def test_settings_from_the_environment_apply(pth, first):
    code = f"{first}; from fastloop.config import settings; print(settings)"
    result = run(
        code, "1", env={"FASTLOOP_SLOW_WRITE_MS": "2.5", "FASTLOOP_WRITE_CPU": "1"}
    )
    assert result.returncode == 0, result.stderr
    assert "slow_write_ms=2.5," in result.stdout
    assert "write_cpu=True," in result.stdout


#: What ``FASTLOOP=1`` may load before the first event loop: the start-up
#: hook, and its import hook once asyncio is imported.
DEFERRED = ["fastloop", "fastloop.runtime", "fastloop.runtime.bootstrap"]
WAITING = [*DEFERRED, "fastloop.runtime.importhook"]
LOADED = (
    "import sys; print(sorted(m for m in sys.modules if m.startswith('fastloop') "
    "or m in ('typing', 'logging', 're', 'asyncio', 'importlib', 'threading')))"
)


def test_set_waits_for_an_event_loop_import(pth):
    result = run(LOADED, "1")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.strip() == str(DEFERRED)


@pytest.mark.parametrize("imports", ["asyncio", "tornado.web", "tornado.iostream"])
def test_importing_without_a_loop_installs_nothing(pth, imports):
    code = (
        f"import {imports}, sys; "
        "print(sorted(m for m in sys.modules if m.startswith('fastloop')))"
    )
    result = run(code, "1")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.strip() == str(WAITING)


def test_the_first_asyncio_loop_is_made_patched(pth):
    # wakeup coalesces only on a loop made while installed: the first one is.
    code = (
        "import asyncio; loop = asyncio.new_event_loop(); "
        "from fastloop.patches.wakeup import _reads_for_us; "
        "init = asyncio.BaseEventLoop.__init__; "
        "print(_reads_for_us(loop), init.__code__.co_filename.endswith("
        "'base_events.py'), hasattr(init, '__wrapped__')); loop.close()"
    )
    result = run(code, "1")
    assert (result.returncode, result.stderr) == (0, "")
    # fastloop's reader; BaseEventLoop.__init__ is stock's again, no stand-in
    assert result.stdout.split() == ["True", "True", "False"]


def test_first_loops_made_at_once_in_two_threads_are_both_patched(pth):
    code = (
        "import asyncio, threading\n"
        "barrier = threading.Barrier(2); loops = []\n"
        "def make():\n"
        "    barrier.wait(); loops.append(asyncio.new_event_loop())\n"
        "threads = [threading.Thread(target=make) for _ in range(2)]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
        "from fastloop.patches.wakeup import _reads_for_us\n"
        "print([_reads_for_us(loop) for loop in loops]); [l.close() for l in loops]"
    )
    result = run(code, "1")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.strip() == "[True, True]"


ON_UVLOOP = {
    # The way of uvloop.run() and asyncio.run(..., loop_factory=...).
    "loop factory": """
        import asyncio, uvloop, tornado.ioloop, fastloop.runtime.bootstrap as b
        async def main():
            print(b._started); tornado.ioloop.IOLoop.current(); print(b._started)
        uvloop.run(main())
        """,
    # uvloop.install(): deprecated from 3.12, gone in 3.16, still met.
    "policy": """
        import asyncio, uvloop, warnings, tornado.ioloop
        import fastloop.runtime.bootstrap as b
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        # Tornado 6.2's own, for an IOLoop made before its loop runs.
        warnings.filterwarnings("ignore", "make_current is deprecated")
        print(b._started); tornado.ioloop.IOLoop().close(); print(b._started)
        """,
}


@pytest.mark.parametrize("how", ON_UVLOOP)
def test_a_tornado_ioloop_on_uvloop_starts_fastloop(pth, how):
    pytest.importorskip("uvloop")
    if how == "policy" and not hasattr(asyncio, "set_event_loop_policy"):
        pytest.skip("no event loop policy in this Python")
    code = textwrap.dedent(ON_UVLOOP[how])
    code += "import fastloop; print(sorted(fastloop.installed()))"
    result = run(code, "1", "-W", "error")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.split("\n")[:2] == ["False", "True"]
    assert "add_callback" in result.stdout


def test_an_output_asked_for_starts_at_once(pth):
    result = run(LOADED, "1", env={"FASTLOOP_REPORT": "stderr"})
    assert result.returncode == 0
    assert "'fastloop.patches.registry'" in result.stdout
    assert "patches active" in result.stderr  # the exit report


def test_a_bad_value_is_reported_when_fastloop_starts(pth):
    quiet = run("pass", "bogus")
    assert (quiet.returncode, quiet.stderr) == (0, "")
    started = run(FIRST_LOOPS[0], "bogus")
    assert started.returncode == 0
    assert started.stderr.startswith("fastloop: ignoring 'bogus' in FASTLOOP=")


def targeting(*modules: str) -> str:
    """The default-set patches whose target is one of ``modules``, sorted."""
    return str(
        sorted(name for name, target, _, on in RECORDS if on and target in modules)
    )


@pytest.mark.parametrize(
    ("first", "expected"),
    [
        (FIRST_LOOPS[0], targeting("asyncio.selector_events")),
        ("import tornado", "[]"),
        (
            "import tornado.ioloop",
            targeting("asyncio.selector_events", "tornado.ioloop"),
        ),
        (
            "import tornado.iostream",
            targeting("asyncio.selector_events", "tornado.ioloop", "tornado.iostream"),
        ),
        (
            FIRST_LOOPS[1],  # imports tornado.platform.asyncio, not tornado.iostream
            targeting(
                "asyncio.selector_events", "tornado.ioloop", "tornado.platform.asyncio"
            ),
        ),
        (
            "import tornado.platform.asyncio",  # looked up before its code runs
            targeting(
                "asyncio.selector_events", "tornado.ioloop", "tornado.platform.asyncio"
            ),
        ),
    ],
)
def test_start_up_installs_what_is_imported_and_arms_the_rest(pth, first, expected):
    result = run(f"{first}; import fastloop; print(sorted(fastloop.installed()))", "1")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.strip() == expected


def test_available_answers_alike_before_and_after_tornado_is_imported(pth):
    """Asked first, available() imports the targets, which applies the armed
    patches: a check must not then read fastloop's replacement as stock's."""
    code = (
        "import json, fastloop; before = fastloop.available(); "
        "import tornado.platform.asyncio, tornado.iostream; "
        "print(json.dumps([before, fastloop.available(), "
        "sorted(fastloop.installed())]))"
    )
    result = run(code, "1")
    assert result.returncode == 0, result.stderr
    before, after, installed = json.loads(result.stdout)
    assert before == after
    assert all(before[name] is None for name in installed)
    assert set(installed) >= set(default_set()) - {"switchinterval"}
