"""The ``fastloop`` command (also ``python -m fastloop``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path


def _names(kind: str, known: Callable[[], Sequence[str]]) -> Callable[[str], list[str]]:
    """An argparse type: a comma list, each name one of ``known()``."""

    def parse(text: str) -> list[str]:
        valid = known()
        names = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in names if name not in valid]
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"unknown {kind} {', '.join(unknown) or repr(text)}; "
                f"choose from {', '.join(valid)}"
            )
        return names

    return parse


def _workloads() -> Sequence[str]:
    from fastloop.workloads import WORKLOADS

    return list(WORKLOADS)


def _patches() -> Sequence[str]:
    from fastloop import _registry

    return _registry.known()


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
        type=_names("workload", _workloads),
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
    run = commands.add_parser(
        "run",
        help="run a command (and every Python process it starts) with fastloop",
        description="Set FASTLOOP and friends, then replace this process with COMMAND.",
    )
    run.add_argument(
        "--patches",
        type=_names("patch", _patches),
        metavar="NAMES",
        help="comma list of patches (default: all)",
    )
    run.add_argument(
        "--report",
        nargs="?",
        const="stderr",
        metavar="PATH",
        help="at exit print the report, or write stats JSON to PATH",
    )
    run.add_argument(
        "--slow-write-ms",
        type=_non_negative,
        metavar="N",
        help="warn about write_to_fd calls slower than N ms (default: off)",
    )
    run.add_argument(
        "--block-ms",
        type=_positive_ms,
        metavar="N",
        help="log the stack of any IOLoop blocked longer than N ms",
    )
    run.add_argument(
        "--profile",
        type=Path,
        metavar="FILE",
        help="sample the loop threads every 10 ms; write collapsed stacks "
        "(speedscope JSON if FILE ends in .speedscope.json) at exit; "
        "child processes write FILE.<pid>",
    )
    run.add_argument("command_args", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")
    doctor = commands.add_parser(
        "doctor",
        help="check this interpreter: versions, loop, .pth hook, each patch's verdict",
    )
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    return top


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def _positive_ms(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    top = parser()
    args = top.parse_args(argv)
    if args.command == "bench":
        from fastloop import _bench

        return _bench.run(
            args.only, args.loop, args.quick, args.rounds, args.json, args.plot
        )
    if args.command == "run":
        from fastloop import _launch

        command = list(args.command_args)
        if command[:1] == ["--"]:
            command = command[1:]
        if not command:
            top.exit(
                2,
                "usage: fastloop run [options] -- COMMAND ...\n"
                "fastloop run: error: missing COMMAND\n",
            )
        env = _launch.environment(
            args.patches,
            report=args.report,
            slow_write_ms=args.slow_write_ms,
            block_ms=args.block_ms,
            profile=args.profile,
        )
        return _launch.run(command, env)
    if args.command == "doctor":
        import json

        from fastloop import _doctor

        report = _doctor.diagnose()
        print(json.dumps(report, indent=1) if args.json else _doctor.render(report))
        return 0 if report["ok"] else 1
    raise AssertionError(args.command)  # argparse only lets known commands through


if __name__ == "__main__":
    sys.exit(main())
