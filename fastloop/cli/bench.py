"""``fastloop bench``: the built-in workloads, A/B against stock, as a table.

Every workload runs its arms interleaved in each round: stock and patched
always; the bare-asyncio limit where one exists; and, when uvloop is
installed and the loop is asyncio's, stock uvloop and uvloop + fastloop
(the alternative a user would pick).  Ratios are medians of per-round
ratios with distribution-free 95% intervals (``fastloop.ab``).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastloop.cli._arguments import Commands, names

if TYPE_CHECKING:
    from fastloop import ab
    from fastloop.cli._workloads import Runner, Workload

QUICK_ROUNDS = 7
FULL_ROUNDS = 21
#: Wall time of `fastloop bench` and `--quick`, all workloads, with uvloop
#: arms, on the 2-core VM of the README's results: "full" is the "seconds"
#: that run wrote to bench/results/bench.json, "quick" was timed beside it.
MEASURED_SECONDS = {"full": 171, "quick": 57}


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
        "interleaved, and print median ratios with 95% intervals.  Measured on "
        f"a 2-core VM: {MEASURED_SECONDS['full']} s for all workloads, "
        f"{MEASURED_SECONDS['quick']} s with --quick.",
    )
    bench.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
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
        "about a third of the time",
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


def _uvloop_runner() -> Runner | None:
    if importlib.util.find_spec("uvloop") is None:
        return None
    import uvloop

    run: Callable[[Coroutine[Any, Any, float]], float] = uvloop.run
    return run


def _arms(
    workload: Workload, runner: Runner, uvloop: Runner | None
) -> dict[str, ab.Arm]:
    from fastloop import ab
    from fastloop.patches import registry

    scale = workload.per_round
    chosen = list(workload.patches)

    def stock() -> float:
        with ab.stock():
            return workload.run(runner, scale)

    def patched() -> float:
        with registry.patched(chosen):
            return workload.run(runner, scale)

    arms: dict[str, ab.Arm] = {"stock": stock, "patched": patched}
    if workload.limit is not None:
        floor = workload.limit

        def limit() -> float:
            with ab.stock():
                return floor(runner, scale)

        arms["limit"] = limit
    if uvloop is not None:
        uv = uvloop

        def stock_uvloop() -> float:
            with ab.stock():
                return workload.run(uv, scale)

        def patched_uvloop() -> float:
            with registry.patched(chosen):
                return workload.run(uv, scale)

        arms["uvloop"] = stock_uvloop
        arms["uvloop+fastloop"] = patched_uvloop
    return arms


def measure(
    names: list[str],
    *,
    loop: str,
    rounds: int,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """Run the chosen workloads; JSON-able results."""
    import asyncio
    import os
    import platform

    from fastloop import ab
    from fastloop.cli._workloads import WORKLOADS

    runner: Runner = asyncio.run
    alternative = _uvloop_runner() if loop == "asyncio" else None
    if loop == "uvloop":
        uv = _uvloop_runner()
        if uv is None:
            raise RuntimeError(
                "--loop uvloop needs uvloop: pip install 'tornado-fastloop[bench]'"
            )
        runner = uv
    rows = []
    for position, name in enumerate(names, 1):
        workload = WORKLOADS[name]
        arms = _arms(workload, runner, alternative)
        label = f"[{position}/{len(names)}] {name}"

        def tick(done: int, total: int, label: str = label) -> None:
            progress(f"\r{label}: round {done}/{total}")

        times = ab.interleave(arms, rounds=rounds, progress=tick)
        progress(f"\r{label}: done{' ' * 12}\n")
        row: dict[str, Any] = {
            "name": name,
            "description": workload.description,
            "patches": list(workload.patches),
            "per_round": workload.per_round,
            "unit": workload.unit,
            "median_s": {arm: sorted(t)[len(t) // 2] for arm, t in times.items()},
            "patched_vs_stock": ab.paired(
                times["stock"], times["patched"], name=name
            ).to_dict(),
        }
        if "limit" in times:
            row["patched_vs_limit"] = ab.paired(
                times["limit"], times["patched"], name=name, a_label="limit"
            ).to_dict()
        if "uvloop" in times:
            row["patched_vs_uvloop"] = ab.paired(
                times["uvloop"], times["patched"], name=name, a_label="stock uvloop"
            ).to_dict()
        rows.append(row)
    import tornado

    from fastloop import __version__

    return {
        "fastloop": __version__,
        "python": platform.python_version(),
        "tornado": tornado.version,
        "loop": loop,
        "uvloop": _version_of("uvloop"),
        "rounds": rounds,
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


def _per_op(seconds: float, row: dict[str, Any]) -> str:
    ns = seconds / row["per_round"] * 1e9
    return f"{ns / 1000:,.1f} us" if ns >= 10_000 else f"{ns:,.0f} ns"


def _ratio(result: dict[str, Any]) -> str:
    noisy = "~" if result["noisy"] else ""
    return f"{result['ratio']:.2f} [{result['low']:.2f}, {result['high']:.2f}]{noisy}"


def table(results: dict[str, Any]) -> str:
    """The results as a text table (per-operation medians and ratios)."""
    # The README's column names (bench/render_readme.py).
    header = [
        "workload",
        "per",
        "stock",
        "fastloop",
        "fastloop/stock [95% CI]",
        "limit: bare asyncio",
        "fastloop/limit",
    ]
    uv = any("patched_vs_uvloop" in row for row in results["workloads"])
    if uv:
        header += ["stock uvloop", "uvloop + fastloop", "fastloop/stock uvloop"]
    lines = [header]
    for row in results["workloads"]:
        median = row["median_s"]
        cells = [
            row["name"],
            row["unit"],
            _per_op(median["stock"], row),
            _per_op(median["patched"], row),
            _ratio(row["patched_vs_stock"]),
            _per_op(median["limit"], row) if "limit" in median else "-",
            _ratio(row["patched_vs_limit"]) if "patched_vs_limit" in row else "-",
        ]
        if uv:
            cells += [
                _per_op(median["uvloop"], row),
                _per_op(median["uvloop+fastloop"], row),
                _ratio(row["patched_vs_uvloop"]),
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
        f"per operation, medians of {results['rounds']} interleaved rounds; "
        f"Python {results['python']}, Tornado {results['tornado']}, "
        f"loop {results['loop']}; ~ = noisy (95% interval wider than 10% of the ratio)"
        + (f"; took {results['seconds']:.0f} s" if "seconds" in results else "")
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

    def progress(text: str) -> None:
        print(text, end="", file=sys.stderr, flush=True)

    started = time.monotonic()
    results = measure(chosen, loop=loop, rounds=count, progress=progress)
    results["seconds"] = round(time.monotonic() - started, 1)
    print(table(results))
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(results, indent=1) + "\n")
    if plot_path is not None:
        plot(results, plot_path)
    return 0
