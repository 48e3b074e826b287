"""The README's figures come from bench/results/, and its commands stay true."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def readme() -> str:
    path = REPO / "README.md"
    if not path.exists():
        pytest.skip("needs the source tree")
    return path.read_text()


def test_results_block_is_generated_from_bench_results(readme):
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "render_readme.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one(readme):
    blocks = readme.split("```sh\n")[1:3]
    commands = [block.split("```")[0].strip() for block in blocks]
    assert len(commands) == 2
    bench_command, test_command = commands
    assert "fastloop bench" in bench_command
    assert "pytest" in test_command
    # The pytest script: `python -m pytest` puts the checkout's fastloop/
    # first on sys.path, and the tests must exercise the installed wheel.
    assert "-m pytest" not in test_command
    assert test_command in (REPO / ".ci" / "run").read_text()


def test_patch_names_are_the_registry_s_in_its_order(readme):
    from fastloop.patches import RECORDS

    line = next(line for line in readme.splitlines() if line.startswith("Patch names:"))
    listed = line.removeprefix("Patch names:").split(",")
    named = [part.strip(" `;,") for part in listed]
    assert named == [name for name, *_ in RECORDS]


def test_the_kept_read_buffer_bound_is_the_code_s(readme):
    from fastloop.patches.read_buffer import KEPT_AT_MOST

    assert KEPT_AT_MOST % (1 << 20) == 0
    assert f"(at most {KEPT_AT_MOST >> 20} MiB;" in readme


def test_configure_lists_every_setting(readme):
    from fastloop import config

    start = readme.index("fastloop.configure(**settings)")
    listed = readme[start : readme.index("fastloop.stats()", start)]
    for row in config.SETTINGS:
        assert row.name in listed, row.name


def test_write_timing_row_states_the_sampling_gap(readme):
    from fastloop.patches.write_to_fd import SAMPLE_EVERY

    row = next(
        line for line in readme.splitlines() if "`FASTLOOP_WRITE_TIMING`" in line
    )
    assert f"1 call in {SAMPLE_EVERY}," in row


def test_the_preload_log_sample_lists_the_default_set(readme):
    from fastloop.patches import RECORDS

    default = sorted(name for name, _, _, on in RECORDS if on)
    sample = f"fastloop: preload in Worker: patches {', '.join(default)} active"
    assert sample in readme
