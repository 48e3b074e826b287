"""Flame graphs of collapsed stacks: SVG with no dependency, PNG with matplotlib.

    fastloop flamegraph loop.collapsed loop.svg [--no-idle] [--title TEXT]

Input is the flamegraph.pl / speedscope "collapsed" format that
``FASTLOOP_PROFILE`` and ``Profile.write`` produce: one line per distinct
stack, ``outer;...;leaf COUNT``; blank lines and ``#`` comments are skipped.
A leaf of ``(idle)`` means the loop thread sat in its selector: it is drawn
grey, and ``--no-idle`` drops it.  Boxes are laid out as flamegraph.pl
does (root at the bottom, children left to right by name); the SVG shows
each frame's samples and share on hover.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path

from fastloop.cli._arguments import Commands

IDLE = "(idle)"
#: Label of the one box that stands in for a frame's too-narrow children.
NARROW = "(narrow frames)"

# SVG geometry, in pixels; a monospace glyph advances 0.6 em.
SVG_WIDTH = 1200
ROW = 17
FONT = 11
CHAR = 0.6 * FONT
MARGIN = 10
TITLE_HEIGHT = 34

# PNG geometry, in inches: DejaVu Sans Mono advances every glyph by 0.602 em.
PNG_FONT = 7.5
PNG_CHAR = 0.602 * PNG_FONT / 72
PNG_ROW = 0.22


@dataclass
class Frame:
    """One node of the merged call tree, with its inclusive sample count."""

    name: str
    total: int = 0
    children: dict[str, Frame] = field(default_factory=dict)


@dataclass
class Box:
    """One rectangle: x and width in shares of all samples, depth in rows."""

    name: str
    x: float
    width: float
    depth: int
    samples: int


def parse_collapsed(text: str) -> dict[tuple[str, ...], int]:
    """Sum counts per stack; the count follows the last space (frames hold spaces)."""
    stacks: dict[tuple[str, ...], int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            raise ValueError(
                f"line {number}: expected 'frame;...;frame COUNT' "
                f"(collapsed stacks, not speedscope JSON): {raw[:80]!r}"
            )
        frames = tuple(stack.rstrip().split(";"))
        stacks[frames] = stacks.get(frames, 0) + int(count)
    return stacks


def build_tree(stacks: dict[tuple[str, ...], int]) -> Frame:
    """Merge stacks sharing a prefix: one frame is one box, however many pass."""
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
        boxes.append(Box(frame.name, x, frame.total / root.total, depth, frame.total))
        narrow = 0
        for name in sorted(frame.children):
            child = frame.children[name]
            share = child.total / root.total
            if share < min_fraction:
                narrow += child.total
                continue
            todo.append((child, x, depth + 1))
            x += share
        if narrow and narrow / root.total >= min_fraction:
            boxes.append(Box(NARROW, x, narrow / root.total, depth + 1, narrow))
    return boxes


def colour(name: str) -> tuple[int, int, int]:
    """A warm flamegraph.pl colour from a stable hash: one frame, one colour."""
    if name == IDLE:
        return (179, 179, 179)
    if name == NARROW:
        return (219, 219, 219)
    import hashlib  # here: the command line's parser must load nothing heavy

    digest = hashlib.blake2b(name.encode(), digest_size=3).digest()
    red = 205 + 50 * digest[0] // 255
    green = 60 + 170 * digest[1] // 255  # not below 60: black labels stay readable
    blue = 55 * digest[2] // 255
    return (red, green, blue)


def fit(name: str, room: float, char: float) -> str:
    """``name`` cut to ``room`` with an ellipsis; empty if under 3 characters fit."""
    fits = int(room / char) - 1  # half a character of margin each side
    if fits < 3:
        return ""
    return name if len(name) <= fits else name[: fits - 1] + "\N{HORIZONTAL ELLIPSIS}"


def _boxes(stacks: dict[tuple[str, ...], int], min_fraction: float) -> list[Box]:
    root = build_tree(stacks)
    if root.total == 0:
        raise ValueError("no samples to draw")
    return layout(root, min_fraction)


def svg(
    stacks: dict[tuple[str, ...], int], title: str, min_fraction: float = 0.005
) -> str:
    """The flame graph as a standalone SVG document (root at the bottom)."""
    from xml.sax.saxutils import escape

    boxes = _boxes(stacks, min_fraction)
    rows = max(box.depth for box in boxes) + 1
    inner = SVG_WIDTH - 2 * MARGIN
    height = TITLE_HEIGHT + rows * ROW + MARGIN
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{SVG_WIDTH}" '
        f'height="{height}" viewBox="0 0 {SVG_WIDTH} {height}" '
        f'font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" '
        f'font-size="{FONT}">',
        f'<rect width="{SVG_WIDTH}" height="{height}" fill="#ffffff"/>',
        f'<text x="{SVG_WIDTH / 2:.1f}" y="22" text-anchor="middle" '
        f'font-size="{FONT + 4}">{escape(title)}</text>',
    ]
    for box in sorted(boxes, key=lambda b: (b.depth, b.x)):
        x = MARGIN + box.x * inner
        y = TITLE_HEIGHT + (rows - 1 - box.depth) * ROW
        width = box.width * inner
        red, green, blue = colour(box.name)
        tip = (
            box.name
            if box.depth == 0
            else f"{box.name} ({box.samples:,} samples, {box.width:.1%})"
        )
        parts.append(
            f"<g><title>{escape(tip)}</title>"
            f'<rect x="{x:.2f}" y="{y}" width="{width:.2f}" height="{ROW - 1}" '
            f'fill="rgb({red},{green},{blue})" rx="1"/>'
        )
        text = fit(box.name, width, CHAR)
        if text:
            parts.append(
                f'<text x="{x + CHAR / 2:.2f}" y="{y + ROW - 5}">{escape(text)}</text>'
            )
        parts.append("</g>")
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def png(
    stacks: dict[tuple[str, ...], int],
    path: str | Path,
    title: str,
    min_fraction: float = 0.005,
) -> None:
    """The flame graph as a PNG; needs matplotlib (the ``bench`` extra)."""
    boxes = _boxes(stacks, min_fraction)
    rows = max(box.depth for box in boxes) + 1
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import PercentFormatter

    fig = Figure(figsize=(12, rows * PNG_ROW + 1.0), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.barh(
        [box.depth for box in boxes],
        [box.width for box in boxes],
        left=[box.x for box in boxes],
        height=0.9,
        color=[tuple(c / 255 for c in colour(box.name)) for box in boxes],
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
    pad = PNG_CHAR / 2 / inches
    for box in boxes:
        text = fit(box.name, box.width * inches, PNG_CHAR)
        if text:
            ax.text(
                box.x + pad,
                box.depth,
                text,
                va="center",
                family="monospace",
                fontsize=PNG_FONT,
                clip_on=True,
            )
    fig.savefig(path)


def add_parser(commands: Commands) -> None:
    """The ``fastloop flamegraph`` options."""
    parser = commands.add_parser(
        "flamegraph",
        help="draw a profile's collapsed stacks as a flame graph (SVG or PNG)",
        description="Draw the collapsed stacks that --profile / FASTLOOP_PROFILE "
        "wrote as a flame graph: OUT.svg needs nothing, OUT.png needs matplotlib.",
    )
    parser.add_argument("profile", type=Path, help="collapsed-stack file")
    parser.add_argument(
        "out", type=Path, help="OUT.svg (no dependency) or OUT.png (needs matplotlib)"
    )
    parser.add_argument("--title", help="default: Flame graph: PROFILE name")
    parser.add_argument(
        "--min-fraction",
        type=float,
        default=0.005,
        help="merge boxes narrower than this share of all samples (default 0.005)",
    )
    parser.add_argument(
        "--no-idle", action="store_true", help=f"drop stacks whose leaf is {IDLE}"
    )


def main(args: argparse.Namespace, top: argparse.ArgumentParser | None = None) -> int:
    """Write the flame graph; one line on stderr and exit 2 on a bad input."""
    suffix = args.out.suffix.lower()
    if suffix not in {".svg", ".png"}:
        return _fail(f"{args.out}: the output must end in .svg or .png")
    if suffix == ".png" and importlib.util.find_spec("matplotlib") is None:
        return _fail(
            "a PNG needs matplotlib: pip install 'tornado-fastloop[bench]' "
            "(or write OUT.svg, which needs nothing)"
        )
    try:
        stacks = parse_collapsed(args.profile.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return _fail(f"{args.profile}: {exc}")
    if args.no_idle:
        stacks = {frames: n for frames, n in stacks.items() if frames[-1] != IDLE}
    if not any(stacks.values()):
        return _fail(f"{args.profile}: no samples to draw")
    title = args.title or f"Flame graph: {args.profile.name}"
    if suffix == ".svg":
        args.out.write_text(svg(stacks, title, args.min_fraction), encoding="utf-8")
    else:
        png(stacks, args.out, title, args.min_fraction)
    samples = sum(stacks.values())
    print(f"wrote {args.out}: {samples:,} samples, {len(stacks):,} stacks")
    return 0


def _fail(message: str) -> int:
    print(f"fastloop flamegraph: {message}", file=sys.stderr)
    return 2
