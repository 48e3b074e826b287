"""The README and the handbook: figures generated, names the code's, links alive.

What a page states by hand is checked here against the code; what it
states from the code or bench/results/ is rendered by bench/render_docs.py,
and the first test fails when a page differs from what that renders.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests_support import bench_module

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


@pytest.fixture
def readme() -> str:
    path = REPO / "README.md"
    if not path.exists():
        pytest.skip("needs the source tree")
    return path.read_text()


def pages() -> dict[str, str]:
    """README.md and every handbook page, by path from the repository root."""
    if not DOCS.exists():
        pytest.skip("needs the source tree")
    found = {"README.md": (REPO / "README.md").read_text()}
    for path in sorted(DOCS.glob("*.md")):
        found[str(path.relative_to(REPO))] = path.read_text()
    return found


def page(name: str) -> str:
    path = DOCS / name
    if not path.exists():
        pytest.skip("needs the source tree")
    return path.read_text()


def test_every_generated_block_is_what_the_code_and_results_render():
    if not DOCS.exists():
        pytest.skip("needs the source tree")
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "render_docs.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_readme_is_a_front_page(readme):
    lines = readme.splitlines()
    assert len(lines) <= 150
    assert any("FASTLOOP=1" in line for line in lines[:40])


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one(readme):
    commands = [line for line in readme.splitlines() if line.startswith("python3 -m")]
    assert len(commands) == 2
    bench_command, test_command = commands
    assert bench_command.endswith("fastloop bench")
    assert test_command.endswith("pytest")
    # The pytest script: `python -m pytest` puts the checkout's fastloop/
    # first on sys.path, and the tests must exercise the installed wheel.
    assert "-m pytest" not in test_command
    assert test_command in (REPO / ".ci" / "run").read_text()


LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(text: str) -> set[str]:
    """The ids MkDocs gives a page's headings (toc's default slugify)."""
    headings = re.findall(r"(?m)^#{1,6} (.+)$", text)
    return {
        "-".join(re.sub(r"[^\w\s-]", "", h.strip().lower()).split()) for h in headings
    }


def test_every_relative_link_reaches_a_file_and_its_anchor():
    texts = pages()
    for name, text in texts.items():
        base = (REPO / name).parent
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = (base / path).resolve() if path else REPO / name
            assert resolved.exists(), f"{name}: {target}"
            if anchor and resolved.suffix == ".md":
                assert anchor in _anchors(resolved.read_text()), f"{name}: {target}"


# `bench/x.py`, `fastloop/patches/x.py`, `bench/results/x.json` and the like.
NAMED_PATH = re.compile(
    r"`((?:bench|fastloop|tests|docs|\.ci)/[\w./-]+?"
    r"\.(?:py|json|txt|png|svg|md|collapsed))`"
)
SOURCE_COMMENT = re.compile(
    r"\b((?:bench|fastloop|tests|docs)/[\w/-]+\.(?:py|json|md))"
)


def test_every_file_a_page_names_exists():
    for name, text in pages().items():
        for path in NAMED_PATH.findall(text):
            assert (REPO / path).exists(), f"{name} names {path}"


def test_every_file_the_code_points_to_exists():
    """Comments and docstrings point to results and design notes that exist
    (a test once cited a DESIGN.md the repository never held)."""
    if not DOCS.exists():
        pytest.skip("needs the source tree")
    for folder in ("fastloop", "tests", "bench"):
        for source in (REPO / folder).rglob("*.py"):
            if source == Path(__file__):
                continue  # its patterns' examples name no file
            for path in SOURCE_COMMENT.findall(source.read_text()):
                if "*" in path or "<" in path:
                    continue
                assert (REPO / path).exists(), f"{source.relative_to(REPO)}: {path}"
            assert "DESIGN.md" not in source.read_text(), source


def test_pointers_to_the_design_notes_reach_their_anchor():
    anchors = _anchors(page("design.md"))
    for folder in ("fastloop", "bench"):
        for source in (REPO / folder).rglob("*.py"):
            for anchor in re.findall(r"docs/design\.md#([\w-]+)", source.read_text()):
                assert anchor in anchors, f"{source.relative_to(REPO)}: #{anchor}"


def test_the_design_notes_name_constants_the_code_has():
    text = page("design.md")
    modules = {
        "_switch_policy.py": "fastloop.patches._switch_policy",
        "_switch_controller.py": "fastloop.patches._switch_controller",
        "_callback_batches.py": "fastloop.patches._callback_batches",
        "write_to_fd.py": "fastloop.patches.write_to_fd",
        "changes.py": "fastloop.patches.changes",
    }
    named = re.findall(r"`([A-Z][A-Z0-9_]{3,}|PerObject)`", text)
    assert named
    for constant in named:
        owners = [
            module
            for module in modules.values()
            if hasattr(importlib.import_module(module), constant)
        ]
        assert owners, f"docs/design.md names {constant}, which no module has"


def test_configure_lists_every_setting():
    from fastloop import config

    api = page("api.md")
    start = api.index("fastloop.configure(**settings)")
    listed = api[start : api.index("fastloop.stats()", start)]
    for row in config.SETTINGS:
        assert row.name in listed, row.name


def test_the_api_summary_names_public_functions():
    import fastloop

    for call, _ in bench_module("_render_code").API:
        assert call.split("(")[0] in fastloop.__all__, call


def test_write_timing_row_states_the_sampling_gap():
    from fastloop.patches.write_to_fd import SAMPLE_EVERY

    row = next(
        line
        for line in page("adopting.md").splitlines()
        if line.startswith("| `FASTLOOP_WRITE_TIMING`")
    )
    assert f"1 call in {SAMPLE_EVERY}," in row


def test_the_preload_log_sample_lists_the_default_set():
    from fastloop.patches import registry

    default = ", ".join(sorted(registry.default_set()))
    sample = f"fastloop: preload in Worker: patches {default} active"
    assert sample in page("adopting.md")


def test_patch_names_are_the_registry_s_in_its_order():
    from fastloop.patches import RECORDS

    line = next(
        line for line in page("api.md").splitlines() if line.startswith("Patch names:")
    )
    listed = line.removeprefix("Patch names:").split(".")[0].split(",")
    named = [part.strip(" `;,") for part in listed]
    assert named == [name for name, *_ in RECORDS]


def test_parse_patches_example_adds_an_opt_in_patch():
    """config's docstring once said all,switchinterval adds an opt-in patch."""
    from fastloop import config
    from fastloop.patches import RECORDS

    opt_in = {name for name, _, _, on in RECORDS if not on}
    examples = re.findall(r"``(?:all|1),(\w+)``", config.parse_patches.__doc__ or "")
    assert examples
    assert set(examples) <= opt_in


def test_every_patch_says_what_it_replaces():
    """Each Swap an applicable patch makes is named in its ``replaces``."""
    from fastloop.patches import registry
    from fastloop.patches.changes import Swap

    for patch in registry.records():
        if importlib.util.find_spec(patch.target.partition(".")[0]) is None:
            continue  # distributed's, where it is not installed
        module = importlib.import_module(patch.target)
        if registry.check(patch.name) is not None:
            continue
        for change in patch.apply(module):
            if isinstance(change, Swap):
                assert change.attribute in patch.replaces, (patch.name, change)


def test_the_kept_read_buffer_bound_is_the_code_s():
    from fastloop.patches.read_buffer import KEPT_AT_MOST

    assert KEPT_AT_MOST % (1 << 20) == 0
    assert f"(at most {KEPT_AT_MOST >> 20} MiB;" in page("patches.md")


def test_every_patch_has_its_paragraph():
    from fastloop.patches import RECORDS

    text = page("patches.md") + page("gil.md")
    for name, *_ in RECORDS:
        assert f"**`{name}`" in text, f"no paragraph for {name}"
