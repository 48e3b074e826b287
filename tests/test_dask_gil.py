"""fastloop.dask.gil: gilknocker's metric from auto mode's ticks, on made-up ticks.

``test_dask.py`` checks the figure reaches dask's monitor, heartbeat and
``/metrics`` in a real worker; here the arithmetic, without dask.
"""

from __future__ import annotations

import pytest

from fastloop.dask import gil


class Ticks:
    """Scripted cumulative readings: (ticks, waited ns, competing threads)."""

    def __init__(self) -> None:
        self.samples, self.waited_ns, self.competitors = 0, 0, 0

    def tick(self, count: int, each_ns: int, competitors: int) -> None:
        self.samples += count
        self.waited_ns += count * each_ns
        self.competitors = competitors

    def read(self) -> tuple[int, int, float]:
        return self.samples, self.waited_ns, self.competitors


@pytest.fixture
def ticks(monkeypatch):
    scripted = Ticks()
    monkeypatch.setattr(gil.TickContention, "_read", staticmethod(scripted.read))
    monkeypatch.setattr(gil, "_timer_slack_ns", lambda: 50_000.0)
    return scripted


def test_before_any_tick_there_is_no_contention(ticks):
    assert gil.TickContention(0.001).contention_metric == 0.0


def test_the_wake_up_latency_is_learned_while_calm_and_subtracted(ticks):
    knock = gil.TickContention(0.001)
    ticks.tick(10, 40_000, competitors=0)  # within the timer slack: nothing
    assert knock.contention_metric == 0.0
    knock = gil.TickContention(0.001)
    ticks.tick(10, 100_000, competitors=0)  # calm, but 100 us late: latency
    assert knock.contention_metric == pytest.approx(50 / 1050)
    knock.reset_contention_metric()  # the first calm interval sets it
    assert knock.latency_ns == 100_000
    ticks.tick(10, 3_100_000, competitors=1)  # 3 ms of GIL wait per wake-up
    assert knock.contention_metric == pytest.approx(3 / 4)  # w / (p + w)
    knock.reset_contention_metric()  # not calm: the latency stays
    assert knock.latency_ns == 100_000
    ticks.tick(10, 200_000, competitors=0)
    knock.reset_contention_metric()  # calm again: smoothed toward 200 us
    assert knock.latency_ns == pytest.approx(100_000 + gil.CALM_WEIGHT * 100_000)


def test_the_metric_is_stated_for_the_probe_interval_dask_configures(ticks):
    every_ms, every_4_ms = gil.TickContention(0.001), gil.TickContention(0.004)
    ticks.tick(10, 1_050_000, competitors=1)  # 1 ms of GIL wait per wake-up
    assert every_ms.contention_metric == pytest.approx(0.5)
    assert every_4_ms.contention_metric == pytest.approx(0.2)


def test_reset_stats_between_readings_starts_the_interval_afresh(ticks):
    ticks.tick(100, 1_050_000, competitors=1)
    knock = gil.TickContention(0.001)
    ticks.samples, ticks.waited_ns = 4, 4 * 2_050_000  # counters restarted
    assert knock.contention_metric == pytest.approx(2 / 3)


def test_a_server_without_a_monitor_gets_nothing():
    assert gil.supply(object()) is None


def test_a_failure_reads_zero_once_logged_and_never_escapes(ticks, monkeypatch, caplog):
    knock = gil.TickContention(0.001)

    def broken():
        raise RuntimeError("no ticks")

    monkeypatch.setattr(gil.TickContention, "_read", staticmethod(broken))
    assert knock.contention_metric == 0.0
    knock.reset_contention_metric()
    assert knock.contention_metric == 0.0
    [line] = [r.getMessage() for r in caplog.records]
    assert "reads 0: RuntimeError('no ticks')" in line


def test_a_zero_probe_interval_divides_by_nothing(ticks):
    knock = gil.TickContention(0.0)
    ticks.tick(10, 50_000, competitors=1)  # no wait beyond the timer slack
    assert knock.contention_metric == 0.0
