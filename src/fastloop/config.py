"""Parsing of the ``FASTLOOP*`` environment variables.

A bad value must never stop the host application: parsing returns what it
could understand plus a list of problems, each one line naming the
variable, the bad token and the accepted values.  The caller prints them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

ON = frozenset({"1", "true", "all"})
OFF = frozenset({"0", "false"})


@dataclass(frozen=True)
class Problem:
    variable: str
    value: str
    bad: tuple[str, ...]
    accepted: str

    def __str__(self) -> str:
        tokens = ", ".join(repr(t) for t in self.bad)
        return (
            f"fastloop: ignoring {tokens} in {self.variable}={self.value!r}; "
            f"accepted: {self.accepted}"
        )


def parse_patches(
    value: str | None, known: Sequence[str], variable: str = "FASTLOOP"
) -> tuple[frozenset[str] | None, list[Problem]]:
    """Parse ``FASTLOOP``: the patch names to install, ``None`` for the default set.

    Returns an empty set when nothing is to be installed.  Keywords and
    names are case-insensitive and surrounding blanks are ignored; empty
    items of a comma list (``"add_callback,"``) are harmless and skipped.
    """
    accepted = f"1, true, all, 0, false, empty, or a comma list of {', '.join(known)}"
    text = (value or "").strip().lower()
    if text in ON:
        return None, []
    if text in OFF or text == "":
        return frozenset(), []
    chosen: set[str] = set()
    bad: list[str] = []
    for raw in text.split(","):
        token = raw.strip()
        if not token:
            continue
        if token == "all":
            chosen.update(known)
        elif token in known:
            chosen.add(token)
        else:
            bad.append(raw.strip() or raw)
    problems = [Problem(variable, value or "", tuple(bad), accepted)] if bad else []
    return frozenset(chosen), problems


def patches_from_environ(
    environ: Mapping[str, str], known: Sequence[str]
) -> tuple[frozenset[str] | None, list[Problem]]:
    return parse_patches(environ.get("FASTLOOP"), known)
