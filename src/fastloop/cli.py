"""The ``fastloop`` command (also ``python -m fastloop``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def _workload_names(text: str) -> list[str]:
    from fastloop.workloads import WORKLOADS

    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in WORKLOADS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown workload {', '.join(unknown) or repr(text)}; "
            f"choose from {', '.join(WORKLOADS)}"
        )
    return names


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="fastloop",
        description="Cheaper Tornado IOLoops, proven by A/B benchmarks.",
    )
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    bench = commands.add_parser(
        "bench",
        help="A/B the built-in workloads: stock against fastloop, as ratios",
        description="Run the built-in workloads with and without fastloop, "
        "interleaved, and print median ratios with 95%% intervals.",
    )
    bench.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    bench.add_argument(
        "--only",
        type=_workload_names,
        metavar="NAMES",
        help="comma list of workloads (default: all)",
    )
    bench.add_argument(
        "--quick",
        action="store_true",
        help="fewer rounds: the whole run in about a minute",
    )
    bench.add_argument("--rounds", type=_positive, help="rounds per workload")
    bench.add_argument(
        "--json", type=Path, metavar="FILE", help="write the results here"
    )
    bench.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.png",
        help="bar chart of the ratios (needs matplotlib)",
    )
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "bench":
        from fastloop import _bench

        return _bench.run(
            args.only, args.loop, args.quick, args.rounds, args.json, args.plot
        )
    raise AssertionError(args.command)  # argparse only lets known commands through


if __name__ == "__main__":
    sys.exit(main())
