"""Time the README's test command in a fresh clone, install included.

    python bench/time_test_command.py   # writes bench/results/test_command.json

The README states how long its test command takes; this is where that
figure comes from.  Run it on an otherwise idle machine.
"""

from __future__ import annotations

import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _results
from _render_front import TEST_COMMAND

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        clone = Path(scratch) / "fastloop"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        start = time.monotonic()
        done = subprocess.run(["bash", "-c", TEST_COMMAND], cwd=clone, check=False)
        seconds = time.monotonic() - start
    if done.returncode != 0:
        print(f"the test command failed ({done.returncode}): nothing recorded")
        return 1
    python = subprocess.run(
        ["python3", "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    _results.save(
        ROOT / "bench" / "results" / "test_command.json",
        "test_command",
        seconds=seconds,
        python=python,
        machine=platform.machine(),
    )
    print(f"{seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
