"""The ``poll`` patch: polls that keep the GIL, and the opt-in skip bound.

Time is a fake clock here: the gate reads it once per zero-timeout poll,
and each read advances it by ``STEP_NS``, so "within the bound" becomes
"within ``bound / STEP_NS`` loop iterations", whatever the machine does.
"""

from __future__ import annotations

import asyncio
import ctypes
import itertools
import os
import selectors
import signal
import socket

import pytest
from tornado.ioloop import IOLoop

import fastloop
from fastloop import config
from fastloop.patches import poll

STEP_NS = 100_000  # each gate clock read: 100 us later
BOUND_US = 1_000.0  # 10 reads, so a real poll at least every ~10 iterations


@pytest.fixture
def fake_clock(monkeypatch):
    """The fake clock, and skipping on with a bound of ``BOUND_US``."""
    ticks = itertools.count(step=STEP_NS)
    monkeypatch.setattr(poll, "clock", ticks.__next__)
    before = config.settings.poll_us
    config.settings.poll_us = BOUND_US
    yield
    config.settings.poll_us = before


class CountingEpollWait:
    """Stands in for libc's epoll_wait, counting the calls that keep the GIL."""

    def __init__(self) -> None:
        self.calls = 0
        self.real = poll.load_epoll_wait()

    def __call__(self, *args):
        self.calls += 1
        return self.real(*args)


@pytest.fixture
def held_polls(monkeypatch):
    """Every sample reads as contended: polls keep the GIL between samples."""
    counting = CountingEpollWait()
    monkeypatch.setattr(poll, "EPOLL_WAIT", counting)
    monkeypatch.setattr(poll, "CONTENDED_NS", -(10**12))
    monkeypatch.setattr(poll, "HELD_SAMPLE_NS", 10**15)
    return counting


