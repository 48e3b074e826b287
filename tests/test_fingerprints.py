"""A patch applies only to code the suite has verified (patches.fingerprints)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
import tornado

import fastloop
from fastloop import cli
from fastloop.patches import fingerprints, registry
from fastloop.patches.verified import SUPPORTED, VERIFIED
from tests_support import run_python

PATCHES = registry.records()


def importable() -> list:
    """The patches whose package is installed here (distributed may not be)."""
    return [
        patch
        for patch in PATCHES
        if importlib.util.find_spec(patch.target.partition(".")[0]) is not None
    ]


def in_support_table() -> bool:
    minor = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return ".".join(tornado.version.split(".")[:2]) in SUPPORTED.get(minor, ())


@pytest.mark.skipif(not in_support_table(), reason="not a cell of the support table")
def test_every_cell_of_the_support_table_is_verified_on_purpose():
    """A new CPython or Tornado release fails here until its fingerprints are
    added (python -m fastloop.patches.fingerprints --into ...) and committed."""
    here = fingerprints.recorded_here()
    missing = {
        target: f"{print_} ({label})"
        for target, (print_, label) in here.items()
        if print_ not in VERIFIED.get(target, {})
    }
    assert missing == {}
    assert {t for patch in importable() for t in patch.verifies} == set(here)


def test_every_target_names_a_python_function_here():
    """A misspelt target would make its patch decline everywhere."""
    for patch in importable():
        importlib.import_module(patch.target)
        for target, found in fingerprints.fingerprints(patch.verifies):
            assert found is not None, (patch.name, target)


def test_what_one_patch_relies_on_is_verified_through_anothers_replacement():
    """add_callback relies on _write_to_self, which wakeup replaces: the stock
    function's fingerprint is the one looked up."""
    target = "asyncio.selector_events:BaseSelectorEventLoop._write_to_self"
    assert target in {p.name: p.verifies for p in PATCHES}["add_callback"]
    stock = fingerprints.resolve(target)
    with fastloop.patched(["wakeup"]) as active:
        assert "wakeup" in active
        assert fingerprints.resolve(target) is not stock
        assert registry.check("add_callback") is None


def test_a_fingerprint_covers_the_function_from_decorator_to_closing_bracket(tmp_path):
    source = (
        "import functools\n"
        "\n"
        "@functools.lru_cache\n"
        "def f(x):\n"
        "    return max(\n"
        "        x,\n"
        "        0,\n"
        "    )\n"
        "# after\n"
    )
    module = tmp_path / "fingerprinted.py"

    def print_of(text: str) -> str | None:
        module.write_text(text)
        namespace: dict[str, object] = {}
        exec(compile(text, str(module), "exec"), namespace)
        return fingerprints.fingerprint(namespace["f"].__wrapped__)

    stock = print_of(source)
    assert stock is not None
    assert print_of(source.replace("@functools.lru_cache", "@functools.cache")) != stock
    assert print_of(source.replace("    )\n", "    ) \n")) != stock
    assert print_of(source.replace("# after", "# later")) == stock


def _copy_and_edit(tmp_path: Path, package: Path, file: str, target: str) -> None:
    """Copy ``package`` under tmp_path and add one byte (a trailing space)
    to the second line of ``target``'s source there."""
    copy = tmp_path / package.name
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    function = fingerprints.resolve(target)
    path = copy / file
    lines = path.read_bytes().splitlines(keepends=True)
    index = function.__code__.co_firstlineno  # the line after the def's first
    lines[index] = lines[index].rstrip(b"\n") + b" \n"
    path.write_bytes(b"".join(lines))


PROBE = """
    import json, logging, sys
    import fastloop
    fastloop.install({patches!r})
    import tornado.iostream, tornado.platform.asyncio
    import {module}
    assert {module}.__file__.startswith({copy!r}), {module}.__file__
    print(json.dumps(fastloop.available()))
"""


@pytest.mark.parametrize(
    ("package", "file", "target", "patch", "module"),
    [
        (
            Path(tornado.__file__).parent,
            "iostream.py",
            "tornado.iostream:BaseIOStream.write",
            "write_callback",
            "tornado.iostream",
        ),
        (
            Path(importlib.import_module("asyncio").__file__).parent,
            "selector_events.py",
            "asyncio.selector_events:BaseSelectorEventLoop._read_from_self",
            "wakeup",
            "asyncio.selector_events",
        ),
    ],
    ids=["tornado", "asyncio"],
)
def test_one_byte_added_to_a_replaced_function_declines_its_patch_in_one_line(
    tmp_path, package, file, target, patch, module
):
    _copy_and_edit(tmp_path, package, file, target)
    run = run_python(
        PROBE.format(patches=[patch], module=module, copy=str(tmp_path)),
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert run.returncode == 0, run.stderr
    why = json.loads(run.stdout)[patch]
    label = fingerprints.owner_label(target)
    assert why is not None
    assert why.startswith(f"{target} of {label} is not code the suite has verified")
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert lines == [f"fastloop: patch {patch!r} declined, stock behaviour kept: {why}"]


@pytest.mark.skipif(not in_support_table(), reason="not a cell of the support table")
def test_the_same_copy_unedited_applies(tmp_path):
    """The control: copying the package alone changes no fingerprint."""
    package = Path(tornado.__file__).parent
    shutil.copytree(
        package, tmp_path / "tornado", ignore=shutil.ignore_patterns("__pycache__")
    )
    run = run_python(
        PROBE.format(
            patches=["write_callback"], module="tornado.iostream", copy=str(tmp_path)
        ),
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["write_callback"] is None
    assert run.stderr == ""


@pytest.mark.skipif(not in_support_table(), reason="not a cell of the support table")
def test_doctor_lists_the_releases_verified_this_one_among_them(capsys, monkeypatch):
    monkeypatch.delenv("FASTLOOP", raising=False)
    assert cli.main(["doctor", "--json"]) == 0
    verified = json.loads(capsys.readouterr().out)["verified"]
    assert verified == fingerprints.verified_releases()
    assert ".".join(map(str, sys.version_info[:3])) in verified["CPython"]
    assert tornado.version in verified["Tornado"]
    assert cli.main(["doctor"]) == 0
    line = next(
        x for x in capsys.readouterr().out.splitlines() if x.startswith("verified")
    )
    assert f"Tornado {', '.join(verified['Tornado'])}" in line
