"""``fastloop run``: set the environment, then become the command.

The command and every Python process it starts (dask nannies spawn their
workers) inherit ``FASTLOOP*`` and so run patched, through the installed
``fastloop.pth``.  Where that file cannot work (fastloop importable only
through ``PYTHONPATH`` or ``pip install --target``, which no site directory
scans for .pth files) a ``sitecustomize`` directory goes first on
``PYTHONPATH`` and chains to any existing ``sitecustomize``.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

import fastloop


def pth_active() -> bool:
    """Whether fastloop.pth sits in a site directory of this interpreter."""
    directories = {*site.getsitepackages(), sysconfig.get_paths()["purelib"]}
    if site.ENABLE_USER_SITE:
        directories.add(site.getusersitepackages())
    return any((Path(d) / "fastloop.pth").exists() for d in directories)


def environment(
    patches: Sequence[str] | None,
    report: str | None = None,
    slow_write_ms: float | None = None,
    block_ms: float | None = None,
    profile: Path | None = None,
    base: dict[str, str] | None = None,
) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env["FASTLOOP"] = ",".join(patches) if patches else "1"
    if report is not None:
        env["FASTLOOP_REPORT"] = report
    if slow_write_ms is not None:
        env["FASTLOOP_SLOW_WRITE_MS"] = repr(slow_write_ms)
    if block_ms is not None:
        env["FASTLOOP_BLOCK_MS"] = repr(block_ms)
    if profile is not None:
        env["FASTLOOP_PROFILE"] = str(profile.resolve())
    if not pth_active():
        package_parent = str(Path(fastloop.__file__).resolve().parents[1])
        hook = str(Path(fastloop.__file__).resolve().parent / "_sitecustomize")
        parts = [
            hook,
            package_parent,
            *filter(None, env.get("PYTHONPATH", "").split(os.pathsep)),
        ]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env


def run(command: Sequence[str], env: dict[str, str]) -> int:
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
