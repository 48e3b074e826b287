"""``fastloop.report()``: a readable table of a snapshot, read from the schema.

Blocks follow the snapshot's declarations in order: a ``Heading`` starts
one, and each figure with a label, each ``Line``, adds its line while the
figure its ``when`` names is not zero.  A block whose patch is not active
says so (a patch not installed is not an idle zero).
"""

from __future__ import annotations

from typing import Any

from fastloop.telemetry.fields import Derived, Field, Heading, Line, Part, Section
from fastloop.telemetry.schema import Snapshot


class _Block:
    def __init__(self, title: str, heading: Heading | None, section: Section) -> None:
        self.title = title
        self.heading = heading
        self.section = section
        self.lines: list[str] = []


def render(snapshot: Snapshot) -> str:
    """The report of ``snapshot``."""
    lines = ["fastloop report", ""]
    if snapshot.installed:
        lines.append(f"patches active     {', '.join(snapshot.installed)}")
    else:
        lines.append(
            "patches active     none: no patch is installed in this process "
            "(set FASTLOOP=1 or call fastloop.install()), so no patch counter "
            "can move"
        )
    blocks: list[_Block] = []
    _walk(snapshot, blocks)
    for block in blocks:
        heading = block.heading
        if heading is not None and heading.shown and not heading.shown(block.section):
            continue
        lines += ["", *_marked(block, snapshot.installed)]
    return "\n".join(lines)


def _walk(section: Section, blocks: list[_Block]) -> None:
    for item in type(section).declared:
        if isinstance(item, Heading):
            title = item.title if isinstance(item.title, str) else item.title(section)
            blocks.append(_Block(title, item, section))
        elif isinstance(item, Part):
            _walk(getattr(section, item.name), blocks)
        elif blocks:
            line = _line(item, section)
            if line is not None:
                blocks[-1].lines.append(line)


def _line(item: Any, section: Section) -> str | None:
    if isinstance(item, Derived) and item.line is not None:
        return item.line(section)
    if not isinstance(item, Field | Line) or item.label is None:
        return None
    if item.when is not None and not getattr(section, item.when):
        return None
    text = item.show(section) if item.show is not None else item.text(section)
    return f"  {item.label:<16} {text}"


def _marked(block: _Block, installed: tuple[str, ...]) -> list[str]:
    """The block's lines, marked when its patch is not active here."""
    heading = block.heading
    if heading is None or heading.patch is None or heading.patch in installed:
        return [block.title, *block.lines]
    if heading.counted and getattr(block.section, heading.counted):
        return [f"{block.title} (not active now; counted while it was)", *block.lines]
    return [
        block.title,
        f"  {heading.patch} is not active in this process: nothing counted",
    ]
