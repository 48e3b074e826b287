"""Differential tests of the on-loop ``add_callback`` contracts.

Each scenario runs once under stock Tornado and once with the patch, and
what it returns (order, values, logs, contexts) must be identical.  Each
patched run also reports how many fastloop batches it saw, so a test
cannot pass merely because the fast path was never taken.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import socket

import pytest
from tornado import gen
from tornado.ioloop import IOLoop

import fastloop
from fastloop.patches.add_callback import CALL_SOON_LOOPS
from tests_support import Records, batches_queued, current_loop, differential, normalise

PATCH = ["add_callback"]
request_id: contextvars.ContextVar[str] = contextvars.ContextVar(
    "request_id", default="-"
)


def on_loop(body):
    """Run ``body(io, loop)`` inside a fresh asyncio loop; return what it returns."""

    async def main():
        io = IOLoop.current()
        return await body(io, asyncio.get_running_loop())

    return asyncio.run(main())


async def settle(loop, iterations=5):
    for _ in range(iterations):
        await asyncio.sleep(0)


def test_fifo_with_other_asyncio_handles():
    def scenario():
        async def body(io, loop):
            order = []
            future = loop.create_future()
            future.add_done_callback(lambda f: order.append("future-done"))
            io.add_callback(order.append, "a1")
            io.add_callback(order.append, "a2")
            loop.call_soon(order.append, "soon1")
            io.add_callback(order.append, "a3")
            future.set_result(None)
            io.spawn_callback(order.append, "spawn")
            io.add_callback(order.append, "a4")
            loop.call_soon(order.append, "soon2")
            io.add_callback(lambda: order.append("lambda"))
            seen = batches_queued(loop)
            await settle(loop)
            return order, seen

        return on_loop(body)

    (stock, stock_batches), (patched, patched_batches) = differential(scenario, PATCH)
    assert stock == patched
    assert stock[:3] == ["a1", "a2", "soon1"]
    assert (stock_batches, patched_batches) == (0, 4)


def test_callback_added_by_callback_waits_for_io():
    """A callback that re-adds itself does not starve a ready socket."""

    def scenario():
        async def body(io, loop):
            events = []
            reader, writer = socket.socketpair()
            reader.setblocking(False)
            done = loop.create_future()

            def on_readable(fd, _events):
                events.append("io")
                io.remove_handler(fd)

            def spin(n):
                events.append(n)
                if n < 6:
                    io.add_callback(spin, n + 1)
                else:
                    done.set_result(None)

            io.add_handler(reader.fileno(), on_readable, IOLoop.READ)
            writer.send(b"x")
            io.add_callback(spin, 0)
            io.add_callback(spin, 100)
            await done
            reader.close()
            writer.close()
            return events

        return on_loop(body)

    stock, patched = differential(scenario, PATCH)
    assert stock == patched
    assert "io" in stock
    assert stock.index("io") < stock.index(6)


def test_each_callback_runs_in_its_own_context_snapshot():
    def scenario():
        async def body(io, loop):
            seen = []

            def reader(tag):
                seen.append((tag, request_id.get()))
                request_id.set(f"changed-by-{tag}")

            request_id.set("first")
            io.add_callback(reader, "one")
            request_id.set("second")
            io.add_callback(reader, "two")
            io.add_callback(reader, "three")
            ctx = contextvars.copy_context()
            ctx.run(request_id.set, "other-context")
            ctx.run(io.add_callback, reader, "four")
            request_id.set("after")
            await settle(loop)
            seen.append(("caller", request_id.get()))
            return seen

        return on_loop(body)

    stock, patched = differential(scenario, PATCH)
    assert stock == patched
    assert stock == [
        ("one", "first"),
        ("two", "second"),
        ("three", "second"),
        ("four", "other-context"),
        ("caller", "after"),
    ]


def failing(tag):
    raise ValueError(f"boom {tag}")


def test_exceptions_are_logged_through_app_log_and_the_rest_run():
    def scenario():
        async def body(io, loop):
            ran = []
            request_id.set("ctx-at-add")
            with Records("tornado.application", "asyncio") as records:
                io.add_callback(ran.append, 1)
                io.add_callback(failing, "x")
                io.add_callback(ran.append, 2)
                io.add_callback(failing, tag="kw")
                await settle(loop)
            return ran, records.rows

        return on_loop(body)

    stock, patched = differential(scenario, PATCH)
    assert stock == patched
    ran, rows = stock
    assert ran == [1, 2]
    assert [r[1:] for r in rows] == [
        (
            "ERROR",
            normalise(f"Exception in callback {functools.partial(failing, 'x')!r}"),
            "ValueError",
        ),
        (
            "ERROR",
            normalise(
                f"Exception in callback {functools.partial(failing, tag='kw')!r}"
            ),
            "ValueError",
        ),
    ]


def test_log_records_see_the_callbacks_context():
    class ContextFilter:
        def __init__(self):
            self.values = []

        def filter(self, record):
            self.values.append(request_id.get())
            return True

    def scenario():
        async def body(io, loop):
            context_filter = ContextFilter()
            import logging

            logger = logging.getLogger("tornado.application")
            logger.addFilter(context_filter)
            try:
                with Records("tornado.application"):
                    request_id.set("A")
                    io.add_callback(failing, 1)
                    request_id.set("B")
                    io.add_callback(failing, 2)
                    await settle(loop)
            finally:
                logger.removeFilter(context_filter)
            return context_filter.values

        return on_loop(body)

    stock, patched = differential(scenario, PATCH)
    assert stock == patched == ["A", "B"]


def test_cancelled_error_is_swallowed_silently():
    def cancelled():
        raise asyncio.CancelledError()

    def scenario():
        async def body(io, loop):
            ran = []
            with Records("tornado.application", "asyncio") as records:
                io.add_callback(cancelled)
                io.add_callback(ran.append, "after")
                await settle(loop)
            return ran, records.rows

        return on_loop(body)

    stock, patched = differential(scenario, PATCH)
    assert stock == patched == (["after"], [])


def test_returned_awaitables_are_adopted_and_their_failures_logged():
    async def coroutine_ok(results):
        await asyncio.sleep(0)
        results.append("coroutine ran")

    async def coroutine_fails():
        await asyncio.sleep(0)
        raise KeyError("async boom")

    @gen.coroutine
    def tornado_coroutine(results):
        yield gen.moment
        results.append("gen.coroutine ran")

    def returns_plain_value():
        return 42

    def returns_failed_future():
        future = asyncio.get_running_loop().create_future()
        future.set_exception(RuntimeError("future boom"))
        return future

    def scenario():
        async def body(io, loop):
            results = []
            with Records("tornado.application", "asyncio") as records:
                io.add_callback(coroutine_ok, results)
                io.add_callback(coroutine_fails)
                io.add_callback(tornado_coroutine, results)
                io.add_callback(returns_plain_value)
                io.add_callback(returns_failed_future)
                await settle(loop, 10)
            return sorted(results), [(r[0], r[1], r[3]) for r in records.rows]

        return on_loop(body)

    stock, patched = differential(scenario, PATCH)
    assert stock == patched
    results, rows = stock
    assert results == ["coroutine ran", "gen.coroutine ran"]
    assert sorted(r[2] for r in rows) == ["KeyError", "RuntimeError"]


@pytest.mark.parametrize("exception", [KeyboardInterrupt, SystemExit])
def test_keyboard_interrupt_leaves_the_loop_and_loses_nothing(exception):
    def interrupt():
        raise exception()

    def scenario():
        with current_loop() as (loop, io):
            order = []

            def schedule():
                io.add_callback(order.append, "a")
                io.add_callback(interrupt)
                io.add_callback(order.append, "b")
                loop.call_soon(order.append, "soon")
                io.add_callback(order.append, "c")
                order.append(("batches", batches_queued(loop)))

            loop.call_soon(schedule)
            with pytest.raises(exception):
                loop.run_forever()
            order.append("interrupted")
            loop.call_soon(loop.stop)
            loop.run_forever()
            io.close()
            return order

    stock, patched = differential(scenario, PATCH)
    assert stock[0] == ("batches", 0)
    assert patched[0] == ("batches", 2)
    assert stock[1:] == patched[1:] == ["a", "interrupted", "b", "soon", "c"]


def test_other_base_exceptions_go_to_the_loops_exception_handler():
    class Unusual(BaseException):
        pass

    def unusual():
        raise Unusual("odd")

    def scenario():
        async def body(io, loop):
            reported = []
            loop.set_exception_handler(
                lambda _loop, context: reported.append(
                    (
                        normalise(context["message"]),
                        type(context["exception"]).__name__,
                        normalise(repr(context["handle"])),
                    )
                )
            )
            ran = []
            io.add_callback(unusual)
            io.add_callback(ran.append, "after")
            await settle(loop)
            return ran, reported

        return on_loop(body)

    stock, patched = differential(scenario, PATCH)
    assert stock == patched
    assert stock[0] == ["after"]
    assert stock[1][0][1] == "Unusual"


def test_kwargs_and_positional_arguments_are_passed_through():
    def record(out, *args, **kwargs):
        out.append((args, kwargs))

    def scenario():
        async def body(io, loop):
            out = []
            io.add_callback(record, out, 1, 2, key="value", other=None)
            io.add_callback(record, out)
            io.spawn_callback(record, out, spawn=True)
            await settle(loop)
            return out

        return on_loop(body)

    stock, patched = differential(scenario, PATCH)
    assert (
        stock
        == patched
        == [((1, 2), {"key": "value", "other": None}), ((), {}), ((), {"spawn": True})]
    )


def test_closed_loop_swallows_the_call():
    def scenario():
        io = IOLoop(make_current=False)
        ran = []
        io.add_callback(ran.append, "queued before close")
        io.close()
        io.add_callback(ran.append, "after close")  # must not raise
        return ran

    stock, patched = differential(scenario, PATCH)
    assert stock == patched == []


def test_asyncio_debug_mode_keeps_one_handle_per_callback():
    def slow():
        pass

    def scenario():
        async def body(io, loop):
            loop.set_debug(True)
            loop.slow_callback_duration = 0.0  # every handle gets reported
            with Records("asyncio") as records:
                io.add_callback(slow)
                io.add_callback(slow)
                seen = batches_queued(loop)
                await settle(loop)
            messages = [
                r[2].split(" took ")[0] for r in records.rows if "_run_callback" in r[2]
            ]
            return seen, messages

        return on_loop(body)

    stock, patched = differential(scenario, PATCH)
    assert stock == patched
    assert stock[0] == 0
    assert len(stock[1]) == 2


def test_subclass_that_overrides_run_callback_keeps_the_stock_path():
    from tornado.platform.asyncio import AsyncIOLoop

    class Custom(AsyncIOLoop):
        def _run_callback(self, callback):
            self.calls.append("custom")
            return super()._run_callback(callback)

    def scenario():
        io = Custom(make_current=False)
        io.calls = []
        done = []
        io.add_callback(done.append, 0)  # off the loop: no loop is running yet

        async def body():
            io.add_callback(done.append, 1)
            io.add_callback(done.append, 2)
            batches = batches_queued(io.asyncio_loop)
            await settle(io.asyncio_loop)
            return batches

        batches = io.asyncio_loop.run_until_complete(body())
        io.close()
        return batches, io.calls, done

    stock, patched = differential(scenario, PATCH)
    assert stock == patched == (0, ["custom", "custom", "custom"], [0, 1, 2])


def test_off_loop_calls_keep_the_stock_path():
    def scenario():
        io = IOLoop(make_current=False)
        ran = []
        io.add_callback(ran.append, 1)  # not on the loop thread: no running loop
        batches = batches_queued(io.asyncio_loop)
        io.add_callback(io.stop)
        io.start()
        io.close()
        return batches, ran

    stock, patched = differential(scenario, PATCH)
    assert stock == patched == (0, [1])


def test_uninstall_with_a_batch_queued_still_runs_it():
    async def body(io, loop):
        ran = []
        fastloop.install(PATCH)
        io.add_callback(ran.append, 1)
        io.add_callback(ran.append, 2)
        queued = batches_queued(loop)
        fastloop.uninstall()
        io.add_callback(ran.append, 3)
        await settle(loop)
        return queued, ran

    assert on_loop(body) == (1, [1, 2, 3])


@pytest.mark.parametrize("name", CALL_SOON_LOOPS)
def test_a_c_loop_keeps_stock_behaviour(name):
    """uvloop, zuvloop and rloop take each callback as one call_soon."""
    c_loop = pytest.importorskip(name)

    def scenario():
        async def body(io, loop):
            ran = []
            request_id.set("uv")
            with Records("tornado.application") as records:
                io.add_callback(ran.append, 1)
                loop.call_soon(ran.append, 2)
                io.add_callback(lambda: ran.append(request_id.get()))
                request_id.set("later")
                io.add_callback(failing, "uv")
                io.add_callback(ran.append, 3)
                await settle(loop)
            return ran, records.rows

        async def main():
            return await body(IOLoop.current(), asyncio.get_running_loop())

        with asyncio.Runner(loop_factory=c_loop.new_event_loop) as runner:
            return runner.run(main())

    stock, patched = differential(scenario, PATCH)
    assert stock == patched
    assert stock[0] == [1, 2, "uv", 3]
    assert [row[3] for row in stock[1]] == ["ValueError"]


@pytest.mark.parametrize("name", CALL_SOON_LOOPS)
def test_a_c_loop_takes_each_callback_as_one_call_soon(name):
    """Not declined there: the patch's own path runs (``LoopState.call_soon``)."""
    c_loop = pytest.importorskip(name)

    async def main():
        io = IOLoop.current()
        done = asyncio.get_running_loop().create_future()
        io.add_callback(done.set_result, "ran")
        return await done, io._fastloop_state.call_soon, io._fastloop_state.ready

    with (
        fastloop.patched(PATCH),
        asyncio.Runner(loop_factory=c_loop.new_event_loop) as runner,
    ):
        assert runner.run(main()) == ("ran", True, None)


def test_a_callback_added_during_an_iteration_runs_in_the_next_one():
    """Also after stop(): what a handle of the last iteration adds stays queued."""

    def scenario():
        with current_loop() as (loop, io):
            order = []

            def x():
                order.append("x")
                io.add_callback(order.append, "added-by-x")

            def setup():
                loop.call_soon(x)
                io.add_callback(io.stop)  # a batch, ahead of which x runs

            loop.call_soon(setup)
            io.start()
            order.append("start() returned")
            loop.call_soon(loop.stop)
            loop.run_forever()
            io.close()
            return order

    stock, patched = differential(scenario, PATCH)
    assert stock == patched == ["x", "start() returned", "added-by-x"]
