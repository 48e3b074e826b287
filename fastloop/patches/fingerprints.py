"""Fingerprints: a patch applies only to code the test suite has passed on.

A patch's ``check()`` looks at the names the code it replaces uses; a
release that keeps those names and changes the logic would pass it.  So
each patch also lists (``Patch.verifies``) the Python functions it replaces
and those it relies on, as ``"module:Qualified.name"``, and the registry
applies it only where every one of them has a fingerprint in ``verified``'s
table, which is made by running this module in each environment of the
support matrix after the suite passed there::

    python -m fastloop.patches.fingerprints --into fastloop/patches/verified.py

A fingerprint is the CRC-32 of the function's source lines as they are on
disk (decorators to its last line): the same for one Tornado release on
every CPython, and different after any edit of the function.  CRC-32 and
not a cryptographic hash: ``zlib`` is loaded at start-up already (where
``hashlib`` costs milliseconds), and the table guards against drift, not
against an adversary; a CRC-32 catches every change of one to four bytes.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable, Iterable, Iterator
from types import CodeType
from typing import Any

#: Who publishes each function's source: the top-level package, its name in
#: the table and the attribute that holds its version; anything else is the
#: standard library, of the running CPython.
PUBLISHERS = {
    "tornado": ("Tornado", "version"),
    "distributed": ("distributed", "__version__"),
}
STDLIB = "CPython"

Lookup = Callable[[Any, str], Any]


def owner_label(target: str) -> str:
    """Which release a function's source comes with, e.g. 'Tornado 6.6.1'."""
    package = target.partition(":")[0].split(".")[0]
    if package in PUBLISHERS:
        publisher, attribute = PUBLISHERS[package]
        version = getattr(sys.modules.get(package), attribute, "?")
        return f"{publisher} {version}"
    return f"{STDLIB} {'.'.join(map(str, sys.version_info[:3]))}"


def _stock_attribute(owner: Any, name: str) -> Any:
    return owner.__dict__.get(name)


def resolve(target: str, attribute: Lookup = _stock_attribute) -> Any:
    """The function ``"module:Class.name"`` names (None if it is not there).

    ``attribute(owner, name)`` reads each step; the registry passes one that
    sees through another patch's replacement to the stock function.  Only
    modules already imported are looked in: this runs inside import hooks.
    """
    module_name, _, qualname = target.partition(":")
    found: Any = sys.modules.get(module_name)
    for name in qualname.split("."):
        if found is None:
            return None
        found = attribute(found, name)
    return found


def _last_line(code: CodeType) -> int:
    """The last source line of ``code`` and the code nested in it.

    Where each instruction's expression ends (``co_positions``), not the line
    it starts on: a statement's last line (a closing bracket) runs none.
    """
    ends = [end for _, end, _, _ in code.co_positions() if end is not None]
    nested = [_last_line(c) for c in code.co_consts if isinstance(c, CodeType)]
    return max([code.co_firstlineno, *ends, *nested])


def fingerprint(
    function: Any, sources: dict[str, list[bytes]] | None = None
) -> str | None:
    """The function's fingerprint, or None without Python source to read.

    Read once per code object (``_FOUND``): ``install()`` after
    ``uninstall()`` costs no file read.  ``sources`` caches each file's
    lines across the calls of one check.
    """
    code = getattr(function, "__code__", None)
    if not isinstance(code, CodeType):
        return None
    known = _FOUND.get(id(code))
    if known is not None and known[0] is code:
        return known[1]
    found = _read(code, {} if sources is None else sources)
    _FOUND[id(code)] = (code, found)
    return found


#: id(code) -> (the code object, kept so that its id is not reused; its
#: fingerprint, None without source to read).
_FOUND: dict[int, tuple[CodeType, str | None]] = {}


def _read(code: CodeType, sources: dict[str, list[bytes]]) -> str | None:
    lines = sources.get(code.co_filename)
    if lines is None:
        try:
            with open(code.co_filename, "rb") as file:
                lines = file.read().splitlines(keepends=True)
        except OSError:
            return None
        sources[code.co_filename] = lines
    first, last = code.co_firstlineno, _last_line(code)
    if not 0 < first <= last <= len(lines):
        return None
    return f"{zlib.crc32(b''.join(lines[first - 1 : last])):08x}"


