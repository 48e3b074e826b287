"""The fastloop command line: bench smoke test and usage errors."""

from __future__ import annotations

import collections
import itertools
import json
import subprocess
import sys

import pytest

from fastloop import ab, cli


def fastloop_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fastloop", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_bench_quick_one_workload_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    result = fastloop_cli(
        "bench", "--quick", "--only", "onloop-burst", "--json", str(out)
    )
    assert result.returncode == 0, result.stderr
    assert "onloop-burst" in result.stdout
    header = result.stdout.splitlines()[0].split("  ")
    assert [cell.strip() for cell in header if cell.strip()][:7] == [
        "workload",
        "per",
        "stock",
        "fastloop",
        "fastloop/stock [95% CI]",
        "limit: bare asyncio",
        "fastloop/limit",
    ]
    assert "; took " in result.stdout.splitlines()[-1]
    # A pipe is no terminal: the plan first, then one finished line per
    # workload, each ending in a newline, nothing rewritten in place.
    assert "\r" not in result.stderr and "\x1b" not in result.stderr
    lines = result.stderr.split("\n")
    assert lines[0].startswith("fastloop bench: 1 workload x ")
    assert lines[0].endswith(" s planned")  # said before the first round
    assert lines[1].startswith("[1/1] onloop-burst: 7 rounds, fastloop/stock ")
    assert lines[2:] == [""]
    data = json.loads(out.read_text())
    (row,) = data["workloads"]
    assert row["name"] == "onloop-burst"
    assert row["patched_vs_stock"]["rounds"] == 7
    assert set(row["per_op_s"]) >= {"stock", "patched", "limit"}
    assert all(len(ops) == 7 for ops in row["ops"].values())
    assert min(min(ops) for ops in row["ops"].values()) >= row["floor"]
    assert data["slice_s"] == 0.1 and data["planned_s"] > 0
    assert row["patched_vs_stock"]["low"] <= row["patched_vs_stock"]["ratio"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "the following arguments are required: COMMAND"),
        (["frobnicate"], "invalid choice"),
        (["bench", "--only", "nope"], "unknown workload nope"),
        (["bench", "--rounds", "0"], "needs at least 6 rounds, got 0"),
        (["bench", "--rounds", "5"], "needs at least 6 rounds, got 5"),
        (["bench", "--rounds", "x"], "expected a whole number, got 'x'"),
        (["bench", "--loop", "trio"], "invalid choice"),
    ],
)
def test_bad_arguments_give_usage_and_exit_2(args, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "usage: fastloop" in err
    assert message in err


def test_python_dash_m_reports_usage_errors_too():
    result = fastloop_cli("bench", "--only", "")
    assert result.returncode == 2
    assert "usage: fastloop bench" in result.stderr


def test_missing_optional_dependency_names_the_extra(monkeypatch, capsys, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name: None if name == "matplotlib" else real(name),
    )
    assert (
        cli.main(["bench", "--only", "onloop-burst", "--plot", str(tmp_path / "p.png")])
        == 2
    )
    assert capsys.readouterr().err == (
        "fastloop: --plot needs matplotlib: pip install 'tornado-fastloop[bench]'\n"
    )


def test_harness_recovers_a_known_ratio():
    import itertools

    jitter = itertools.cycle([0.97, 1.0, 1.03, 0.99, 1.02])
    a_times = [1.0 * next(jitter) for _ in range(31)]
    b_times = [0.5 * next(jitter) for _ in range(31)]
    result = ab.paired(a_times, b_times)
    assert result.low <= 0.5 <= result.high
    assert 0.45 < result.ratio < 0.55


def test_identical_arms_give_an_interval_containing_one():
    import random

    rng = random.Random(7)
    times = [rng.uniform(0.9, 1.1) for _ in range(62)]
    result = ab.paired(times[:31], times[31:])
    assert result.low <= 1.0 <= result.high


def test_noisy_flag_trips_on_wide_spread():
    import random

    rng = random.Random(3)
    calm = ab.paired([1.0] * 21, [rng.uniform(0.79, 0.81) for _ in range(21)])
    wild = ab.paired([1.0] * 21, [rng.uniform(0.3, 1.7) for _ in range(21)])
    assert not calm.noisy
    assert wild.noisy


def test_median_interval_uses_binomial_order_statistics():
    # n = 21: k = 6, so the interval is the 6th smallest and 6th largest values.
    assert ab.median_interval(range(1, 22)) == (11, 6, 16)
    # Too few values for 95%: the whole range.
    assert ab.median_interval([3, 1, 2]) == (2, 1, 3)


def _order_of_runs(k: int, rounds: int) -> list[str]:
    order: list[str] = []
    arms = {
        name: (lambda name=name: order.append(name) or 1.0) for name in "abcdefg"[:k]
    }
    ab.interleave(arms, rounds=rounds, warmup=0)
    return order


def test_interleave_runs_each_arm_after_every_other_equally_often():
    for k in range(2, 7):
        rounds = len(ab.balanced_orders(k))
        order = _order_of_runs(k, rounds)
        each = [order[r * k : (r + 1) * k] for r in range(rounds)]
        assert all(sorted(run) == list("abcdefg"[:k]) for run in each)
        follows = collections.Counter(
            pair for run in each for pair in itertools.pairwise(run)
        )
        assert len(follows) == k * (k - 1)
        assert set(follows.values()) == {rounds // k}, (k, follows)


def test_assert_ratio_below_for_user_tests():
    fast = ab.paired([1.0] * 11, [0.5 + 0.01 * i for i in range(11)], name="mine")
    fast.assert_ratio_below(0.6)
    fast.assert_ratio_below(0.6, conservative=True)
    with pytest.raises(
        AssertionError, match=r"median ratio 0\.550 is not below 0\.5: mine"
    ):
        fast.assert_ratio_below(0.5)
    with pytest.raises(AssertionError, match="upper bound"):
        fast.assert_ratio_below(0.56, conservative=True)


def test_patched_vs_stock_toggles_the_patches_per_arm():
    import tornado.platform.asyncio  # noqa: F401  (add_callback applies on import)

    import fastloop

    seen = []

    def workload():
        seen.append(fastloop.installed())
        return 1.0

    fastloop.install(["wakeup"])
    result = ab.patched_vs_stock(workload, ["add_callback"], rounds=2, warmup=0)
    assert result.ratio == 1.0
    assert seen == [
        frozenset(),
        {"add_callback", "wakeup"},
        {"add_callback", "wakeup"},
        frozenset(),
    ]
    assert fastloop.installed() == {"wakeup"}  # the prior state is back


def test_version_names_fastloop_tornado_and_python():
    import platform

    import tornado

    import fastloop

    result = fastloop_cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"fastloop {fastloop.__version__} (tornado-fastloop), "
        f"Tornado {tornado.version}, "
        f"{platform.python_implementation()} {platform.python_version()}\n"
    )


def test_bench_help_says_what_it_means(capsys):
    from fastloop.cli import bench

    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "95% intervals" in text and "%%" not in text
    assert f"a {bench.SLICE_S:.2f} s time slice" in text
    assert "prints its planned duration before it starts" in text


def test_min_rounds_is_the_fewest_that_bound_the_median():
    from fastloop.cli import bench

    needed = bench.min_rounds(0.95)
    assert needed == 6
    # With that many the extreme values are the interval; with one fewer, none.
    assert ab.median_interval(range(needed))[1:] == (0, needed - 1)
    assert 2 / 2 ** (needed - 1) > 0.05 >= 2 / 2**needed


def test_building_the_parser_imports_nothing_heavy():
    """``fastloop --help`` and a usage error load no loop, Tornado or harness."""
    code = (
        "import sys; from fastloop import cli; cli.parser(); "
        "print(sorted(m for m in sys.modules if m.partition('.')[0] in "
        "{'asyncio', 'tornado', 'importlib_metadata', 'statistics', 'hashlib'} "
        "or m.startswith(('importlib.metadata', 'fastloop.telemetry', "
        "'fastloop.patches', 'fastloop.observers', 'fastloop.ab', "
        "'fastloop.cli._workloads'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
