"""write_to_fd's sampled durations: exact counts, estimates within a bucket, any mode.

The durations come from a substituted clock that moves only by what each
fake ``send`` "takes", so the exact distribution is known and the sampled
one is compared with it on the same calls; the coin is a seeded generator,
so a run is the same every time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import socket
from collections.abc import Iterator

import pytest
from tornado.iostream import IOStream

import fastloop
from fastloop.patches import write_to_fd
from fastloop.telemetry.schema import Snapshot, WriteStats

PATCH = ["write_to_fd"]
CALLS = 200_000

#: Durations (ns) in consecutive log2 buckets, and their share of calls.
MIX = {1_500: 50, 3_000: 25, 6_000: 12, 12_000: 8, 24_000: 4, 48_000: 1}


class FakeClock:
    """``perf_counter_ns`` that moves only when a fake send says it took time."""

    def __init__(self) -> None:
        self.now = 10**9

    def __call__(self) -> int:
        return self.now


class TimedSocket:
    """Each send takes the duration its message names (its first byte, an index),
    writes half of the 'partial' messages, and the 'block' and 'error' ones raise."""

    def __init__(self, clock: FakeClock, durations: list[int]) -> None:
        self.clock = clock
        self.durations = durations

    def send(self, data: memoryview) -> int:
        kind = data[0]
        self.clock.now += self.durations[kind]
        if kind == PARTIAL:
            return len(data) // 2
        if kind == BLOCK:
            raise BlockingIOError
        if kind == ERROR:
            raise ConnectionResetError
        return len(data)


PARTIAL, BLOCK, ERROR = 250, 251, 252


def mixed_calls(seed: int) -> list[int]:
    """CALLS message kinds drawn from MIX, with a few partial, blocked, failed."""
    draw = random.Random(seed)
    kinds = draw.choices(range(len(MIX)), weights=list(MIX.values()), k=CALLS)
    for index in range(0, CALLS, 997):
        kinds[index] = (PARTIAL, BLOCK, ERROR)[index % 3]
    return kinds


def periodic_calls() -> list[int]:
    """Three fast writes, then a slow one, over and over: a period that divides 16."""
    return [0, 0, 0, len(MIX) - 1] * (CALLS // 4)


def durations() -> list[int]:
    table = [0] * 256
    for kind, ns in enumerate(MIX):
        table[kind] = ns
    table[PARTIAL] = table[BLOCK] = table[ERROR] = 3_000
    return table


def write_all(kinds: list[int], clock: FakeClock) -> WriteStats:
    """Write one message per kind on an IOStream whose socket is a TimedSocket."""

    async def main() -> None:
        stream = IOStream(socket.socket())
        real, stream.socket = stream.socket, TimedSocket(clock, durations())  # type: ignore[assignment]
        messages = {kind: memoryview(bytes([kind]) * 64) for kind in set(kinds)}
        write = stream.write_to_fd
        for kind in kinds:
            with contextlib.suppress(OSError):
                write(messages[kind])
        real.close()

    fastloop.reset_stats()
    asyncio.run(main())
    return fastloop.stats().write_to_fd


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeClock]:
    fake = FakeClock()
    monkeypatch.setattr(write_to_fd, "clock", fake)
    monkeypatch.setattr(write_to_fd, "coin", random.Random(19).random)
    yield fake


def run(kinds: list[int], clock: FakeClock, timing: str) -> WriteStats:
    fastloop.configure(write_timing=timing)
    try:
        with fastloop.patched(PATCH):
            return write_all(kinds, clock)
    finally:
        fastloop.configure(write_timing="sampled")


def bucket(ns: int) -> int:
    return ns.bit_length()


@pytest.mark.parametrize("calls", [mixed_calls, periodic_calls])
def test_sampled_percentiles_fall_within_a_bucket_and_counts_stay_exact(
    clock: FakeClock, calls
):
    kinds = calls(7) if calls is mixed_calls else calls()
    exact = run(kinds, clock, "every")
    sampled = run(kinds, clock, "sampled")

    for name in ("calls", "bytes_written", "bytes_offered", "would_block", "errors"):
        assert getattr(sampled, name) == getattr(exact, name), name
    assert exact.calls == CALLS
    assert exact.would_block == kinds.count(BLOCK)
    assert exact.errors == kinds.count(ERROR)
    assert exact.bytes_written == 64 * (
        CALLS - kinds.count(BLOCK) - kinds.count(ERROR)
    ) - 32 * kinds.count(PARTIAL)

    assert exact.timed_calls == exact.histogram.total == CALLS
    assert exact.timing == "every call timed"
    assert exact.total_ns == sum(durations()[kind] for kind in kinds)
    # About 1 in SAMPLE_EVERY timed, each counted for the calls it stands for.
    expected = CALLS / write_to_fd.SAMPLE_EVERY
    assert abs(sampled.timed_calls - expected) < 4 * math.sqrt(expected)  # 4 sd
    assert sampled.histogram.total == 1 + write_to_fd.SAMPLE_EVERY * (
        sampled.timed_calls - 1
    )
    # The share observed, which is what a merge of processes in different
    # modes would show as well.
    share = f"{sampled.timed_calls:,} of {CALLS:,}"
    observed = f"1 in {CALLS / sampled.timed_calls:.0f} calls timed ({share})"
    assert sampled.timing == observed
    assert abs(sampled.total_ns / exact.total_ns - 1) < 0.1
    assert sampled.max_ns <= exact.max_ns  # the largest seen
    for name in ("p50_ns", "p90_ns", "p99_ns"):
        assert abs(bucket(getattr(sampled, name)) - bucket(getattr(exact, name))) <= 1


def test_a_counter_modulo_n_would_miss_the_periodic_pattern():
    """Why the coin: timing every 16th call of a period-4 pattern sees one phase."""
    kinds = periodic_calls()
    every_16th = [kind for index, kind in enumerate(kinds) if index % 16 == 0]
    assert set(every_16th) == {0}  # the slow quarter of the calls is never seen


def test_the_report_and_the_dict_say_which_calls_the_times_come_from(clock):
    kinds = mixed_calls(3)
    sampled = run(kinds, clock, "sampled")
    snapshot = fastloop.stats()
    text = fastloop.report()
    assert f"timed            {sampled.timing}" in text
    assert sampled.timing.startswith("1 in ")
    assert "the times below are estimates" in text
    assert "(estimated), max seen" in text
    assert "total time" in text and "(estimated)" in text
    data = json.loads(json.dumps(snapshot.to_dict()))["write_to_fd"]
    assert data["timed_calls"] == sampled.timed_calls < data["calls"] == CALLS
    assert data["timing"] == sampled.timing

    run(kinds, clock, "every")
    text = fastloop.report()
    assert "timed            every call timed" in text
    assert "estimate" not in text


def test_slow_write_log_and_cpu_split_time_every_call(clock):
    kinds = mixed_calls(5)[:2_000]
    for setting in ({"slow_write_ms": 1000}, {"write_cpu": True}):
        fastloop.configure(**setting)
        try:
            with fastloop.patched(PATCH):
                stats = write_all(kinds, clock)
        finally:
            fastloop.configure(slow_write_ms=0, write_cpu=False)
        assert stats.timed_calls == stats.calls == 2_000, setting


def test_a_change_of_setting_applies_from_each_live_streams_next_call(clock):
    async def main() -> tuple[int, int]:
        stream = IOStream(socket.socket())
        real, stream.socket = stream.socket, TimedSocket(clock, durations())  # type: ignore[assignment]
        message = memoryview(b"\0" * 64)
        for _ in range(1_000):
            stream.write_to_fd(message)
        before = fastloop.stream_stats(stream).timed_calls
        fastloop.configure(write_timing="every")
        for _ in range(1_000):
            stream.write_to_fd(message)
        after = fastloop.stream_stats(stream).timed_calls
        real.close()
        return before, after

    try:
        with fastloop.patched(PATCH):
            before, after = asyncio.run(main())
    finally:
        fastloop.configure(write_timing="sampled")
    assert before < 1_000
    assert after - before == 1_000


def test_processes_in_different_modes_merge_into_one_estimate(clock):
    kinds = mixed_calls(11)
    exact = run(kinds, clock, "every")
    every = fastloop.stats().to_dict()
    sampled = run(kinds, clock, "sampled")
    sampled_dict = fastloop.stats().to_dict()
    merged = Snapshot.from_dict(every).merge(Snapshot.from_dict(sampled_dict))
    writes = merged.write_to_fd
    assert writes.calls == 2 * CALLS
    assert writes.timed_calls == CALLS + sampled.timed_calls
    # Each process's histogram estimates its calls, so the merged one weighs
    # both alike: its percentiles are those of either process, within a bucket.
    assert abs(writes.histogram.total / (2 * CALLS) - 1) < 0.1
    for name in ("p50_ns", "p90_ns", "p99_ns"):
        assert abs(bucket(getattr(writes, name)) - bucket(getattr(exact, name))) <= 1
    assert writes.max_ns == exact.max_ns
    assert writes.timing.startswith("1 in 2 calls timed")


def test_timing_in_words_when_nearly_every_call_was_timed():
    # Short-lived streams (a connection per request) have their first call
    # timed each: "1 in 1" would read as every call, so the counts are given.
    from fastloop.telemetry.schema import WriteStats, timing_of

    nearly = WriteStats.from_dict({"calls": 1862, "timed_calls": 1847})
    assert timing_of(nearly) == "1,847 of 1,862 calls timed"
    every = WriteStats.from_dict({"calls": 10, "timed_calls": 10})
    assert timing_of(every) == "every call timed"


def test_a_streams_first_call_is_timed(clock):
    with fastloop.patched(PATCH):
        stats = write_all([3], clock)
    assert (stats.calls, stats.timed_calls) == (1, 1)
    assert stats.max_ns == 12_000 and stats.timing == "every call timed"


def test_the_sampler_leaves_the_applications_random_sequence_alone():
    saved = random.getstate()
    try:
        random.seed(1234)
        expected = [random.random() for _ in range(5)]
        random.seed(1234)
        with fastloop.patched(PATCH):
            stats = write_all(mixed_calls(2)[:5_000], FakeClock())
        assert [random.random() for _ in range(5)] == expected
    finally:
        random.setstate(saved)
    assert 1 < stats.timed_calls < stats.calls  # it did toss its own coin
