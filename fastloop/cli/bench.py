"""``fastloop bench``: the built-in workloads, A/B against stock, as a table.

Every workload runs its arms interleaved in each round: stock and patched
always; the bare-asyncio limit where one exists; and, when the loop is
asyncio's, each other event loop installed (``OTHER_LOOPS``: the
alternatives a user would pick) alone and with fastloop.  Each arm's round
is a time slice (``_workloads.Slice``): it runs its workload in batches
until the slice has passed and a floor of operations is done, and what it
yields is the time per operation.  Ratios are medians of per-round ratios
of those times with distribution-free 95% intervals (``fastloop.ab``); the
run's length is the plan's (``_plan.Plan``), whatever an arm's speed.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastloop.cli._arguments import Commands, names

if TYPE_CHECKING:
    from fastloop.cli._plan import Plan, Progress
    from fastloop.cli._workloads import Round, Runner, Slice, Workload

QUICK_ROUNDS = 7
FULL_ROUNDS = 21
WARMUP_ROUNDS = 1
#: Each arm's round runs its workload for this long (then finishes its batch).
SLICE_S = 0.1
#: What a round costs beside its slice: the loop's and threads' set-up and
#: tear-down and the batch that runs past the slice.  From the recorded run
#: (bench/results/bench.json: "seconds" less the slices, per arm's round).
SETUP_S = 0.02


def min_rounds(confidence: float) -> int:
    """The fewest rounds whose extreme ratios bound the median with ``confidence``.

    The interval [smallest, largest] misses the median only when every ratio
    falls on one side of it: probability 2/2**n, distribution-free.
    """
    n = 1
    while 2 / 2**n > 1 - confidence:
        n += 1
    return n


def _workload_names() -> Sequence[str]:
    from fastloop.cli._workloads import WORKLOADS

    return list(WORKLOADS)


def _rounds(text: str) -> int:
    """--rounds: enough rounds for the distribution-free 95% interval it prints."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number, got {text!r}"
        ) from None
    needed = min_rounds(0.95)
    if value < needed:
        raise argparse.ArgumentTypeError(
            f"a 95% interval of the median needs at least {needed} rounds, got "
            f"{value} (with n rounds the range of the ratios misses the median "
            f"with probability 2/2**n, above 5% for n < {needed})"
        )
    return value


def add_parser(commands: Commands) -> None:
    bench = commands.add_parser(
        "bench",
        help="A/B the built-in workloads: stock against fastloop, as ratios",
        description="Run the built-in workloads with and without fastloop, "
        "interleaved, and print median ratios of the time per operation with "
        f"95% intervals.  Each arm's round runs for a {SLICE_S:.2f} s time slice "
        "(with a floor on operations), so a slow arm does fewer operations, not "
        "longer rounds; the run prints its planned duration before it starts.",
    )
    bench.add_argument(
        "--loop",
        choices=("asyncio", *OTHER_LOOPS),
        default="asyncio",
        help="the loop the stock and fastloop arms run on; with asyncio's, "
        "each other loop installed gets arms of its own",
    )
    bench.add_argument(
        "--only",
        type=names("workload", _workload_names),
        metavar="NAMES",
        help="comma list of workloads (default: all)",
    )
    bench.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_ROUNDS} rounds per workload instead of {FULL_ROUNDS}: "
        f"{QUICK_ROUNDS + WARMUP_ROUNDS}/{FULL_ROUNDS + WARMUP_ROUNDS} of the time",
    )
    bench.add_argument(
        "--rounds",
        type=_rounds,
        help="rounds per workload (at least the fewest that bound a 95%% interval)",
    )
    bench.add_argument(
        "--json", type=Path, metavar="FILE", help="write the results here"
    )
    bench.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.png",
        help="bar chart of the ratios (needs matplotlib)",
    )


#: The event loops besides asyncio's that get arms where they are installed;
#: each module has ``new_event_loop``.
OTHER_LOOPS = ("uvloop", "zuvloop", "rloop")


