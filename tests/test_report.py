"""report() and stats() say which patches run here, and count on-loop batches."""

from __future__ import annotations

import asyncio

from tornado.ioloop import IOLoop

import fastloop


def run_callbacks(burst: int, lone: int) -> None:
    async def main() -> None:
        ioloop = IOLoop.current()
        done = asyncio.Event()
        for _ in range(burst):
            ioloop.add_callback(lambda: None)
        ioloop.add_callback(done.set)
        await done.wait()
        for _ in range(lone):
            ioloop.add_callback(lambda: None)
            await asyncio.sleep(0)

    asyncio.run(main())


def test_onloop_callbacks_are_counted_per_batch():
    with fastloop.patched(["add_callback"]):
        fastloop.reset_stats()
        run_callbacks(burst=9, lone=3)
        counted = fastloop.stats().add_callback
    # One batch for the burst and its done.set, one per lone callback.
    assert counted.onloop_batches == 4
    assert counted.onloop_callbacks == 13
    assert counted.remote_callbacks == 0


def test_stock_counts_nothing_and_the_report_says_why():
    fastloop.reset_stats()
    run_callbacks(burst=9, lone=3)
    snapshot = fastloop.stats()
    assert snapshot.installed == ()
    assert snapshot.add_callback.onloop_batches == 0
    text = fastloop.report()
    assert "patches active     none: no patch is installed" in text
    assert "add_callback is not active in this process: nothing counted" in text
    assert "callbacks run" not in text  # no idle zero where nothing was measured


def test_report_names_active_patches_and_marks_the_others():
    with fastloop.patched(["add_callback"]):
        fastloop.reset_stats()
        run_callbacks(burst=2, lone=0)
        snapshot = fastloop.stats()
        text = fastloop.report()
    assert snapshot.installed == ("add_callback",)
    assert snapshot.to_dict()["installed"] == ["add_callback"]
    assert "patches active     add_callback\n" in text
    assert "  callbacks run                 3" in text
    assert "wakeup is not active in this process" in text
    # Counted while active, shown after uninstall with the reason it stopped.
    after = fastloop.report()
    assert (
        "add_callback on the loop thread (not active now; counted while it was)"
        in after
    )
