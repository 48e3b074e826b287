"""The differential soak's verdicts and script, on hand-made runs (bench/soak.py).

What counts as a mismatch against stock, and the script every arm runs; no
server, no client.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests_support import bench_module

REPO = Path(__file__).resolve().parents[1]


def run(outcomes, stalls=(0, 1000), log=(("tornado.access", "INFO", "%d", 10),)):
    return {
        "outcomes": outcomes,
        "server": {
            "log_kinds": [list(kind) for kind in log],
            "stalls": {"count": stalls[0], "ticks": stalls[1]},
        },
    }


def test_a_deterministic_outcome_that_differs_by_one_is_a_mismatch():
    soak = bench_module("soak")
    stock = run({"half_close_post": {"answered:200:echo": 720}})
    arm = run({"half_close_post": {"answered:200:echo": 719, "no-response": 1}})
    lines = soak.compare("read_interest", stock, arm)
    assert len(lines) == 2
    assert all("read_interest | half_close_post |" in line for line in lines)
    assert soak.compare("read_interest", stock, stock) == []


def test_timing_dependent_outcomes_compare_as_shares(monkeypatch):
    soak = bench_module("soak")
    monkeypatch.setitem(soak.TIMING_DEPENDENT, "race", "why")
    stock = run({"race": {"won": 600, "lost": 120}})
    near = run({"race": {"won": 590, "lost": 130}})
    far = run({"race": {"won": 400, "lost": 320}})
    assert soak.compare("arm", stock, near) == []
    assert [line.split(" | ")[2] for line in soak.compare("arm", stock, far)] == [
        "lost",
        "won",
    ]


def test_stalls_and_log_kinds():
    soak = bench_module("soak")
    stock = run({}, stalls=(1, 4000))
    assert soak.compare("arm", stock, run({}, stalls=(2, 1800))) == []
    assert len(soak.compare("arm", stock, run({}, stalls=(40, 2000)))) == 1
    extra = (("tornado.access", "INFO", "%d", 10), ("asyncio", "ERROR", "boom", 1))
    assert len(soak.compare("arm", stock, run({}, log=extra))) == 1
    own = (("tornado.access", "INFO", "%d", 10), ("fastloop", "INFO", "said", 1))
    assert soak.compare("arm", stock, run({}, log=own)) == []


def test_fisher_p_is_the_exact_test():
    soak = bench_module("soak")
    assert soak.fisher_p(3, 8, 1, 8) == pytest.approx(0.5692, abs=1e-4)
    assert soak.fisher_p(0, 0, 0, 0) == 1.0
    assert soak.fisher_p(693, 720, 720, 720) < soak.ALPHA


def test_the_script_depends_on_seed_and_count_alone():
    client = bench_module("soak_client")
    assert client.script(7, 500) == client.script(7, 500)
    assert client.script(7, 500) != client.script(8, 500)
    assert client.script(7, 500)[:100] == client.script(7, 100)[:100]
    assert set(client.MIX) == set(client.SCENARIOS)