def installed_loops() -> list[str]:
    return [name for name in OTHER_LOOPS if importlib.util.find_spec(name)]


def runner_of(loop: str) -> Runner:
    """Run a coroutine on a new loop of this kind, as ``asyncio.run`` does."""
    import asyncio

    if loop == "asyncio":
        return asyncio.run
    factory = importlib.import_module(loop).new_event_loop

    def run(coroutine: Any) -> Any:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(coroutine)

    return run


def _runners(loop: str) -> tuple[Runner, dict[str, Runner]]:
    """The runner of the loop asked for, and the other loops' to compare against."""
    if loop == "asyncio":
        return runner_of(loop), {name: runner_of(name) for name in installed_loops()}
    if loop not in installed_loops():
        raise RuntimeError(f"--loop {loop} needs {loop}: pip install {loop}")
    return runner_of(loop), {}


def _arms(
    workload: Workload, runner: Runner, others: dict[str, Runner], s: Slice
) -> dict[str, Callable[[], Round]]:
    """Each arm runs one round of ``workload`` sized by ``s``: stock, patched,
    the bare-asyncio limit where there is one, and each other loop alone and
    with fastloop."""
    from fastloop import ab
    from fastloop.patches import registry

    chosen = measured_set()

    def stock_on(run: Runner) -> Callable[[], Round]:
        def arm() -> Round:
            with ab.stock():
                return workload.run(run, s)

        return arm

    def patched_on(run: Runner) -> Callable[[], Round]:
        def arm() -> Round:
            with registry.patched(chosen):
                return workload.run(run, s)

        return arm

    arms: dict[str, Callable[[], Round]] = {
        "stock": stock_on(runner),
        "patched": patched_on(runner),
    }
    if workload.limit is not None:
        floor = workload.limit

        def limit() -> Round:
            with ab.stock():
                return floor(runner, s)

        arms["limit"] = limit
    for name, run in others.items():
        arms[name] = stock_on(run)
        arms[f"{name}+fastloop"] = patched_on(run)
    return arms


#: Default-set patches a round cannot measure: auto mode engages only after
#: a few of its ticks, longer than a round, so ``switchinterval`` is measured
#: in whole processes (bench/gil_echo.py, bench/gil_dask.py) instead.
NOT_PER_ROUND = ("switchinterval",)


def measured_set() -> list[str]:
    """The fastloop arm: what FASTLOOP=1 installs, less ``NOT_PER_ROUND``."""
    from fastloop.patches import registry

    return [name for name in registry.default_set() if name not in NOT_PER_ROUND]


def arm_count(workload: Workload, others: int) -> int:
    """How many arms ``_arms`` gives ``workload`` beside ``others`` other loops."""
    return 2 + (workload.limit is not None) + 2 * others


def make_plan(
    names: Sequence[str],
    *,
    loop: str,
    rounds: int,
    slice_s: float = SLICE_S,
    warmup: int = WARMUP_ROUNDS,
) -> Plan:
    """What ``measure`` will run for ``names``, and so how long it takes."""
    from fastloop.cli._plan import Plan
    from fastloop.cli._workloads import WORKLOADS

    others = len(installed_loops()) if loop == "asyncio" else 0
    return Plan(
        arms=tuple((name, arm_count(WORKLOADS[name], others)) for name in names),
        rounds=rounds,
        warmup=warmup,
        slice_s=slice_s,
        setup_s=SETUP_S,
    )


