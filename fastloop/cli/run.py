"""``fastloop run``: set the environment, then become the command.

The command and every Python process it starts (dask nannies spawn their
workers) inherit ``FASTLOOP*`` and so run patched, through the installed
``fastloop.pth``.  Where that file cannot work (fastloop importable only
through ``PYTHONPATH`` or ``pip install --target``, which no site directory
scans for .pth files) a ``sitecustomize`` directory goes first on
``PYTHONPATH`` and chains to any existing ``sitecustomize``.  Its options
are the settings table's flags (``fastloop.config.SETTINGS``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fastloop import config
from fastloop.cli._arguments import Commands, names, setting


def _patch_names() -> Sequence[str]:
    from fastloop.patches import registry

    return registry.known()


def add_parser(commands: Commands) -> None:
    run = commands.add_parser(
        "run",
        help="run a command (and every Python process it starts) with fastloop",
        description="Set FASTLOOP and friends, then replace this process with COMMAND.",
    )
    run.add_argument(
        "--patches",
        type=names("patch", _patch_names),
        metavar="NAMES",
        help="comma list of patches (default: all)",
    )
    for row in config.SETTINGS:
        flag = row.flag
        if flag is None:
            continue
        extra: dict[str, Any] = (
            {"nargs": "?", "const": flag.const} if flag.const else {}
        )
        run.add_argument(
            flag.option,
            dest=row.name,
            type=setting(row.parse),
            metavar=flag.metavar,
            help=flag.help,
            **extra,
        )
    run.add_argument("command_args", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")


def main(args: argparse.Namespace, top: argparse.ArgumentParser) -> int:
    command = list(args.command_args)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        top.exit(
            2,
            "usage: fastloop run [options] -- COMMAND ...\n"
            "fastloop run: error: missing COMMAND\n",
        )
    chosen = {
        row.name: getattr(args, row.name)
        for row in config.SETTINGS
        if row.flag is not None and getattr(args, row.name) is not None
    }
    return become(command, environment(args.patches, chosen))


def pth_active() -> bool:
    """Whether fastloop.pth sits in a site directory of this interpreter."""
    import site
    import sysconfig

    directories = {*site.getsitepackages(), sysconfig.get_paths()["purelib"]}
    if site.ENABLE_USER_SITE:
        directories.add(site.getusersitepackages())
    return any((Path(d) / "fastloop.pth").exists() for d in directories)


def environment(
    patches: Sequence[str] | None,
    settings: Mapping[str, Any] | None = None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The command's environment: ``FASTLOOP``, each setting given, and the hook."""
    import fastloop

    env = dict(os.environ if base is None else base)
    env["FASTLOOP"] = ",".join(patches) if patches else "1"
    for name, value in (settings or {}).items():
        row = config.BY_NAME[name]
        assert row.flag is not None
        env[row.variable] = row.flag.to_environ(value)
    if not pth_active():
        package = Path(fastloop.__file__).resolve().parent
        parts = [
            str(package / "runtime" / "sitecustomize"),
            str(package.parent),
            *filter(None, env.get("PYTHONPATH", "").split(os.pathsep)),
        ]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env


def become(command: Sequence[str], env: dict[str, str]) -> int:
    """Replace this process with ``command``; 127 if it cannot be found."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(command[0], list(command), env)
    except FileNotFoundError:
        print(f"fastloop run: {command[0]}: command not found", file=sys.stderr)
        return 127
    except PermissionError:
        print(f"fastloop run: {command[0]}: permission denied", file=sys.stderr)
        return 126
    raise AssertionError("execvpe returned")  # pragma: no cover
