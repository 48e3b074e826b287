"""write_to_fd instrumentation: exact totals from real transfers, stock behaviour."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
import tracemalloc

import pytest
from tornado.iostream import IOStream, PipeIOStream

import fastloop
from fastloop.patches.write_to_fd import SAMPLE_EVERY
from fastloop.telemetry import live
from fastloop.telemetry.schema import WriteStats
from tests_support import differential, run_python, stream_pair

PATCH = ["write_to_fd"]


def transfer(messages, server_ssl=None, client_ssl=None):
    """Client writes ``messages``; the server reads them all back."""

    async def main():
        client, server_side, server = await stream_pair(server_ssl, client_ssl)
        total = sum(len(m) for m in messages)
        for message in messages:
            await client.write(message)
        received = await server_side.read_bytes(total)
        counters = fastloop.stream_stats(client)
        server_counters = fastloop.stream_stats(server_side)
        client.close()
        server_side.close()
        server.stop()
        return received, counters, server_counters

    fastloop.reset_stats()
    received, counters, server_counters = asyncio.run(main())
    return received, counters, server_counters, fastloop.stats().write_to_fd


MESSAGES = [b"x" * 64, b"y" * 65536, os.urandom(300_000), b"z"]


def test_exact_byte_and_call_totals_on_a_real_iostream_pair():
    stock, patched = differential(lambda: transfer(MESSAGES), PATCH)
    assert stock[0] == patched[0] == b"".join(MESSAGES)
    assert stock[1] == fastloop.StreamStats()  # stock counts nothing
    _, counters, server_counters, totals = patched
    total = sum(map(len, MESSAGES))
    assert counters.bytes_written == total
    assert counters.bytes_offered >= total
    assert counters.calls >= len(MESSAGES)
    assert server_counters == fastloop.StreamStats()  # the server never wrote
    assert totals.calls == counters.calls
    assert totals.bytes_written == counters.bytes_written
    assert totals.bytes_offered == counters.bytes_offered
    # One stream: its first call counts once, each sampled one for SAMPLE_EVERY.
    assert 1 <= totals.timed_calls <= totals.calls
    assert totals.histogram.total == 1 + SAMPLE_EVERY * (totals.timed_calls - 1)
    assert 0 < totals.p50_ns <= totals.p99_ns <= totals.max_ns
    assert totals.errors == 0


def test_stream_stats_still_answer_in_the_close_callback():
    # Tornado drops a closed stream's buffers before it runs the close
    # callback: the counters must not live there.
    async def main():
        client, server_side, server = await stream_pair()
        closed = asyncio.get_running_loop().create_future()
        client.set_close_callback(
            lambda: closed.set_result(fastloop.stream_stats(client))
        )
        await client.write(b"x" * 64)
        await server_side.read_bytes(64)
        client.close()
        seen = await closed
        server_side.close()
        server.stop()
        return seen

    stock, patched = differential(lambda: asyncio.run(main()), PATCH)
    assert stock == fastloop.StreamStats()
    assert patched.calls >= 1
    assert patched.bytes_written == 64


def test_partial_writes_and_would_block_are_counted():
    payload = os.urandom(8 * 1024 * 1024)

    async def main():
        client, server_side, server = await stream_pair()
        client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        future = client.write(payload)
        for _ in range(50):  # the reader does not read: the kernel buffers fill
            await asyncio.sleep(0)
        blocked = fastloop.stream_stats(client)
        received = await server_side.read_bytes(len(payload))
        await future
        final = fastloop.stream_stats(client)
        client.close()
        server_side.close()
        server.stop()
        return blocked, received, final

    with fastloop.patched(PATCH):
        fastloop.reset_stats()
        blocked, received, final = asyncio.run(main())
    assert received == payload
    assert blocked.would_block >= 1
    assert blocked.bytes_written < len(payload)
    assert final.bytes_written == len(payload)
    assert final.bytes_offered > final.bytes_written  # the rest was offered again
    assert final.calls > final.would_block >= 1


def test_ssl_iostream_totals(tls):
    server_context, client_context = tls
    stock, patched = differential(
        lambda: transfer(MESSAGES, server_context, client_context), PATCH
    )
    assert stock[0] == patched[0] == b"".join(MESSAGES)
    _, counters, _, totals = patched
    assert counters.bytes_written == sum(map(len, MESSAGES))
    assert totals.bytes_written == counters.bytes_written
    assert totals.calls == counters.calls


def test_pipe_iostream_totals():
    def scenario():
        async def main():
            read_fd, write_fd = os.pipe()
            writer = PipeIOStream(write_fd)
            reader = PipeIOStream(read_fd)
            data = os.urandom(200_000)
            write = writer.write(data)
            received = await reader.read_bytes(len(data))
            await write
            counters = fastloop.stream_stats(writer)
            writer.close()
            reader.close()
            return received == data, counters

        fastloop.reset_stats()
        same, counters = asyncio.run(main())
        return same, counters, fastloop.stats().write_to_fd.bytes_written

    stock, patched = differential(scenario, PATCH)
    assert stock[0] and patched[0]
    assert patched[1].bytes_written == patched[2] == 200_000


def test_errors_and_blocking_are_counted_and_exceptions_untouched():
    def scenario():
        async def main():
            outcomes = []
            mine, peer = socket.socketpair()
            mine.setblocking(False)
            stream = IOStream(mine)
            chunk = memoryview(b"x" * 65536)
            sent = 0
            try:  # the peer never reads: the buffers fill, then it would block
                for _ in range(1000):
                    sent += stream.write_to_fd(chunk)
            except BlockingIOError as exc:
                outcomes.append(type(exc).__name__)
            peer.close()
            try:
                stream.write_to_fd(chunk)
            except OSError as exc:
                outcomes.append(type(exc).__name__)
            counters = fastloop.stream_stats(stream)
            stream.close()
            return outcomes, counters, sent

        fastloop.reset_stats()
        outcomes, counters, sent = asyncio.run(main())
        return outcomes, counters, fastloop.stats().write_to_fd, sent

    stock, patched = differential(scenario, PATCH)
    assert stock[0] == patched[0] == ["BlockingIOError", "BrokenPipeError"]
    _, counters, totals, sent = patched
    assert (counters.would_block, counters.errors) == (1, 1)
    assert (totals.would_block, totals.errors) == (1, 1)
    assert counters.bytes_offered == counters.calls * 65536
    assert counters.bytes_written == totals.bytes_written == sent > 0


class SlowSocket(socket.socket):
    """A real socket whose send first sleeps: a slow write made real."""

    delay = 0.02

    def send(self, data, *args):
        time.sleep(self.delay)
        return super().send(data, *args)


class RateLimitClock:
    """``time`` for the write_to_fd module, with a monotonic clock that moves
    only when the test moves it: whether two slow writes fall in the same
    one-second window is then decided by the test, not by the machine."""

    def __init__(self) -> None:
        self.now_ns = 10**12

    def monotonic_ns(self) -> int:
        return self.now_ns

    def __getattr__(self, name):
        return getattr(time, name)


def test_slow_writes_log_one_line_a_second_with_the_suppressed_count(
    caplog, monkeypatch
):
    from fastloop.patches import write_to_fd

    clock = RateLimitClock()
    monkeypatch.setattr(write_to_fd, "time", clock)

    async def main(writes):
        client, server_side, server = await stream_pair()
        slow_client = IOStream(SlowSocket(fileno=os.dup(client.socket.fileno())))
        for _ in range(writes):
            await slow_client.write(b"s" * 100)
        peer = slow_client.socket.getpeername()
        slow_client.close()
        client.close()
        server_side.close()
        server.stop()
        return peer

    fastloop.configure(slow_write_ms=5)
    try:
        with (
            fastloop.patched(PATCH),
            caplog.at_level(logging.WARNING, logger="fastloop"),
        ):
            fastloop.reset_stats()
            peer = asyncio.run(main(3))
            first = [r.getMessage() for r in caplog.records if r.name == "fastloop"]
            clock.now_ns += 1_001_000_000  # the one-a-second window has passed
            asyncio.run(main(1))
            lines = [r.getMessage() for r in caplog.records if r.name == "fastloop"]
            slow = fastloop.stats().write_to_fd.slow
    finally:
        fastloop.configure(slow_write_ms=0)
    assert len(first) == 1
    assert "slow write_to_fd" in first[0]
    assert "for 100 bytes" in first[0]
    assert repr(peer) in first[0]
    assert repr(threading.current_thread().name) in first[0]
    assert len(lines) == 2
    assert "2 more suppressed" in lines[1]
    assert slow == 4


@pytest.mark.parametrize("setting", ["default", "zero"])
def test_slow_write_log_is_off_by_default_and_at_zero_yet_every_call_counts(
    caplog, setting
):
    from fastloop.config import settings

    assert settings.slow_write_ms == 0  # the default: off
    if setting == "zero":
        fastloop.configure(slow_write_ms=0)

    async def main():
        client, server_side, server = await stream_pair()
        slow_client = IOStream(SlowSocket(fileno=os.dup(client.socket.fileno())))
        await slow_client.write(b"s")
        counters = fastloop.stream_stats(slow_client)
        for stream in (slow_client, client, server_side):
            stream.close()
        server.stop()
        return counters

    with (
        fastloop.patched(PATCH),
        caplog.at_level(logging.WARNING, logger="fastloop"),
    ):
        fastloop.reset_stats()
        counters = asyncio.run(main())
        totals = fastloop.stats().write_to_fd
    assert totals.slow == 0
    assert not [r for r in caplog.records if r.name == "fastloop"]
    # The 20 ms write still lands in the histogram, the maximum and the total.
    assert totals.calls == counters.calls == 1
    assert totals.max_ns == counters.max_ns >= 20_000_000
    assert totals.p99_ns == totals.max_ns


def test_cpu_split_counts_every_call_when_on():
    fastloop.configure(write_cpu=True)
    try:
        with fastloop.patched(PATCH):
            _, counters, _, totals = transfer(MESSAGES)
    finally:
        fastloop.configure(write_cpu=False)
    assert totals.cpu_calls == totals.calls == counters.calls
    assert totals.cpu_ns > 0
    assert totals.stalled_ns >= 0
    assert "stalled" in fastloop.report()


def test_streams_do_not_grow_anything_global():
    with fastloop.patched(PATCH):
        for _ in range(3):
            transfer([b"a" * 10])
        gc.collect()
        alive = len(live.WRITE_TO_FD._live)
        for _ in range(20):
            transfer([b"a" * 10])
        gc.collect()
        fastloop.stats()  # folds what the collector handed over
        assert len(live.WRITE_TO_FD._live) == alive


def idle_streams(count: int) -> int:
    """Bytes allocated per stream for ``count`` streams that wrote once."""

    async def main():
        held = []
        for _ in range(3):  # warm: first-use classes and caches
            mine, peer = socket.socketpair()
            held.append((IOStream(mine), peer))
            await held[-1][0].write(b"w")
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(count):
                mine, peer = socket.socketpair()
                held.append((IOStream(mine), peer))
                await held[-1][0].write(b"w")
            gc.collect()
            used = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        for stream, peer in held:
            stream.close()
            peer.close()
        return used // count

    return asyncio.run(main())


#: The bound docs/patches.md states: a stream's tally (half of it the
#: duration histogram's buckets), one weak reference and its set entry.
STREAM_BYTES = 1280


def test_an_idle_stream_costs_what_the_docs_state():
    stock, patched = differential(lambda: idle_streams(500), PATCH)
    assert 0 < patched - stock < STREAM_BYTES


async def written_and_closed(payload: bytes) -> IOStream:
    """A socket stream that wrote ``payload`` and closed, its peer too."""
    mine, peer = socket.socketpair()
    stream = IOStream(mine)
    await stream.write(payload)
    stream.close()
    peer.close()
    return stream


def test_a_closed_stream_is_folded_as_it_goes_not_at_a_later_write():
    async def main():
        for _ in range(50):
            await written_and_closed(b"c" * 10)

    with fastloop.patched(PATCH):
        fastloop.reset_stats()
        gc.collect()
        alive = len(live.WRITE_TO_FD._live)
        asyncio.run(main())
        gc.collect()
        # Nothing read the figures or wrote since: the collection folded them.
        assert len(live.WRITE_TO_FD._live) == alive
        assert not live.WRITE_TO_FD._collected
        assert fastloop.stats().write_to_fd.bytes_written == 500


def test_a_collected_stream_is_folded_into_the_totals_exactly():
    async def main():
        return fastloop.stream_stats(await written_and_closed(b"f" * 1000))

    with fastloop.patched(PATCH):
        fastloop.reset_stats()
        counters = asyncio.run(main())
        gc.collect()
        totals = fastloop.stats().write_to_fd
    assert counters.bytes_written == totals.bytes_written == 1000
    assert totals.calls == counters.calls >= 1
    assert totals.max_ns == counters.max_ns > 0


def test_a_finalizer_reentering_track_neither_deadlocks_nor_loses_a_tally():
    # A stream's first write tracks it under the PerStreamTallies lock, and an
    # allocation there can run a finalizer on the same thread that writes to
    # another new stream (distributed's Future.__del__ does): track() again,
    # while the outer call holds the lock.  Simulated exactly: the live set's
    # add runs the "finalizer", which tracks a second owner.
    class Owner:
        pass

    streams = live.PerStreamTallies(WriteStats)
    owners = [Owner(), Owner()]  # the outer call's, the finalizer's
    pending = ["the finalizer"]
    nested = []

    class FinalizingSet(set):
        def add(self, tally):
            if pending:
                pending.pop()
                nested.append(streams.track(owners[1]))
            super().add(tally)

    streams._live = FinalizingSet()
    outer = []
    worker = threading.Thread(
        target=lambda: outer.append(streams.track(owners[0])), daemon=True
    )
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "track deadlocked on its own lock"
    assert len(outer) == len(nested) == 1 and outer[0] is not nested[0]
    assert {id(tally) for tally in streams.live()} == {id(outer[0]), id(nested[0])}
    outer[0].calls, nested[0].calls = 3, 4
    assert streams.read().calls == 7
    owners.clear()
    gc.collect()
    assert streams.live() == []
    assert streams.read().calls == 7  # folded once each


def test_a_stream_collected_while_read_folds_is_counted_once():
    # One collection can both collect a stream (its tally is handed over to
    # be folded) and run a finalizer that tracks a new one, in the middle of
    # read()'s fold, on the reading thread.  The nested track must leave the
    # fold to the outer call: folding the collected tally then would count it
    # twice (once folded, once in read()'s copy of the live tallies).
    class Owner:
        pass

    streams = live.PerStreamTallies(WriteStats)
    doomed, new = [Owner()], Owner()
    streams.track(doomed[0]).calls = 5
    fold = live.add_into
    pending = ["the finalizer"]

    def finalizing_add_into(section, total, counted):
        if pending:
            pending.pop()
            doomed.clear()  # collected: its weakref.finalize hands the tally over
            assert len(streams._collected) == 1
            streams.track(new)
        fold(section, total, counted)

    result = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(live, "add_into", finalizing_add_into)
        worker = threading.Thread(
            target=lambda: result.append(streams.read()), daemon=True
        )
        worker.start()
        worker.join(30)
    assert not worker.is_alive(), "read deadlocked on its own lock"
    assert result[0].calls == 5
    assert streams.read().calls == 5  # folded by the next drain, once
    assert len(streams.live()) == 1  # the new owner's only


def test_live_streams_of_other_threads_count_and_reset_starts_from_zero():
    wrote, stop = threading.Event(), threading.Event()
    streams = []

    def writer():
        async def main():
            mine, peer = socket.socketpair()
            stream = IOStream(mine)
            streams.append(stream)  # alive while the main thread looks
            await stream.write(b"w" * 500)
            wrote.set()
            while not stop.is_set():
                await asyncio.sleep(0.01)
            await stream.write(b"w" * 70)
            stream.close()
            peer.close()

        asyncio.run(main())

    with fastloop.patched(PATCH):
        fastloop.reset_stats()
        thread = threading.Thread(target=writer)
        thread.start()
        assert wrote.wait(60)
        before = fastloop.stats().write_to_fd
        first = fastloop.stream_stats(streams[0])
        fastloop.reset_stats()
        after_reset = fastloop.stats().write_to_fd
        stop.set()
        thread.join()
        after = fastloop.stats().write_to_fd
        lifetime = fastloop.stream_stats(streams[0])
    assert before.bytes_written == first.bytes_written == 500
    assert before.calls == first.calls >= 1
    assert (after_reset.calls, after_reset.bytes_written, after_reset.max_ns) == (
        0,
        0,
        0,
    )
    assert after.bytes_written == 70
    assert after.calls == lifetime.calls - first.calls
    assert lifetime.bytes_written == 570  # a stream's own counters never reset
    assert lifetime.max_ns >= first.max_ns


def test_totals_from_several_loops_in_several_threads_add_up():
    results = []

    def worker():
        results.append(transfer_quiet([b"t" * 5000] * 3))

    def transfer_quiet(messages):
        async def main():
            client, server_side, server = await stream_pair()
            for message in messages:
                await client.write(message)
            await server_side.read_bytes(sum(map(len, messages)))
            counters = fastloop.stream_stats(client)
            client.close()
            server_side.close()
            server.stop()
            return counters

        return asyncio.run(main())

    with fastloop.patched(PATCH):
        fastloop.reset_stats()
        threads = [threading.Thread(target=worker) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        totals = fastloop.stats().write_to_fd
    assert totals.bytes_written == 4 * 15_000 == sum(r.bytes_written for r in results)
    assert totals.calls == sum(r.calls for r in results)


def test_configure_rejects_bad_values_and_changes_nothing():
    with pytest.raises(ValueError, match="slow_write_ms"):
        fastloop.configure(slow_write_ms=-1)
    with pytest.raises(ValueError, match="expected a number"):
        fastloop.configure(slow_write_ms="soon")
    with pytest.raises(ValueError, match="unknown fastloop setting 'slow'"):
        fastloop.configure(slow=1)
    with pytest.raises(ValueError, match="write_cpu"):
        fastloop.configure(write_cpu="maybe", slow_write_ms=1)
    from fastloop.config import settings

    assert settings.slow_write_ms == 0 and settings.write_cpu is False


def test_report_and_to_dict_are_readable_and_json_able():
    with fastloop.patched(PATCH):
        transfer(MESSAGES)
    snapshot = fastloop.stats()
    text = fastloop.report()
    assert "write_to_fd" in text and "p50 <=" in text and "bytes written" in text
    data = json.loads(json.dumps(snapshot.to_dict()))
    assert data["write_to_fd"]["bytes_written"] == snapshot.write_to_fd.bytes_written
    assert data["write_to_fd"]["p99_ns"] == snapshot.write_to_fd.p99_ns


ECHO_APP = """
import asyncio, socket
from tornado.iostream import IOStream
from tornado.tcpserver import TCPServer