def _row(workload: Workload, rounds: dict[str, list[Round]]) -> dict[str, Any]:
    """One workload's figures: time per operation of each arm, and the ratios."""
    import statistics

    from fastloop import ab

    per_op = {arm: [r.per_op for r in done] for arm, done in rounds.items()}
    name = workload.name
    row: dict[str, Any] = {
        "name": name,
        "description": workload.description,
        "patches": measured_set(),
        "exercises": list(workload.exercises),
        "unit": workload.unit,
        "batch": workload.batch,
        "floor": workload.floor,
        "per_op_s": {arm: statistics.median(t) for arm, t in per_op.items()},
        "ops": {arm: [r.ops for r in done] for arm, done in rounds.items()},
        "patched_vs_stock": ab.paired(
            per_op["stock"], per_op["patched"], name=name
        ).to_dict(),
    }
    if "limit" in per_op:
        row["patched_vs_limit"] = ab.paired(
            per_op["limit"], per_op["patched"], name=name, a_label="limit"
        ).to_dict()
    for other in OTHER_LOOPS:
        if other in per_op:
            row[f"patched_vs_{other}"] = ab.paired(
                per_op[other], per_op["patched"], name=name, a_label=f"stock {other}"
            ).to_dict()
            # The promise on every loop: fastloop never makes it slower.
            row[f"{other}_fastloop_vs_{other}"] = ab.paired(
                per_op[other],
                per_op[f"{other}+fastloop"],
                name=name,
                a_label=f"stock {other}",
            ).to_dict()
    return row


