"""The loop-thread sampling profiler: what it records, the formats it writes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from tornado.ioloop import IOLoop

import fastloop
from fastloop.cli import flamegraph
from fastloop.observers import profiler
from tests_support import require_installed_pth


@pytest.fixture(autouse=True)
def no_thread_left_behind():
    yield
    leftover = [t.name for t in threading.enumerate() if t.name.startswith("fastloop")]
    assert leftover == []


def sampled(running, wanted) -> bool:
    """Whether ``running`` has sampled a stack that ``wanted(stack)`` accepts."""
    return any(wanted(stack) for stack in running.stacks())


def idle(stack) -> bool:
    return stack[-1] == profiler.IDLE


def in_the_handler(stack) -> bool:
    return stack[-1].startswith("sleeping_handler_for_the_test (")


def wait_sampled(running, wanted, timeout_s=30.0) -> bool:
    """Block this thread until ``running`` has sampled a ``wanted`` stack."""
    deadline = time.monotonic() + timeout_s
    while not sampled(running, wanted):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


async def until_sampled(running, wanted, timeout_s=30.0) -> None:
    """Let the loop run until ``running`` has sampled a ``wanted`` stack."""
    deadline = time.monotonic() + timeout_s
    while not sampled(running, wanted):
        assert time.monotonic() < deadline, "the profiler never sampled that"
        await asyncio.sleep(0.005)


def sleeping_handler_for_the_test(running):
    # Blocks the loop, sleeping in this frame, until the profiler has sampled
    # it here: however late the sampling thread gets to run, it sees this.
    deadline = time.monotonic() + 30
    while not sampled(running, in_the_handler) and time.monotonic() < deadline:
        time.sleep(0.005)


def uvloop_run(coroutine):
    uvloop = pytest.importorskip("uvloop")
    return uvloop.run(coroutine)


def profile_a_blocking_callback(interval_ms=5, runner=asyncio.run):
    async def main():
        io = IOLoop.current()
        with fastloop.profile(interval_ms=interval_ms) as running:
            await until_sampled(running, idle)  # idle in the selector
            io.add_callback(sleeping_handler_for_the_test, running)
            await until_sampled(running, in_the_handler)
        return running

    return runner(main())


def parse_collapsed(text):
    counts = Counter()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        counts[tuple(stack.split(";"))] += int(count)
    return dict(counts)


@pytest.mark.parametrize("runner", [asyncio.run, uvloop_run], ids=["asyncio", "uvloop"])
def test_the_blocking_function_and_idle_time_show_up_apart(runner):
    running = profile_a_blocking_callback(runner=runner)
    assert not running.running
    stacks = running.stacks()
    assert sum(stacks.values()) == running.samples > 0
    idle = stacks.get(("thread:MainThread", profiler.IDLE), 0)
    busy = {s: n for s, n in stacks.items() if s[-1] != profiler.IDLE}
    assert idle > 0
    assert busy
    for stack in busy:  # outermost first: the thread, ..., the loop, the callback
        assert stack[0] == "thread:MainThread"
    leaves = {stack[-1] for stack in busy}
    assert any(leaf.startswith("sleeping_handler_for_the_test (") for leaf in leaves)
    whole = [s for s in busy if s[-1].startswith("sleeping_handler_for_the_test")]
    assert any(  # the whole stack, from the test that started the loop down
        any(label.startswith("profile_a_blocking_callback (") for label in stack)
        for stack in whole
    )
    assert not any("selectors.py" in label for stack in busy for label in stack)


def test_collapsed_output_parses_back_to_the_same_counts(tmp_path):
    running = profile_a_blocking_callback()
    path = running.write(tmp_path / "loop.collapsed")
    text = path.read_text()
    assert parse_collapsed(text) == running.stacks()
    for line in text.splitlines():  # frame;frame;frame count, nothing else
        stack, _, count = line.rpartition(" ")
        assert count.isdigit()
        assert all(stack.split(";"))
    assert flamegraph.parse_collapsed(text) == running.stacks()


def test_speedscope_json_has_what_its_schema_requires(tmp_path):
    running = profile_a_blocking_callback()
    path = running.write(tmp_path / "loop.speedscope.json")
    data = json.loads(path.read_text())
    # Required keys of https://www.speedscope.app/file-format-schema.json
    assert data["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    frames = data["shared"]["frames"]
    assert all(isinstance(frame["name"], str) for frame in frames)
    assert all(isinstance(frame.get("line", 0), int) for frame in frames)
    (thread,) = data["profiles"]
    assert thread["type"] == "sampled"
    assert thread["name"] == "thread:MainThread"
    assert thread["unit"] == "milliseconds"
    assert thread["startValue"] == 0
    assert len(thread["samples"]) == len(thread["weights"])
    assert thread["endValue"] == sum(thread["weights"])
    assert thread["endValue"] == running.samples * running.interval_ms
    used = {index for sample in thread["samples"] for index in sample}
    assert used == set(range(len(frames)))
    names = [frames[sample[-1]]["name"] for sample in thread["samples"]]
    assert any(n.startswith("sleeping_handler_for_the_test") for n in names)
    assert profiler.IDLE in names
    # each sample's weight is its own stack's count
    by_stack = {
        tuple(frames[i]["name"] for i in sample): weight
        for sample, weight in zip(thread["samples"], thread["weights"], strict=True)
    }
    assert by_stack == {
        stack[1:]: count * running.interval_ms
        for stack, count in running.stacks().items()
    }


def waits_for_a_subprocess_in_the_loop(gate: int) -> None:
    # The child exits once a byte comes through ``gate``.
    subprocess.run(
        [sys.executable, "-c", f"import os; os.read({gate}, 1)"],
        capture_output=True,
        check=True,
        pass_fds=(gate,),
    )


def waiting_in_selectors(stack) -> bool:
    """The callback, waiting in selectors.py: work, not the loop's idling."""
    return any(f.startswith("waits_for_a_subprocess_in_the_loop") for f in stack) and (
        any("selectors.py" in f for f in stack)
    )


