"""The ``fastloop`` command (also ``python -m fastloop``): one module per subcommand.

Each of ``bench``, ``run``, ``doctor`` and ``flamegraph`` adds its own
parser (``add_parser``) and runs it (``main``).  Building the parser
imports nothing heavy: a subcommand loads what it runs only when run.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

#: The subcommands, each a module of this package (imported by ``parser()``:
#: at this package's top they would import it back while it loads).
COMMANDS = ("bench", "run", "doctor", "flamegraph")


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


class _Version(argparse.Action):
    """``--version``, worked out only when asked for (importlib.metadata is slow)."""

    def __init__(
        self, option_strings: Sequence[str], dest: str, **kwargs: object
    ) -> None:
        super().__init__(
            option_strings, dest, nargs=0, help="show the versions and exit"
        )

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        print(_version())
        parser.exit()


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="fastloop",
        description="Cheaper Tornado IOLoops, proven by A/B benchmarks.",
    )
    top.add_argument("--version", action=_Version)
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        _command(name).add_parser(commands)
    return top


def _command(name: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{name}")


def main(argv: Sequence[str] | None = None) -> int:
    top = parser()
    args = top.parse_args(argv)
    status: int = _command(args.command).main(args, top)
    return status


if __name__ == "__main__":
    sys.exit(main())
