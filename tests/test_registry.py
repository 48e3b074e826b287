"""install / uninstall / installed / available / patched."""

from __future__ import annotations

import logging
import sys
import threading

import pytest
import tornado.iostream  # noqa: F401  (every patch's target is imported here)
import tornado.platform.asyncio as tornado_asyncio
from tornado.ioloop import IOLoop

import fastloop
from fastloop.patches import Patch, registry
from fastloop.patches.changes import PerObject, Swap
from tests_support import default_set, run_python

DEFAULT = frozenset(default_set())
#: What install() answers: active, or armed until distributed is imported.
REQUESTED = frozenset(default_set(dask=True))


def active_default():
    """What the default set makes active here (distributed's once imported)."""
    return REQUESTED if "distributed" in sys.modules else DEFAULT


STOCK_ADD_CALLBACK = tornado_asyncio.BaseAsyncIOLoop.__dict__["add_callback"]


def current_add_callback():
    return tornado_asyncio.BaseAsyncIOLoop.__dict__["add_callback"]


def test_install_is_idempotent_and_reports_what_is_active():
    assert fastloop.installed() == frozenset()
    first = fastloop.install()
    wrapper = current_add_callback()
    second = fastloop.install()
    assert first == second == REQUESTED
    assert fastloop.installed() == active_default()
    assert current_add_callback() is wrapper is not STOCK_ADD_CALLBACK
    assert wrapper.__wrapped__ is STOCK_ADD_CALLBACK


def test_uninstall_restores_the_same_object_across_cycles():
    for _ in range(5):
        fastloop.install(["add_callback"])
        assert current_add_callback() is not STOCK_ADD_CALLBACK
        fastloop.uninstall(["add_callback"])
        assert current_add_callback() is STOCK_ADD_CALLBACK
    fastloop.uninstall()  # uninstalling nothing is fine
    assert current_add_callback() is STOCK_ADD_CALLBACK
    assert fastloop.installed() == frozenset()


def test_unknown_names_raise_value_error_listing_valid_ones():
    with pytest.raises(ValueError, match="valid names: add_callback"):
        fastloop.install(["add_calback"])
    with pytest.raises(ValueError, match="nope"):
        fastloop.uninstall("nope")
    with pytest.raises(ValueError), fastloop.patched(["bogus"]):
        pass
    assert fastloop.installed() == frozenset()


def test_a_single_name_string_is_accepted():
    assert fastloop.install("add_callback") == {"add_callback"}


def test_patched_restores_the_prior_state():
    with fastloop.patched() as active:
        assert active == REQUESTED
        assert fastloop.installed() == active_default()
    assert fastloop.installed() == frozenset()
    assert current_add_callback() is STOCK_ADD_CALLBACK

    fastloop.install()
    wrapper = current_add_callback()
    with fastloop.patched(["add_callback"]):
        pass
    assert fastloop.installed() == active_default()
    assert current_add_callback() is wrapper


def test_concurrent_install_uninstall_from_threads_leaves_a_consistent_state():
    barrier = threading.Barrier(8)
    errors = []

    def churn(i):
        try:
            barrier.wait()
            for _ in range(200):
                fastloop.install()
                fastloop.uninstall()
                with fastloop.patched():
                    pass
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=churn, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert fastloop.installed() == frozenset()
    assert current_add_callback() is STOCK_ADD_CALLBACK


def test_missing_internal_declines_with_one_log_line(monkeypatch, caplog):
    monkeypatch.delattr(IOLoop, "_discard_future_result")
    assert (
        fastloop.available()["add_callback"]
        == "IOLoop._discard_future_result is missing"
    )
    with caplog.at_level(logging.INFO, logger="fastloop"):
        assert fastloop.install(["add_callback"]) == frozenset()
    lines = [r for r in caplog.records if r.name == "fastloop"]
    assert len(lines) == 1
    assert lines[0].levelno == logging.WARNING  # the user named it explicitly
    assert "add_callback" in lines[0].getMessage()
    assert "_discard_future_result is missing" in lines[0].getMessage()
    assert fastloop.installed() == frozenset()
    assert current_add_callback() is STOCK_ADD_CALLBACK


def test_changed_implementation_declines(monkeypatch):
    def add_callback(self, callback, *args, **kwargs):
        self.asyncio_loop.call_soon_threadsafe(callback, *args, **kwargs)

    monkeypatch.setattr(tornado_asyncio.BaseAsyncIOLoop, "add_callback", add_callback)
    assert (
        "no longer uses call_soon(_run_callback)"
        in fastloop.available()["add_callback"]
    )
    assert fastloop.install() == REQUESTED - {"add_callback"}  # the others still apply
    assert tornado_asyncio.BaseAsyncIOLoop.__dict__["add_callback"] is add_callback


@pytest.fixture
def extra_patches():
    """Register two throwaway patches on a module of our own for the test."""
    import types

    target = types.ModuleType("fastloop_test_target")
    target.value = "original"
    sys.modules[target.__name__] = target

    good = Patch(
        name="test_good",
        target=target.__name__,
        summary="test",
        replaces="`value`",
        relies_on="nothing",
        verifies=(),
        check=lambda module: None,
        apply=lambda module: [Swap(module, "value", "patched")],
    )
    bad = Patch(
        name="test_bad",
        target=target.__name__,
        summary="test",
        replaces="`value`",
        relies_on="nothing",
        verifies=(),
        check=lambda module: "faked missing internal",
        apply=lambda module: [Swap(module, "value", "never")],
    )
    broken = Patch(
        name="test_broken",
        target=target.__name__,
        summary="test",
        replaces="`value`",
        relies_on="nothing",
        verifies=(),
        check=lambda module: None,
        apply=lambda module: [Swap(module, "value", "half"), Swap(int, "x", 1)],
    )
    for patch in (good, bad, broken):
        registry.register(patch, default=False)
    yield target
    for patch in (good, bad, broken):
        registry.unregister(patch.name)
    del sys.modules[target.__name__]