def test_a_callback_waiting_in_selectors_for_a_subprocess_is_work_not_idle():
    # subprocess.run(capture_output=True) waits in selectors.py too.  The
    # child runs until the profiler has sampled the callback waiting for it.
    gate_out, gate_in = os.pipe()

    async def main():
        io = IOLoop.current()
        with fastloop.profile(interval_ms=5) as running:

            def open_the_gate() -> None:
                wait_sampled(running, waiting_in_selectors)
                os.write(gate_in, b"x")  # in any case: the child must end

            opener = threading.Thread(target=open_the_gate)
            opener.start()
            io.add_callback(waits_for_a_subprocess_in_the_loop, gate_out)
            await until_sampled(running, waiting_in_selectors)
            opener.join()
        return running

    try:
        stacks = asyncio.run(main()).stacks()
    finally:
        os.close(gate_out)
        os.close(gate_in)
    waiting = sum(
        count for stack, count in stacks.items() if waiting_in_selectors(stack)
    )
    assert waiting > 0


def test_semicolons_in_names_cannot_break_the_collapsed_format():
    source = "def odd():\n    import sys\n    return sys._getframe()\n"
    namespace = {}
    exec(compile(source, "odd;file.py", "exec"), namespace)
    frame = namespace["odd"]()
    stack = fastloop.profile()._stack("loop;thread", frame)
    assert all(";" not in label for label in stack)
    assert stack[0] == "thread:loop,thread"
    assert stack[-1].startswith("odd (odd,file.py:")


def test_memory_is_bounded_by_distinct_stacks(monkeypatch):
    monkeypatch.setattr(profiler, "MAX_STACKS", 3)
    running = fastloop.profile()
    for depth in range(10):
        running._record([("thread:T", *[f"f{i}" for i in range(depth)], "leaf")] * 2)
    stacks = running.stacks()
    assert len(stacks) == 4  # three kept, one bucket for the rest
    assert stacks[("thread:T", profiler.OTHER)] == 14
    assert sum(stacks.values()) == running.samples == 20


def test_only_loop_threads_are_sampled():
    stop = threading.Event()
    bystander = threading.Thread(target=stop.wait, name="not-a-loop")
    bystander.start()
    try:
        running = profile_a_blocking_callback()
    finally:
        stop.set()
        bystander.join()
    assert {stack[0] for stack in running.stacks()} == {"thread:MainThread"}


def test_a_loop_given_explicitly_is_the_only_one_sampled():
    io = IOLoop(make_current=False)
    other = IOLoop(make_current=False)
    other_runs, other_may_stop = threading.Event(), threading.Event()

    async def run_other():  # runs the whole time the profile samples
        other_runs.set()
        while not other_may_stop.is_set():
            await asyncio.sleep(0.005)

    elsewhere = threading.Thread(
        target=other.run_sync, args=(run_other,), name="other-loop"
    )
    try:
        with fastloop.profile(interval_ms=2, loop=io) as running:
            elsewhere.start()
            assert other_runs.wait(30)
            io.run_sync(lambda: until_sampled(running, idle))
    finally:
        other_may_stop.set()
        elsewhere.join()
        io.close()
        other.close()
    assert running.samples > 0
    assert {stack[0] for stack in running.stacks()} == {"thread:MainThread"}
    assert ("thread:MainThread", profiler.IDLE) in running.stacks()


@pytest.mark.parametrize("bad", [0, -1, "fast", float("nan")])
def test_bad_intervals_are_refused_clearly(bad):
    with pytest.raises(ValueError, match=r"interval_ms=.*expected a number"):
        fastloop.profile(interval_ms=bad)


def test_start_twice_is_an_error_and_stop_is_idempotent():
    running = fastloop.profile().start()
    with pytest.raises(RuntimeError, match="already started"):
        running.start()
    running.stop()
    running.stop()
    assert not running.running


