"""Declines where the internals differ: CPython 3.14's call_soon_threadsafe,
free-threaded builds, and what ``fastloop doctor`` says of each.

No 3.14 or free-threaded interpreter runs here: 3.14's code shape is
simulated (``tests_support.simulate_python_314``), and a build without its
GIL by ``sys._is_gil_enabled`` returning False.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import types
from asyncio import base_events, selector_events

import pytest
from tornado.platform.asyncio import BaseAsyncIOLoop

import fastloop
from fastloop import cli
from fastloop.patches import NO_GIL, gil_enabled, wakeup
from tests_support import (
    call_soon_threadsafe_314,
    dask_installed,
    dask_patches,
    doctor_row,
    simulate_python_314,
)

#: The patches that rely on the GIL, and so decline without one.
NEED_GIL = (
    "add_callback",
    "wakeup",
    "read_interest",
    "read_buffer",
    "write_callback",
    "poll",
    "switchinterval",
)


def wake_then_queue(self, callback, *args, context=None):
    """A shape no CPython has: the loop is woken before the handle is queued."""
    self._check_closed()
    self._write_to_self()
    handle = asyncio.Handle(callback, args, self, context)
    self._ready.append(handle)
    return handle


def queue_elsewhere(self, callback, *args, context=None):
    """A shape no CPython has: queued through a helper wakeup has not read."""
    self._check_closed()
    handle = self._add_callback_somehow(callback, args, context)
    self._write_to_self()
    return handle


def selector_module(call_soon_threadsafe) -> types.ModuleType:
    """An ``asyncio.selector_events`` whose loop has this call_soon_threadsafe."""
    stock = selector_events.BaseSelectorEventLoop
    own = {
        name: stock.__dict__[name]
        for name in ("_write_to_self", "_read_from_self", "_make_self_pipe")
    }
    own["call_soon_threadsafe"] = call_soon_threadsafe
    module = types.ModuleType("asyncio.selector_events")
    module.BaseSelectorEventLoop = type("BaseSelectorEventLoop", (stock,), own)
    return module


@pytest.fixture
def no_gil(monkeypatch):
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)


def not_installed() -> set[str]:
    """Patches doctor shows off by design for want of their package."""
    return set() if dask_installed() else dask_patches()


# CPython 3.14's call_soon_threadsafe (gh-128340)


def test_wakeup_accepts_this_interpreters_shape_and_3_14s():
    assert wakeup.check(selector_events) is None  # 3.10-3.13: via _call_soon
    assert wakeup.check(selector_module(call_soon_threadsafe_314)) is None


@pytest.mark.parametrize("shape", [wake_then_queue, queue_elsewhere])
def test_wakeup_declines_a_shape_it_does_not_know(shape):
    reason = wakeup.check(selector_module(shape)) or ""
    assert reason.startswith("BaseEventLoop.call_soon_threadsafe changed")


def test_an_unknown_shape_is_one_line_and_no_change(monkeypatch, caplog):
    monkeypatch.setattr(
        base_events.BaseEventLoop, "call_soon_threadsafe", wake_then_queue
    )
    write = selector_events.BaseSelectorEventLoop.__dict__["_write_to_self"]
    assert "call_soon_threadsafe changed" in (fastloop.available()["wakeup"] or "")
    with caplog.at_level(logging.INFO, logger="fastloop"):
        assert fastloop.install(["wakeup"]) == frozenset()
    records = [r for r in caplog.records if r.name == "fastloop"]
    assert len(records) == 1
    assert "'wakeup' declined" in records[0].getMessage()
    assert "call_soon_threadsafe" in records[0].getMessage()
    assert records[0].levelno == logging.WARNING  # asked for by name
    assert selector_events.BaseSelectorEventLoop.__dict__["_write_to_self"] is write


def test_3_14s_shape_installs_and_uninstalls_cleanly(monkeypatch):
    simulate_python_314(monkeypatch)
    write = selector_events.BaseSelectorEventLoop.__dict__["_write_to_self"]
    assert fastloop.install(["wakeup"]) == {"wakeup"}
    assert selector_events.BaseSelectorEventLoop.__dict__["_write_to_self"] is not write
    fastloop.uninstall()
    assert selector_events.BaseSelectorEventLoop.__dict__["_write_to_self"] is write


def test_wakeup_declines_when_run_once_polls_before_it_reads_ready(monkeypatch):
    def _run_once(self):
        event_list = self._selector.select(None)
        if self._ready:
            self._process_events(event_list)

    monkeypatch.setattr(base_events.BaseEventLoop, "_run_once", _run_once)
    reason = wakeup.check(selector_events) or ""
    assert "_run_once no longer reads _ready before it polls" in reason


# Free-threaded builds


def test_the_gil_is_assumed_where_sys_cannot_say(monkeypatch):
    monkeypatch.delattr(sys, "_is_gil_enabled", raising=False)  # before 3.13
    assert gil_enabled()
    core = {
        n: why for n, why in fastloop.available().items() if n not in dask_patches()
    }
    assert core == dict.fromkeys(core)


def test_a_build_with_its_gil_on_applies(monkeypatch):
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: True, raising=False)
    available = fastloop.available()
    assert all(
        available[name] is None for name in available if name not in dask_patches()
    )


def test_without_a_gil_each_patch_that_relies_on_it_declines(no_gil):
    available = fastloop.available()
    for name in NEED_GIL:
        assert (available[name] or "").startswith(f"{NO_GIL}: "), name
    assert "relies on the GIL's atomicity" in available["add_callback"]
    assert "relies on the GIL's atomicity" in available["wakeup"]
    assert available["write_to_fd"] is None  # loop-thread counters only


def test_one_helper_decides_for_every_patch(monkeypatch):
    monkeypatch.setattr(fastloop.patches, "gil_enabled", lambda: False)
    available = fastloop.available()
    assert [n for n in NEED_GIL if (available[n] or "").startswith(NO_GIL)] == list(
        NEED_GIL
    )


def test_without_a_gil_install_declines_each_in_one_line_and_changes_nothing(
    no_gil, caplog
):
    stock = {
        "add_callback": BaseAsyncIOLoop.__dict__["add_callback"],
        "_write_to_self": selector_events.BaseSelectorEventLoop._write_to_self,
        "__init__": selector_events.BaseSelectorEventLoop.__init__,
    }
    interval = sys.getswitchinterval()
    with caplog.at_level(logging.INFO, logger="fastloop"):
        assert fastloop.install(list(NEED_GIL)) == frozenset()
    lines = [r.getMessage() for r in caplog.records if r.name == "fastloop"]
    assert len(lines) == len(NEED_GIL)
    for name, line in zip(NEED_GIL, sorted(lines, key=_patch_order), strict=True):
        assert f"patch {name!r} declined" in line
        assert NO_GIL in line
        assert "\n" not in line
    assert fastloop.installed() == frozenset()
    assert BaseAsyncIOLoop.__dict__["add_callback"] is stock["add_callback"]
    loop_class = selector_events.BaseSelectorEventLoop
    assert loop_class._write_to_self is stock["_write_to_self"]
    assert loop_class.__init__ is stock["__init__"]
    assert sys.getswitchinterval() == interval


def test_without_a_gil_the_default_set_keeps_write_to_fd(no_gil):
    # distributed's patches need no GIL: armed, or active where it is imported.
    assert fastloop.install() == {"write_to_fd", *dask_patches()}


def _patch_order(line: str) -> int:
    return next(i for i, name in enumerate(NEED_GIL) if f"'{name}'" in line)


# fastloop doctor


def test_doctor_shows_each_no_gil_decline_as_off_by_design(no_gil, capsys):
    assert cli.main(["doctor", "--loop", "asyncio"]) == 0
    out = capsys.readouterr().out
    assert "build         free-threaded, GIL disabled" in out
    for name in NEED_GIL:
        assert doctor_row(out, name).startswith(f"off, by design: {NO_GIL}: "), name
    assert doctor_row(out, "write_to_fd") == "ok (requested)"
    assert "verdict       ok: everything requested can apply, or is off by" in out


def test_doctor_json_shows_each_no_gil_decline(no_gil, capsys):
    assert cli.main(["doctor", "--loop", "asyncio", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["build"]["gil_enabled"] is False
    assert set(report["off_by_design"]) == set(NEED_GIL) | not_installed()
    for name in NEED_GIL:
        assert report["patches"][name].startswith(NO_GIL)
        assert report["off_by_design"][name] == report["patches"][name]
    assert report["patches"]["write_to_fd"] is None
    assert report["ok"] is True


def test_doctor_under_uvloop_without_a_gil(no_gil, capsys):
    pytest.importorskip("uvloop")
    assert cli.main(["doctor", "--loop", "uvloop", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    for name in NEED_GIL:
        assert report["off_by_design"][name].startswith(NO_GIL)


def test_doctor_with_the_gil_says_so(capsys):
    assert cli.main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["build"]["gil_enabled"] is True
    assert report["off_by_design"] == dict.fromkeys(
        not_installed(), "distributed is not installed"
    )


def test_doctor_shows_an_unknown_call_soon_threadsafe_as_a_decline(monkeypatch, capsys):
    monkeypatch.setattr(
        base_events.BaseEventLoop, "call_soon_threadsafe", wake_then_queue
    )
    assert cli.main(["doctor", "--loop", "asyncio"]) == 1
    out = capsys.readouterr().out
    assert doctor_row(out, "wakeup").startswith(
        "declines: BaseEventLoop.call_soon_threadsafe changed"
    )
    assert "verdict       NOT OK" in out
    assert cli.main(["doctor", "--loop", "asyncio", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["patches"]["wakeup"].startswith(
        "BaseEventLoop.call_soon_threadsafe changed"
    )
    assert "wakeup" not in report["off_by_design"]
    assert report["ok"] is False


def test_doctor_under_3_14s_shape_says_wakeup_ok(monkeypatch, capsys):
    simulate_python_314(monkeypatch)
    assert cli.main(["doctor", "--loop", "asyncio", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["patches"]["wakeup"] is None