def fingerprints(
    targets: Iterable[str], attribute: Lookup = _stock_attribute
) -> Iterator[tuple[str, str | None]]:
    """Each target with its fingerprint here (None: not found or no source)."""
    sources: dict[str, list[bytes]] = {}
    for target in targets:
        yield target, fingerprint(resolve(target, attribute), sources)


def unverified(
    targets: Iterable[str], attribute: Lookup = _stock_attribute
) -> str | None:
    """None if every target's code here is one the suite passed on, else the
    one-line reason (the first function that differs, and its release)."""
    from fastloop.patches.verified import VERIFIED

    for target, found in fingerprints(targets, attribute):
        if found is None:
            return (
                f"{target} has no Python source here to verify ({owner_label(target)})"
            )
        if found not in VERIFIED.get(target, {}):
            return (
                f"{target} of {owner_label(target)} is not code the suite has "
                f"verified (fingerprint {found})"
            )
    return None


def verified_releases() -> dict[str, list[str]]:
    """Every release the table holds fingerprints from, by publisher."""
    from fastloop.patches.verified import VERIFIED

    releases: dict[str, set[str]] = {STDLIB: set()}
    releases.update((publisher, set()) for publisher, _ in PUBLISHERS.values())
    for known in VERIFIED.values():
        for labels in known.values():
            for label in labels:
                publisher, _, version = label.partition(" ")
                releases.setdefault(publisher, set()).add(version)
    return {
        publisher: sorted(versions, key=_version_key)
        for publisher, versions in releases.items()
    }


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else -1 for part in version.split("."))


def recorded_here() -> dict[str, tuple[str, str]]:
    """Every patch's targets as this environment has them: target ->
    (fingerprint, release), with every patch taken off for the look."""
    import importlib

    from fastloop.patches import registry

    patches = registry.records()
    found: dict[str, tuple[str, str]] = {}
    with registry.suspended():
        for patch in patches:
            try:
                importlib.import_module(patch.target)
            except ImportError:  # distributed, where it is not installed
                continue
            for target, print_ in fingerprints(patch.verifies):
                if print_ is None:
                    raise LookupError(f"{target}: not found, or no source to read")
                found[target] = (print_, owner_label(target))
    return found


def merged(
    table: dict[str, dict[str, tuple[str, ...]]], here: dict[str, tuple[str, str]]
) -> dict[str, dict[str, tuple[str, ...]]]:
    """``table`` with this environment's fingerprints added."""
    result = {target: dict(known) for target, known in table.items()}
    for target, (print_, label) in here.items():
        labels = set(result.setdefault(target, {}).get(print_, ())) | {label}
        result[target][print_] = tuple(sorted(labels, key=_label_key))
    return result


def _label_key(label: str) -> tuple[str, tuple[int, ...]]:
    publisher, _, version = label.partition(" ")
    return publisher, _version_key(version)


def render(table: dict[str, dict[str, tuple[str, ...]]], header: str) -> str:
    """The table as the source of ``verified.py``, one label a line."""
    lines = [
        header.rstrip("\n"),
        "",
        "VERIFIED: dict[str, dict[str, tuple[str, ...]]] = {",
    ]
    for target in sorted(table):
        lines.append(f'    "{target}": {{')
        for print_, labels in sorted(table[target].items(), key=lambda kv: kv[1]):
            lines.append(f'        "{print_}": (')
            lines.extend(f'            "{label}",' for label in labels)
            lines.append("        ),")
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(
        prog="python -m fastloop.patches.fingerprints",
        description="Print this environment's fingerprints of every patch's "
        "targets; with --into, add them to that verified.py (after the test "
        "suite passed here).",
    )
    parser.add_argument("--into", type=Path, help="the verified.py to add them to")
    args = parser.parse_args(argv)
    here = recorded_here()
    if args.into is None:
        for target, (print_, label) in sorted(here.items()):
            print(f"{print_}  {label:<16} {target}")
        return 0
    namespace: dict[str, Any] = {}
    source = args.into.read_text()
    exec(compile(source, str(args.into), "exec"), namespace)
    header = source[: source.index("VERIFIED:")]
    args.into.write_text(render(merged(namespace["VERIFIED"], here), header))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