#: For the apps below: wait until the profile that FASTLOOP_PROFILE started
#: (found by its type: the app has no handle on it) has sampled a stack
#: that ``wanted`` accepts, rather than sleeping long enough to expect one.
UNTIL_SAMPLED = """
import gc, time

def sampled(wanted):
    profiles = [
        o for o in gc.get_objects()
        if type(o).__module__ == "fastloop.observers.profiler"
        and type(o).__name__ == "Profile"
    ]
    return any(wanted(stack) for p in profiles for stack in p.stacks())

def in_stack(function):
    return lambda stack: any(f.startswith(function + " (") for f in stack)

def until_sampled(wanted):  # blocks this thread (a loop callback: the loop)
    deadline = time.monotonic() + 30
    while not sampled(wanted) and time.monotonic() < deadline:
        time.sleep(0.005)
"""

FORKING_APP = (
    UNTIL_SAMPLED
    + """
import asyncio, os, sys, time
from tornado.ioloop import IOLoop

def parent_work_after_the_fork():
    until_sampled(in_stack("parent_work_after_the_fork"))

async def before_the_fork():
    await asyncio.sleep(0.1)

async def after_the_fork():
    IOLoop.current().add_callback(parent_work_after_the_fork)
    await asyncio.sleep(0.4)

# Forked between loops: from 3.14 a child leaving asyncio.run by sys.exit()
# hangs in the loop's shutdown, fastloop or not.
asyncio.run(before_the_fork())
pid = os.fork()
if pid == 0:
    time.sleep(0.1)
    sys.exit(0)  # a normal exit: at-exit handlers run in the child
os.waitpid(pid, 0)
asyncio.run(after_the_fork())
print(pid)
"""
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_writes_its_own_profile_not_the_parents(tmp_path):
    require_installed_pth()
    target = tmp_path / "app.collapsed"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
    result = subprocess.run(
        [sys.executable, "-c", FORKING_APP],
        env=environ | {"FASTLOOP_PROFILE": str(target)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    child = int(result.stdout)
    assert "parent_work_after_the_fork (" in target.read_text()
    assert (tmp_path / f"app.{child}.collapsed").exists()
    assert (
        "parent_work_after_the_fork"
        not in (tmp_path / f"app.{child}.collapsed").read_text()
    )


PROFILED_APP = (
    UNTIL_SAMPLED
    + """
import asyncio, os, subprocess, sys, time
from tornado.ioloop import IOLoop

def crunch_numbers_in_the_loop():
    until_sampled(in_stack("crunch_numbers_in_the_loop"))

async def main():
    IOLoop.current().add_callback(crunch_numbers_in_the_loop)
    deadline = time.monotonic() + 30
    while not sampled(lambda stack: stack[-1] == "(idle)"):  # idle, after it
        assert time.monotonic() < deadline
        await asyncio.sleep(0.005)

asyncio.run(main())
if len(sys.argv) > 1:
    subprocess.run([sys.executable, *sys.argv[1:]], check=True)
print("app ran")
"""
)


def test_fastloop_run_profile_writes_the_file_and_children_their_own(tmp_path):
    require_installed_pth()
    app = tmp_path / "app.py"
    app.write_text(PROFILED_APP)
    target = tmp_path / "app.collapsed"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
    result = subprocess.run(
        [
            sys.executable, "-m", "fastloop", "run", "--profile", str(target), "--",
            sys.executable, str(app), str(app),
        ],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == "app ran\napp ran\n"
    written = sorted(p.name for p in tmp_path.glob("app*.collapsed"))
    assert len(written) == 2  # the app's, and its child's beside it
    assert "app.collapsed" in written
    (child,) = [name for name in written if name != "app.collapsed"]
    assert child.startswith("app.") and child.split(".")[1].isdigit()
    for name in written:
        text = (tmp_path / name).read_text()
        assert "crunch_numbers_in_the_loop (" in text
        assert profiler.IDLE in text


CONFIGURED_APP = """
import asyncio, sys, fastloop
fastloop.configure(profile=sys.argv[1])
if sys.argv[2] == "off":
    fastloop.configure(profile=None)

async def main():
    from tornado.ioloop import IOLoop
    IOLoop.current()
    from fastloop.observers import profiler

    loop = asyncio.get_running_loop()
    end = loop.time() + 0.3 if sys.argv[2] == "off" else loop.time() + 60
    while loop.time() < end and not (
        profiler._process_profile and profiler._process_profile.samples >= 5
    ):
        sum(range(10_000))
        await asyncio.sleep(0)

asyncio.run(main())
"""


@pytest.mark.parametrize("then", ["on", "off"])
def test_the_profile_setting_from_code_writes_at_exit_unless_turned_off(tmp_path, then):
    target = tmp_path / "app.collapsed"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
    result = subprocess.run(
        [sys.executable, "-c", CONFIGURED_APP, str(target), then],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    if then == "off":
        assert not target.exists()
    else:
        assert "thread:MainThread" in target.read_text()
