"""The ``fastloop`` command (also ``python -m fastloop``)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeAlias

from fastloop import config

#: What ``add_subparsers`` returns: each command adds its own parser to it.
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


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


def _workload_names() -> Sequence[str]:
    from fastloop.cli._workloads import WORKLOADS

    return list(WORKLOADS)


def _patch_names() -> Sequence[str]:
    from fastloop import _registry

    return _registry.known()


def _bench_seconds(run: str) -> int:
    from fastloop.cli import _bench

    return _bench.MEASURED_SECONDS[run]


def _rounds(text: str) -> int:
    """--rounds: enough rounds for the distribution-free 95% interval it prints."""
    from fastloop.cli import _bench

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number, got {text!r}"
        ) from None
    needed = _bench.min_rounds(0.95)
    if value < needed:
        raise argparse.ArgumentTypeError(
            f"a 95% interval of the median needs at least {needed} rounds, got "
            f"{value} (with n rounds the range of the ratios misses the median "
            f"with probability 2/2**n, above 5% for n < {needed})"
        )
    return value


def _version() -> str:
    """What a bug report needs: fastloop's, Tornado's and Python's versions."""
    import platform
    from importlib import metadata

    from fastloop import __version__

    try:
        tornado = metadata.version("tornado")
    except metadata.PackageNotFoundError:
        tornado = "not installed"
    return (
        f"fastloop {__version__} (tornado-fastloop), Tornado {tornado}, "
        f"{platform.python_implementation()} {platform.python_version()}"
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="fastloop",
        formatter_class=argparse.RawDescriptionHelpFormatter,  # --version unwrapped
        description="Cheaper Tornado IOLoops, proven by A/B benchmarks.",
    )
    top.add_argument("--version", action="version", version=_version())
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_bench(commands)
    _add_run(commands)
    _add_doctor(commands)
    _add_flamegraph(commands)
    return top


def _add_bench(commands: Commands) -> None:
    bench = commands.add_parser(
        "bench",
        help="A/B the built-in workloads: stock against fastloop, as ratios",
        description="Run the built-in workloads with and without fastloop, "
        "interleaved, and print median ratios with 95% intervals.  Measured on "
        f"a 2-core VM: {_bench_seconds('full')} s for all workloads, "
        f"{_bench_seconds('quick')} s with --quick.",
    )
    bench.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    bench.add_argument(
        "--only",
        type=_names("workload", _workload_names),
        metavar="NAMES",
        help="comma list of workloads (default: all)",
    )
    bench.add_argument(
        "--quick",
        action="store_true",
        help="7 rounds per workload instead of 21: about a third of the time",
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


def _add_run(commands: Commands) -> None:
    run = commands.add_parser(
        "run",
        help="run a command (and every Python process it starts) with fastloop",
        description="Set FASTLOOP and friends, then replace this process with COMMAND.",
    )
    run.add_argument(
        "--patches",
        type=_names("patch", _patch_names),
        metavar="NAMES",
        help="comma list of patches (default: all)",
    )
    run.add_argument(
        "--report",
        nargs="?",
        const="stderr",
        metavar="PATH",
        help="at exit (and on SIGTERM) print the report, or write stats JSON to "
        "PATH ({pid} in it: one file per process)",
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
        "(speedscope JSON if FILE ends in .speedscope.json) at exit and on "
        "SIGTERM; "
        "child processes write FILE.<pid>",
    )
    run.add_argument("command_args", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")


def _add_doctor(commands: Commands) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="check this interpreter: versions, loop, .pth hook, each patch's verdict",
    )
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.add_argument(
        "--loop",
        choices=("asyncio", "uvloop"),
        help="answer for an application that runs this loop "
        "(default: the one this interpreter's policy makes)",
    )


def _add_flamegraph(commands: Commands) -> None:
    flamegraph = commands.add_parser(
        "flamegraph",
        help="draw a profile's collapsed stacks as a flame graph (SVG or PNG)",
        description="Draw the collapsed stacks that --profile / FASTLOOP_PROFILE "
        "wrote as a flame graph: OUT.svg needs nothing, OUT.png needs matplotlib.",
    )
    from fastloop import flamegraph as _flamegraph

    _flamegraph.add_arguments(flamegraph)


def _non_negative(text: str) -> float:
    value = config.finite_number(text, positive=False)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def _positive_ms(text: str) -> float:
    value = config.finite_number(text, positive=True)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    top = parser()
    args = top.parse_args(argv)
    if args.command == "bench":
        from fastloop.cli import _bench

        return _bench.run(
            args.only, args.loop, args.quick, args.rounds, args.json, args.plot
        )
    if args.command == "run":
        from fastloop.cli import _launch

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
    if args.command == "flamegraph":
        from fastloop import flamegraph

        return flamegraph.main(args)
    if args.command == "doctor":
        import json

        from fastloop.cli import _doctor

        if args.loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
            print("fastloop doctor: --loop uvloop needs uvloop", file=sys.stderr)
            return 2
        report = _doctor.diagnose(loop=args.loop)
        print(json.dumps(report, indent=1) if args.json else _doctor.render(report))
        return 0 if report["ok"] else 1
    raise AssertionError(args.command)  # argparse only lets known commands through


if __name__ == "__main__":
    sys.exit(main())
