"""fastloop flamegraph: SVG with no dependency, PNG through the bench extra."""

from __future__ import annotations

import importlib.util
import xml.etree.ElementTree as ET

import pytest

from fastloop import cli
from fastloop.cli import flamegraph

COLLAPSED = """\
thread:MainThread;main (app.py:1);handler (app.py:10);build_report (app.py:20) 30
thread:MainThread;main (app.py:1);handler (app.py:10) 10
thread:MainThread;(idle) 60
thread:MainThread;main (app.py:1);tiny (app.py:5) 1
"""
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def profile(tmp_path):
    path = tmp_path / "loop.collapsed"
    path.write_text(COLLAPSED)
    return path


def boxes(path) -> dict[str, str]:
    """Tooltip -> rect width, for every box of the SVG."""
    root = ET.parse(path).getroot()
    return {
        group.find(f"{SVG}title").text: group.find(f"{SVG}rect").get("width")
        for group in root.iter(f"{SVG}g")
    }


def test_svg_has_a_box_per_frame_with_its_samples(profile, tmp_path, capsys):
    out = tmp_path / "loop.svg"
    args = ["flamegraph", str(profile), str(out), "--min-fraction", "0.02"]
    assert cli.main(args) == 0
    assert capsys.readouterr().out == f"wrote {out}: 101 samples, 4 stacks\n"
    found = boxes(out)
    assert "(idle) (60 samples, 59.4%)" in found
    assert "handler (app.py:10) (40 samples, 39.6%)" in found
    assert "build_report (app.py:20) (30 samples, 29.7%)" in found
    # 1 sample in 101 is under 2%: merged, not drawn alone.
    assert not any(tip.startswith("tiny") for tip in found)
    assert found["all (101 samples)"] == "1180.00"


def test_no_idle_drops_the_selector_time(profile, tmp_path):
    out = tmp_path / "loop.svg"
    assert cli.main(["flamegraph", str(profile), str(out), "--no-idle"]) == 0
    found = boxes(out)
    assert not any(tip.startswith("(idle)") for tip in found)
    assert "all (41 samples)" in found


def test_labels_are_escaped_for_xml(tmp_path):
    profile = tmp_path / "odd.collapsed"
    profile.write_text("thread:T;<module> (a&b.py:1) 5\n")
    out = tmp_path / "odd.svg"
    assert cli.main(["flamegraph", str(profile), str(out)]) == 0
    assert "<module> (a&b.py:1) (5 samples, 100.0%)" in boxes(out)


@pytest.mark.parametrize(
    ("text", "name", "message"),
    [
        (COLLAPSED, "out.pdf", "the output must end in .svg or .png"),
        ('{"profiles": []}\n', "out.svg", "not speedscope JSON"),
        ("thread:T;(idle) 3\n", "out.svg", "no samples to draw"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, text, name, message):
    profile = tmp_path / "p.collapsed"
    profile.write_text(text)
    args = ["flamegraph", str(profile), str(tmp_path / name), "--no-idle"]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("fastloop flamegraph: ") and err.count("\n") == 1
    assert message in err


def test_png_without_matplotlib_names_the_extra(profile, tmp_path, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name: None if name == "matplotlib" else real(name),
    )
    assert cli.main(["flamegraph", str(profile), str(tmp_path / "p.png")]) == 2
    assert "pip install 'tornado-fastloop[bench]'" in capsys.readouterr().err


def test_png_with_matplotlib(profile, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "p.png"
    assert cli.main(["flamegraph", str(profile), str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_parse_collapsed_sums_repeated_stacks():
    assert flamegraph.parse_collapsed("a;b 2\n# note\n\na;b 3\n") == {("a", "b"): 5}