def measure(
    plan: Plan,
    *,
    loop: str,
    progress: Progress | None = None,
    clock: Callable[[], float] | None = None,
) -> dict[str, Any]:
    """Run the plan's workloads, each arm's round a time slice; JSON-able results.

    ``clock`` replaces the clock that sizes and times the rounds (tests).
    """
    import os
    import platform

    import tornado

    from fastloop import __version__, ab
    from fastloop.cli._workloads import WORKLOADS

    runner, others = _runners(loop)
    rows = []
    for name in plan.names:
        workload = WORKLOADS[name]
        arms = _arms(workload, runner, others, workload.slice(plan.slice_s, clock))

        def tick(done: int, total: int, name: str = name) -> None:
            if progress is not None:
                progress.round(name, done, total)

        rounds = ab.interleave(
            arms, rounds=plan.rounds, warmup=plan.warmup, progress=tick
        )
        row = _row(workload, rounds)
        if progress is not None:
            progress.finished(
                name,
                f"{plan.rounds} rounds, fastloop/stock "
                f"{_ratio(row['patched_vs_stock'])}",
            )
        rows.append(row)
    return {
        "fastloop": __version__,
        "python": platform.python_version(),
        "tornado": tornado.version,
        "loop": loop,
        "uvloop": _version_of("uvloop"),
        "loops": {name: _version_of(name) for name in others},
        "rounds": plan.rounds,
        "warmup": plan.warmup,
        "slice_s": plan.slice_s,
        "arm_rounds": plan.arm_rounds(),
        "planned_s": round(plan.seconds(), 1),
        "machine": {
            "system": platform.system(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "workloads": rows,
    }


def _version_of(distribution: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _per_op(seconds: float) -> str:
    ns = seconds * 1e9
    return f"{ns / 1000:,.1f} us" if ns >= 10_000 else f"{ns:,.0f} ns"


def _ratio(result: dict[str, Any]) -> str:
    noisy = "~" if result["noisy"] else ""
    return f"{result['ratio']:.2f} [{result['low']:.2f}, {result['high']:.2f}]{noisy}"


def table(results: dict[str, Any]) -> str:
    """The results as a text table (per-operation medians and ratios)."""
    # The results page's column names (bench/_render_results.py).
    header = [
        "workload",
        "per",
        "stock",
        "fastloop",
        "fastloop/stock [95% CI]",
        "limit: bare asyncio",
        "fastloop/limit",
    ]
    others = [
        other
        for other in OTHER_LOOPS
        if any(f"patched_vs_{other}" in row for row in results["workloads"])
    ]
    for other in others:
        header += [
            f"stock {other}",
            f"{other} + fastloop",
            f"fastloop/stock {other}",
            f"{other} + fastloop/{other}",
        ]
    lines = [header]
    for row in results["workloads"]:
        median = row["per_op_s"]
        cells = [
            row["name"],
            row["unit"],
            _per_op(median["stock"]),
            _per_op(median["patched"]),
            _ratio(row["patched_vs_stock"]),
            _per_op(median["limit"]) if "limit" in median else "-",
            _ratio(row["patched_vs_limit"]) if "patched_vs_limit" in row else "-",
        ]
        for other in others:
            cells += [
                _per_op(median[other]),
                _per_op(median[f"{other}+fastloop"]),
                _ratio(row[f"patched_vs_{other}"]),
                _ratio(row[f"{other}_fastloop_vs_{other}"])
                if f"{other}_fastloop_vs_{other}" in row
                else "-",
            ]
        lines.append(cells)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = [
        "  ".join(
            cell.ljust(width) for cell, width in zip(line, widths, strict=True)
        ).rstrip()
        for line in lines
    ]
    text.insert(1, "  ".join("-" * width for width in widths))
    footer = (
        f"per operation, medians of {results['rounds']} interleaved rounds of "
        f"{results['slice_s']:.2f} s per arm; "
        f"Python {results['python']}, Tornado {results['tornado']}, "
        f"loop {results['loop']}; ~ = noisy (95% interval wider than 10% of the ratio)"
        + (
            f"; took {results['seconds']:.0f} s ({results['planned_s']:.0f} s planned)"
            if "seconds" in results
            else ""
        )
    )
    return "\n".join([*text, "", footer])


def plot(results: dict[str, Any], path: Path) -> None:
    """Bar chart of patched/stock with interval whiskers and a line at 1.0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["workloads"]
    names = [row["name"] for row in rows]
    ratios = [row["patched_vs_stock"]["ratio"] for row in rows]
    low = [
        r - row["patched_vs_stock"]["low"] for r, row in zip(ratios, rows, strict=True)
    ]
    high = [
        row["patched_vs_stock"]["high"] - r for r, row in zip(ratios, rows, strict=True)
    ]
    figure, axes = plt.subplots(figsize=(8, 0.5 * len(rows) + 1.5))
    colours = ["#2a7ab0" if r <= 1 else "#c0504d" for r in ratios]
    axes.barh(names, ratios, xerr=[low, high], color=colours, capsize=3)
    axes.axvline(1.0, color="black", linewidth=1)
    axes.invert_yaxis()
    axes.set_xlabel("time with fastloop / stock time (lower is better), 95% interval")
    axes.set_title(
        f"fastloop {results['fastloop']}: Python {results['python']}, "
        f"Tornado {results['tornado']}, {results['machine']['cpus']} cores"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(args: argparse.Namespace, top: argparse.ArgumentParser) -> int:
    import json
    import time

    from fastloop.cli._workloads import WORKLOADS

    only, loop, quick, rounds = args.only, args.loop, args.quick, args.rounds
    json_path, plot_path = args.json, args.plot
    if plot_path is not None and importlib.util.find_spec("matplotlib") is None:
        print(
            "fastloop: --plot needs matplotlib: pip install 'tornado-fastloop[bench]'",
            file=sys.stderr,
        )
        return 2
    if loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
        print(
            "fastloop: --loop uvloop needs uvloop: "
            "pip install 'tornado-fastloop[bench]'",
            file=sys.stderr,
        )
        return 2
    chosen = only or list(WORKLOADS)
    count = rounds or (QUICK_ROUNDS if quick else FULL_ROUNDS)

    from fastloop.cli._plan import Progress

    plan = make_plan(chosen, loop=loop, rounds=count)
    progress = Progress(plan, sys.stderr)
    progress.begin()  # says how long the run will take, before it starts
    started = time.monotonic()
    results = measure(plan, loop=loop, progress=progress)
    results["seconds"] = round(time.monotonic() - started, 1)
    print(table(results))
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(results, indent=1) + "\n")
    if plot_path is not None:
        plot(results, plot_path)
    return 0
