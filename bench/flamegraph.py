"""Render a flame graph PNG from a collapsed-stack profile, for the README.

    python bench/flamegraph.py PROFILE.collapsed OUT.png [--title TEXT]
        [--min-fraction 0.005] [--no-idle]

Input is the flamegraph.pl / speedscope "collapsed" format: one line per
distinct stack, ``outer;...;leaf COUNT``.  Blank lines and ``#`` comments are
skipped.  A leaf of ``(idle)`` means the loop thread sat in its selector; it
is drawn grey, and ``--no-idle`` drops it.  Needs matplotlib only.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

IDLE = "(idle)"
#: Label of the one box that stands in for a frame's too-narrow children.
NARROW = "(narrow frames)"
FONT_SIZE = 7.5
#: DejaVu Sans Mono advances every glyph by 0.602 em: labels can be cut exactly.
CHAR_INCHES = 0.602 * FONT_SIZE / 72
ROW_INCHES = 0.22


@dataclass
class Frame:
    """One node of the merged call tree, with its inclusive sample count."""

    name: str
    total: int = 0
    children: dict[str, Frame] = field(default_factory=dict)


@dataclass
class Box:
    """One rectangle to draw: x and width in shares of all samples, depth in rows."""

    name: str
    x: float
    width: float
    depth: int


def parse_collapsed(text: str) -> dict[tuple[str, ...], int]:
    """Sum counts per stack; the count follows the last space since frames hold spaces."""
    stacks: dict[tuple[str, ...], int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            raise ValueError(
                f"line {number}: expected 'frame;...;frame COUNT': {raw!r}"
            )
        frames = tuple(stack.rstrip().split(";"))
        stacks[frames] = stacks.get(frames, 0) + int(count)
    return stacks


def build_tree(stacks: dict[tuple[str, ...], int]) -> Frame:
    """Merge stacks sharing a prefix, so one frame is one box however many stacks pass through it."""
    root = Frame("all")
    for frames, count in stacks.items():
        root.total += count
        node = root
        for name in frames:
            node = node.children.setdefault(name, Frame(name))
            node.total += count
    root.name = f"all ({root.total:,} samples)"
    return root


def layout(root: Frame, min_fraction: float) -> list[Box]:
    """Place children left to right in name order, as flamegraph.pl does.

    Children narrower than ``min_fraction`` are summed into one NARROW box
    after their siblings, so the parent keeps its full width and nothing
    shifts.  Iterative, so deep stacks cannot hit the recursion limit.
    """
    boxes: list[Box] = []
    todo = [(root, 0.0, 0)]
    while todo:
        frame, x, depth = todo.pop()
        boxes.append(Box(frame.name, x, frame.total / root.total, depth))
        narrow = 0.0
        for name in sorted(frame.children):
            share = frame.children[name].total / root.total
            if share < min_fraction:
                narrow += share
                continue
            todo.append((frame.children[name], x, depth + 1))
            x += share
        if narrow and narrow >= min_fraction:
            boxes.append(Box(NARROW, x, narrow, depth + 1))
    return boxes


def colour(name: str) -> tuple[float, float, float]:
    """Warm flamegraph.pl-style colour from a stable hash: same frame, same colour, every run."""
    if name == IDLE:
        return (0.70, 0.70, 0.70)
    if name == NARROW:
        return (0.86, 0.86, 0.86)
    digest = hashlib.blake2b(name.encode(), digest_size=3).digest()
    red = 205 + 50 * digest[0] / 255
    green = 60 + 170 * digest[1] / 255  # not below 60: black labels stay readable
    blue = 55 * digest[2] / 255
    return (red / 255, green / 255, blue / 255)


def label(name: str, inches: float) -> str:
    """The name cut to fit ``inches`` with an ellipsis, or nothing if under three characters fit."""
    fits = int(inches / CHAR_INCHES) - 1  # keep half a character of margin each side
    if fits < 3:
        return ""
    return name if len(name) <= fits else name[: fits - 1] + "\N{HORIZONTAL ELLIPSIS}"


def render(
    stacks: dict[tuple[str, ...], int],
    path: str | Path,
    title: str,
    min_fraction: float = 0.005,
) -> None:
    """Draw the flame graph, root at the bottom, and save it as a PNG."""
    root = build_tree(stacks)
    if root.total == 0:
        raise ValueError("no samples to draw")
    boxes = layout(root, min_fraction)
    rows = max(box.depth for box in boxes) + 1
    # Imported here so that parse_collapsed() needs no matplotlib.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import PercentFormatter

    fig = Figure(figsize=(12, rows * ROW_INCHES + 1.0), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.barh(
        [box.depth for box in boxes],
        [box.width for box in boxes],
        left=[box.x for box in boxes],
        height=0.9,
        color=[colour(box.name) for box in boxes],
        edgecolor="white",
        linewidth=0.4,
    )
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.5, rows - 0.5)
    ax.set_yticks([])
    ax.xaxis.set_major_formatter(PercentFormatter(xmax=1))
    ax.set_xlabel("share of samples")
    ax.set_title(title)
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    # Labels are cut to the axes' final width, so place them after the layout.
    inches = ax.get_position().width * fig.get_figwidth()
    pad = CHAR_INCHES / 2 / inches
    for box in boxes:
        text = label(box.name, box.width * inches)
        if text:
            ax.text(
                box.x + pad,
                box.depth,
                text,
                va="center",
                family="monospace",
                fontsize=FONT_SIZE,
                clip_on=True,
            )
    fig.savefig(path)


def main(argv: list[str] | None = None) -> int:
    """Command line; takes argv and returns the exit status so a test can call it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path, help="collapsed-stack file")
    parser.add_argument("out", type=Path, help="PNG to write")
    parser.add_argument("--title", help="default: Flame graph: PROFILE name")
    parser.add_argument(
        "--min-fraction",
        type=float,
        default=0.005,
        help="hide boxes narrower than this share of all samples (default 0.005)",
    )
    parser.add_argument(
        "--no-idle", action="store_true", help=f"drop stacks whose leaf is {IDLE}"
    )
    args = parser.parse_args(argv)
    stacks = parse_collapsed(args.profile.read_text())
    if args.no_idle:
        stacks = {frames: n for frames, n in stacks.items() if frames[-1] != IDLE}
    if not any(stacks.values()):
        parser.error(f"{args.profile}: no samples to draw")
    title = args.title or f"Flame graph: {args.profile.name}"
    render(stacks, args.out, title, args.min_fraction)
    print(f"wrote {args.out}: {sum(stacks.values()):,} samples, {len(stacks):,} stacks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