async def main():
    got = asyncio.get_running_loop().create_future()
    class Server(TCPServer):
        async def handle_stream(self, stream, address):
            got.set_result(await stream.read_bytes(10_000))
    server = Server()
    sock = socket.socket(); sock.bind(("127.0.0.1", 0))
    sock.listen(); sock.setblocking(False)
    server.add_sockets([sock])
    client = IOStream(socket.socket())
    await client.connect(sock.getsockname())
    await client.write(b"r" * 10_000)
    await got
    client.close(); server.stop()

asyncio.run(main())
print("app done")
"""


@pytest.mark.parametrize("target", ["stderr", "file"])
def test_exit_report_in_a_subprocess(tmp_path, target):
    from tests_support import require_installed_pth

    require_installed_pth()
    path = tmp_path / "stats.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
    env["FASTLOOP"] = "1"
    env["FASTLOOP_REPORT"] = "1" if target == "stderr" else str(path)
    result = subprocess.run(
        [sys.executable, "-c", ECHO_APP],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "app done"
    if target == "stderr":
        assert "fastloop report" in result.stderr
        assert re.search(r"bytes written\s+10,000\n", result.stderr)
    else:
        data = json.loads(path.read_text())
        assert data["write_to_fd"]["bytes_written"] == 10_000


#: CPython 3.11+ shares the attribute names of a class's instances up to this
#: many (``SHARED_KEYS_MAX_SIZE``, Objects/dictobject.c); an instance past it
#: gets a dict of its own, and every attribute access on it slows down.
SHARED_KEYS_MAX = 30


def test_an_iostream_with_our_counters_stays_within_the_shared_names():
    """The module docstring's fact: IOStream's names plus ours fit in 30."""

    async def main():
        client, server_side, server = await stream_pair()
        await client.write(b"x" * 64)
        await server_side.read_bytes(64)
        names = set(vars(client))  # after a write: our attribute is set
        client.close()
        server_side.close()
        server.stop()
        return names

    with fastloop.patched(PATCH):
        names = asyncio.run(main())
    assert "_fastloop_writes" in names
    assert len(names) <= SHARED_KEYS_MAX, sorted(names)


def test_a_collection_never_waits_for_a_section_another_thread_holds():
    """The collector must not stay open on the tallies' lock (a fork then
    would leave the child unable to collect); the holder folds on its way out."""
    entered, release = threading.Event(), threading.Event()

    with fastloop.patched(PATCH):
        fastloop.reset_stats()
        stream = asyncio.run(written_and_closed(b"h" * 7))
        alive = len(live.WRITE_TO_FD._live)

        def hold():
            entered.set()
            assert release.wait(30)

        holder = threading.Thread(target=lambda: live.WRITE_TO_FD._locked(hold))
        holder.start()
        try:
            assert entered.wait(30)
            del stream  # collected here, on this thread, while the lock is held
            assert len(live.WRITE_TO_FD._collected) == 1
        finally:
            release.set()
            holder.join(30)
        assert not live.WRITE_TO_FD._collected
        assert len(live.WRITE_TO_FD._live) == alive - 1
        assert fastloop.stats().write_to_fd.bytes_written == 7


def test_streams_alive_at_exit_print_nothing(tmp_path):
    script = (
        "import asyncio, socket, fastloop\n"
        "fastloop.install(['write_to_fd'])\n"
        "from tornado.iostream import IOStream\n"
        "kept = []\n"
        "async def main():\n"
        "    for _ in range(3):\n"
        "        a, b = socket.socketpair()\n"
        "        kept.append((IOStream(a), b))\n"
        "        await kept[-1][0].write(b'x')\n"
        "asyncio.run(main())\n"
        "print(sorted(fastloop.installed()))\n"
    )
    result = run_python(script, cwd=tmp_path, timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        "['write_to_fd']\n",
        "",
    )