class Chain:
    """A callback that re-adds itself forever: the ready queue never drains."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.iterations = 0
        self.running = True
        loop.call_soon(self.step)

    def step(self) -> None:
        self.iterations += 1
        if self.running:
            self.loop.call_soon(self.step)


def iterations_until_readable_is_seen(patches: list[str]) -> int:
    """Chain forever; make a socket readable; count iterations until its reader ran."""
    with fastloop.patched(patches):
        return _iterations_until_readable_is_seen()


def _iterations_until_readable_is_seen() -> int:
    loop = asyncio.new_event_loop()
    reader, writer = socket.socketpair()
    try:
        chain = Chain(loop)
        seen_at: list[int] = []

        def on_readable() -> None:
            reader.recv(16)
            seen_at.append(chain.iterations)
            chain.running = False
            loop.stop()

        loop.add_reader(reader.fileno(), on_readable)

        def write_after_warm_up() -> None:
            if chain.iterations < 50:
                loop.call_soon(write_after_warm_up)
                return
            written_at.append(chain.iterations)
            writer.send(b"x")

        written_at: list[int] = []
        loop.call_soon(write_after_warm_up)
        loop.call_later(30, loop.stop)  # a lost event fails, not hangs
        loop.run_forever()
        loop.remove_reader(reader.fileno())
    finally:
        reader.close()
        writer.close()
        loop.close()
    assert seen_at, "the reader never ran"
    return seen_at[0] - written_at[0]


def test_readable_socket_is_seen_within_the_bound_while_callbacks_never_drain(
    fake_clock,
):
    stock = iterations_until_readable_is_seen([])
    fastloop.reset_stats()
    patched = iterations_until_readable_is_seen(["poll"])
    skipped = fastloop.stats().poll.skipped
    assert stock <= 1  # stock polls on every iteration
    # The bound is 10 clock reads; one more for the iteration that polls.
    assert 1 <= patched <= BOUND_US * 1_000 // STEP_NS + 1
    assert skipped > 0


def test_polls_that_keep_the_gil_use_a_call_that_keeps_it():
    # ctypes.PyDLL functions run with the GIL held: that is the point.
    assert poll.load_epoll_wait()._flags_ & ctypes._FUNCFLAG_PYTHONAPI


def test_held_polls_return_exactly_what_stock_returns(held_polls):
    """Many fds (past the 64-event buffer), readable and writable, same answer."""
    with fastloop.patched(["poll"]):
        loop = asyncio.new_event_loop()
        try:
            _compare_with_stock(loop._selector)
        finally:
            loop.close()
    assert held_polls.calls >= 3


def _compare_with_stock(selector: selectors.EpollSelector) -> None:
    pairs = [socket.socketpair() for _ in range(100)]
    try:
        for index, (a, b) in enumerate(pairs):
            mask = selectors.EVENT_READ | (selectors.EVENT_WRITE * (index % 3 == 0))
            selector.register(a, mask, index)
            if index % 2:
                b.send(b"x")
        selector.select(0)  # the first zero-timeout poll is a sample
        for _ in range(3):
            stock = selectors.EpollSelector.select(selector, 0)
            gated = selector.select(0)
            assert [(k.fd, e) for k, e in gated] == [(k.fd, e) for k, e in stock]
            assert len(gated) == 67  # 50 readable, 34 writable, 17 both
    finally:
        for a, b in pairs:
            selector.unregister(a)
            a.close()
            b.close()


def run_with_clocks(monkeypatch, wall_step: int, cpu_step: int) -> int:
    """Iterate a loop under fake clocks; how many zero-timeout polls kept the GIL."""
    counting = CountingEpollWait()
    monkeypatch.setattr(poll, "EPOLL_WAIT", counting)
    monkeypatch.setattr(poll, "CONTENDED_NS", 10**15)  # no single wait counts
    monkeypatch.setattr(poll, "clock", itertools.count(step=wall_step).__next__)
    monkeypatch.setattr(poll, "thread_clock", itertools.count(step=cpu_step).__next__)
    with fastloop.patched(["poll"]):
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(_iterate(500))
        finally:
            loop.close()
    return counting.calls


def test_without_contention_polls_are_stock(monkeypatch):
    # The thread's CPU clock keeps up with the wall clock: never starved.
    fastloop.reset_stats()
    assert run_with_clocks(monkeypatch, wall_step=1_000, cpu_step=1_000) == 0
    assert fastloop.stats().gil.poll.samples >= 1


def test_a_loop_that_runs_less_than_half_the_time_keeps_the_gil(monkeypatch):
    # Busy (never blocked) yet its CPU clock barely moves: it waited for the
    # GIL at polls between two samples, so polls keep it from then on.
    assert run_with_clocks(monkeypatch, wall_step=100_000, cpu_step=10) > 400


def test_a_loop_with_held_polls_runs_tornado_io(held_polls):
    """An echo over real sockets, every zero-timeout poll keeping the GIL."""
    from tornado.iostream import IOStream

    async def echo() -> bytes:
        a, b = socket.socketpair()
        left, right = IOStream(a), IOStream(b)
        for index in range(200):
            await left.write(b"%03d" % index)
            await right.write(await right.read_bytes(3))
            assert await left.read_bytes(3) == b"%03d" % index
        left.close()
        right.close()
        return b"done"

    with fastloop.patched(["poll"]):
        assert asyncio.run(echo()) == b"done"
    assert held_polls.calls > 0


def test_closing_the_selector_takes_the_gate_off():
    with fastloop.patched(["poll"]):
        loop = asyncio.new_event_loop()
        selector = loop._selector
        assert "select" in vars(selector)
        loop.close()
    assert "select" not in vars(selector) and "close" not in vars(selector)


def test_zero_bound_never_skips(fake_clock):
    config.settings.poll_us = 0
    fastloop.reset_stats()
    assert iterations_until_readable_is_seen(["poll"]) <= 1
    assert fastloop.stats().poll.skipped == 0


def test_a_poll_with_a_timeout_is_never_skipped(monkeypatch):
    # A clock that never moves: every zero-timeout poll would be skipped, so
    # the only way to see the socket is a real poll once the queue drains.
    monkeypatch.setattr(poll, "clock", lambda: 0)
    monkeypatch.setattr(config.settings, "poll_us", 1e12)
    with fastloop.patched(["poll"]):
        _readable_before_the_loop_waits()


def _readable_before_the_loop_waits() -> None:
    loop = asyncio.new_event_loop()
    reader, writer = socket.socketpair()
    try:
        # Readable before the loop runs, and its ready queue empty: only its
        # poll with a timeout (of the give-up timer) can see the socket.
        writer.send(b"x")
        received = loop.create_future()
        loop.add_reader(
            reader.fileno(),
            lambda: received.done() or received.set_result(reader.recv(1)),
        )
        give_up = loop.call_later(30, loop.stop)  # a skipped poll fails, not hangs
        assert loop.run_until_complete(received) == b"x"
        give_up.cancel()
        loop.remove_reader(reader.fileno())
    finally:
        reader.close()
        writer.close()
        loop.close()


def test_stopping_loop_polls_for_real_as_stock(fake_clock):
    def scenario() -> list[str]:
        loop = asyncio.new_event_loop()
        reader, writer = socket.socketpair()
        ran: list[str] = []
        try:
            # Several iterations in a row: the next zero-timeout poll would
            # be skipped, unless the loop is stopping.
            loop.run_until_complete(asyncio.sleep(0))
            writer.send(b"x")
            loop.add_reader(reader.fileno(), lambda: ran.append("reader"))
            loop.call_soon(lambda: ran.append("callback"))
            loop.stop()  # run one iteration
            loop.run_forever()
            # stop() from a callback: I/O a skipped poll did not collect is
            # not lost, it runs once the loop polls again for real.
            loop.call_soon(loop.stop)
            loop.run_forever()
            ran.append("next run")
            # The queue is empty: the loop polls with a timeout, for real.
            loop.remove_reader(reader.fileno())
            loop.add_reader(
                reader.fileno(), lambda: (ran.append("reader"), loop.stop())
            )
            give_up = loop.call_later(30, loop.stop)  # a lost event fails
            loop.run_forever()
            give_up.cancel()
            loop.remove_reader(reader.fileno())
        finally:
            reader.close()
            writer.close()
            loop.close()
        return ran

    stock = scenario()
    with fastloop.patched(["poll"]):
        patched = scenario()
    assert stock[:2] == patched[:2] == ["callback", "reader"]
    assert stock[-1] == patched[-1] == "reader"


def test_timers_fire_in_the_same_iteration_as_stock(fake_clock):
    def scenario() -> int:
        loop = asyncio.new_event_loop()
        try:
            chain = Chain(loop)
            fired: list[int] = []
            loop.call_later(0, lambda: (fired.append(chain.iterations), loop.stop()))
            loop.run_forever()
            chain.running = False
        finally:
            loop.close()
        return fired[0]

    stock = scenario()
    with fastloop.patched(["poll"]):
        patched = scenario()
    assert stock == patched


def test_signal_handler_runs_within_the_bound(fake_clock):
    if not hasattr(signal, "SIGUSR1"):
        pytest.skip("needs SIGUSR1")
    with fastloop.patched(["poll"]):
        marks = _signal_during_a_chain()
    assert marks["handled"] - marks["sent"] <= BOUND_US * 1_000 // STEP_NS + 1


def _signal_during_a_chain() -> dict[str, int]:
    loop = asyncio.new_event_loop()
    try:
        chain = Chain(loop)
        marks: dict[str, int] = {}

        def on_signal() -> None:
            marks["handled"] = chain.iterations
            chain.running = False
            loop.stop()

        def send_signal() -> None:
            if chain.iterations < 30:
                loop.call_soon(send_signal)
                return
            marks["sent"] = chain.iterations
            os.kill(os.getpid(), signal.SIGUSR1)

        loop.add_signal_handler(signal.SIGUSR1, on_signal)
        loop.call_soon(send_signal)
        loop.call_later(30, loop.stop)
        loop.run_forever()
        loop.remove_signal_handler(signal.SIGUSR1)
    finally:
        loop.close()
    return marks


def test_debug_mode_polls_every_time(fake_clock):
    with fastloop.patched(["poll"]):
        loop = asyncio.new_event_loop()
        loop.set_debug(True)
        fastloop.reset_stats()
        try:
            loop.run_until_complete(_iterate(200))
        finally:
            loop.close()
    assert fastloop.stats().poll.skipped == 0


def test_loops_created_before_install_and_after_uninstall_keep_stock(fake_clock):
    before = asyncio.new_event_loop()
    with fastloop.patched(["poll"]):
        during = asyncio.new_event_loop()
        fastloop.reset_stats()
        before.run_until_complete(_iterate(200))
        assert fastloop.stats().poll.skipped == 0
        during.run_until_complete(_iterate(200))
        assert fastloop.stats().poll.skipped > 150
        assert "select" in vars(during._selector)
    fastloop.reset_stats()
    during.run_until_complete(_iterate(200))  # uninstall took the gate off
    assert fastloop.stats().poll.skipped == 0
    assert "select" not in vars(before._selector)
    assert "select" not in vars(during._selector)
    before.close()
    during.close()


def test_tornado_ioloop_runs_patched(fake_clock):
    with fastloop.patched(["poll", "add_callback"]):
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        io = IOLoop.current()
        fastloop.reset_stats()
        left = [500]

        def step() -> None:
            left[0] -= 1
            if left[0]:
                io.add_callback(step)
            else:
                io.stop()

        io.add_callback(step)
        io.start()
        io.close()
        asyncio.set_event_loop(None)
        loop.close()
    assert left == [0]
    assert fastloop.stats().poll.skipped > 400


def test_real_zero_timeout_polls_measure_the_gil_wait(monkeypatch, fake_clock):
    cpu = itertools.count(step=10)
    monkeypatch.setattr(poll, "thread_clock", cpu.__next__)
    with fastloop.patched(["poll"]):
        loop = asyncio.new_event_loop()
        fastloop.reset_stats()
        try:
            loop.run_until_complete(_iterate(100))
        finally:
            loop.close()
        snapshot = fastloop.stats()
    waits = snapshot.gil.poll
    assert waits.samples > 0
    assert snapshot.poll.skipped > 0
    # Fake clocks: 100 us of wall time around each real poll, 10 ns of CPU.
    assert waits.max_ns == STEP_NS - 10
    assert "GIL wait at poll" in fastloop.report()
    assert snapshot.to_dict()["gil"]["poll"]["samples"] == waits.samples


def test_only_epoll_selector_loops_get_a_gate(fake_clock):
    """``check_loop`` names the loops the gate is never put on (doctor's
    answer for them), and those loops run stock polls under the patch."""
    uvloop = pytest.importorskip("uvloop")
    with fastloop.patched(["poll"]):
        loops = [
            asyncio.new_event_loop(),
            asyncio.SelectorEventLoop(selectors.SelectSelector()),
            uvloop.new_event_loop(),
        ]
        fastloop.reset_stats()
        try:
            gated = []
            for loop in loops:
                loop.run_until_complete(_iterate(50))
                selector = getattr(loop, "_selector", None)
                gated.append("select" in vars(selector) if selector else False)
            reasons = [poll.check_loop(loop) for loop in loops]
            skipped = fastloop.stats().poll.skipped
        finally:
            for loop in loops:
                loop.close()
    assert gated == [True, False, False]
    assert reasons == [
        None,
        "its selector is SelectSelector, not epoll",
        "uvloop.Loop has no asyncio selector to poll",
    ]
    assert skipped > 0  # the epoll loop's gate skipped polls: it was on


def test_declines_when_run_once_changed(monkeypatch):
    def _run_once(self):  # polls nothing: not the code the gate was written for
        pass

    monkeypatch.setattr(asyncio.BaseEventLoop, "_run_once", _run_once)
    reason = fastloop.available()["poll"]
    assert reason is not None and "_run_once" in reason
    assert "poll" not in fastloop.install(["poll"])


async def _iterate(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_a_failed_held_poll_falls_back_to_stock(held_polls, monkeypatch):
    monkeypatch.setattr(held_polls, "real", lambda *args: -1)  # EINTR, say
    with fastloop.patched(["poll"]):
        loop = asyncio.new_event_loop()
        try:
            selector = loop._selector
            a, b = socket.socketpair()
            selector.register(a, selectors.EVENT_READ)
            b.send(b"x")
            selector.select(0)  # the sample
            assert [key.fileobj for key, _ in selector.select(0)] == [a]
            assert held_polls.calls == 1
            selector.unregister(a)
            a.close()
            b.close()
        finally:
            loop.close()