def test_a_finalizer_reentering_setdefault_neither_deadlocks_nor_loses_its_count():
    # make() allocates, and an allocation can run a finalizer (distributed's
    # Future.__del__ writes to a stream, and adds a callback) that needs the
    # state of another owner, or of this very owner, on the same thread
    # while setdefault holds the lock.  Simulated exactly: the first make()
    # runs the "finalizer", which counts once on each owner.
    class Owner:
        pass

    class Tally:
        def __init__(self, owner):
            self.counted = 0

    first, other = Owner(), Owner()
    states = PerObject("_fastloop_test_tally")
    states.do()
    pending = ["the finalizer"]
    seen = {}

    def make(owner):
        if pending:
            pending.pop()
            for name, touched in (("other", other), ("same", first)):
                tally = states.setdefault(touched, make)
                tally.counted += 1
                seen[name] = tally
        return Tally(owner)

    outer = []
    worker = threading.Thread(
        target=lambda: outer.append(states.setdefault(first, make)), daemon=True
    )
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "setdefault deadlocked on its own lock"
    # One tally per owner, the one attached: the finalizer's count is kept.
    assert outer == [seen["same"]]
    assert first._fastloop_test_tally is seen["same"]
    assert other._fastloop_test_tally is seen["other"]
    assert (seen["same"].counted, seen["other"].counted) == (1, 1)
    assert states.setdefault(first, make) is seen["same"]
    states.undo()
    assert not hasattr(first, "_fastloop_test_tally")
    assert not hasattr(other, "_fastloop_test_tally")


def test_a_declined_patch_leaves_the_others_applied(extra_patches, caplog):
    with caplog.at_level(logging.INFO, logger="fastloop"):
        active = fastloop.install(["test_bad", "test_good", "add_callback"])
    assert active == {"test_good", "add_callback"}
    assert extra_patches.value == "patched"
    lines = [r.getMessage() for r in caplog.records if r.name == "fastloop"]
    assert lines == [
        "fastloop: patch 'test_bad' declined, stock behaviour kept: "
        "faked missing internal"
    ]


def test_a_patch_never_half_applies(extra_patches, caplog):
    with caplog.at_level(logging.INFO, logger="fastloop"):
        assert fastloop.install(["test_broken"]) == frozenset()
    assert extra_patches.value == "original"
    assert "apply failed" in caplog.text


def test_available_names_every_patch():
    verdicts = fastloop.available()
    assert set(verdicts) == set(registry.known())
    assert verdicts["add_callback"] is None


def test_available_does_not_depend_on_the_loop_the_application_runs():
    """A patch's check() reads the classes it changes, never which loop runs:
    one answer before Tornado's asyncio module is imported, after it, inside
    a uvloop loop and under a uvloop policy (``fastloop doctor`` tells the
    loops apart).  Under ``-W error``: no deprecated asyncio API is called."""
    pytest.importorskip("uvloop")
    result = run_python(
        """
        import asyncio, sys, warnings
        import fastloop, uvloop
        assert "tornado.platform.asyncio" not in sys.modules
        first = fastloop.available()
        import tornado.platform.asyncio
        answers = [fastloop.available()]
        async def main():
            return fastloop.available()
        answers.append(uvloop.run(main()))
        if hasattr(asyncio, "set_event_loop_policy"):  # before 3.16
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
            answers.append(fastloop.available())
        print(sorted(name for name, why in first.items() if why is None))
        print([answer == first for answer in answers])
        """,
        "-W",
        "error",
    )
    assert result.returncode == 0, result.stderr
    applicable, same = result.stdout.splitlines()
    assert "wakeup" in applicable
    assert same in ("[True, True]", "[True, True, True]")


def test_install_before_tornado_is_imported_applies_on_import():
    result = run_python(
        """
        import sys, fastloop
        armed = fastloop.install()
        assert "tornado" not in sys.modules, "install() must not import tornado"
        assert "asyncio" not in sys.modules, "nor asyncio"
        assert "wrapt" not in sys.modules, "nor wrapt"
        machinery = {"fastloop.patches.registry", "fastloop.patches.changes"}
        patches = sorted(
            m for m in sys.modules if m.startswith("fastloop.patches.")
            and m not in machinery
        )
        print(sorted(armed), sorted(fastloop.installed()), patches)
        import tornado.ioloop, tornado.iostream, tornado.platform.asyncio as m
        print(sorted(fastloop.installed()), hasattr(m.BaseAsyncIOLoop.add_callback,
              "__wrapped__"))
        """
    )
    assert result.returncode == 0, result.stderr
    # Every patch waits for its target module, and so does its own module.
    assert result.stdout.splitlines() == [
        f"{default_set(dask=True)} [] []",
        f"{default_set()} True",
    ]


def test_a_hooked_import_keeps_the_real_loader():
    result = run_python(
        """
        import fastloop
        fastloop.install(["write_to_fd"])
        import importlib.machinery, tornado.iostream as m
        loader = importlib.machinery.SourceFileLoader
        print(type(m.__loader__) is loader, type(m.__spec__.loader) is loader,
              sorted(fastloop.installed()))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True", "['write_to_fd']"]


def test_uninstall_before_import_means_nothing_applies_later():
    result = run_python(
        """
        import fastloop
        fastloop.install()
        fastloop.uninstall()
        import tornado.platform.asyncio as m
        print(sorted(fastloop.installed()), hasattr(m.BaseAsyncIOLoop.add_callback,
              "__wrapped__"))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]", "False"]
