"""Whole-application tables (bench/http_app.py, bench/dask_app.py), one per scenario.

Rows are the arms, columns the measures: one application name per group,
at most seven columns, and a met/missed mark beside each target.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

#: Whole-application results files: (file, application, scenario), in order.
APPS = (
    ("http_busy.json", "Tornado HTTP server under wrk", "beside a busy thread"),
    ("http_uvloop.json", "Tornado HTTP server under wrk", "idle, asyncio and uvloop"),
    (
        "http_busy_uvloop.json",
        "Tornado HTTP server under wrk",
        "beside a busy thread, asyncio and uvloop",
    ),
    ("dask.json", "dask LocalCluster", "idle"),
    ("dask_idle_aa.json", "dask LocalCluster", "idle, stock against stock too (A/A)"),
    ("dask_idle_long.json", "dask LocalCluster", "idle, two arms, more rounds"),
    ("dask_toggle.json", "dask LocalCluster", "idle, one cluster, patches toggled"),
    ("dask_idle_uvloop.json", "dask LocalCluster", "idle, asyncio and uvloop"),
    (
        "dask_idle_streams.json",
        "dask LocalCluster",
        "idle, with the stream patches; uvloop; direct_to_workers",
    ),
    ("dask_busy.json", "dask LocalCluster", "busy worker"),
    ("dask_busy_uvloop.json", "dask LocalCluster", "busy worker, asyncio and uvloop"),
)

#: The targets the project set itself for whole applications:
#: (results file, arm, measure) -> the ratio against stock to reach.
TARGETS = {
    ("dask_idle_streams.json", "FASTLOOP=1", "actor round trip"): 0.88,
    ("dask_idle_streams.json", "FASTLOOP=1", "1 ms actor call, p50"): 0.95,
    ("dask_idle_streams.json", "FASTLOOP=1", "2,000 tiny tasks"): 1.00,
    ("dask_idle_streams.json", "FASTLOOP=1", "CPU per 1,000 actor calls"): 0.95,
    ("dask_idle_streams.json", "uvloop+FASTLOOP=1", "1 ms actor call, p50"): 0.91,
    ("http_uvloop.json", "FASTLOOP=1", "time per request"): 1.00,
}

NOISE_MARK = "°"


def load(results: Path, name: str) -> dict[str, Any]:
    return dict(json.loads((results / name).read_text()))


def interval(result: dict[str, Any]) -> str:
    noisy = " (noisy)" if result["noisy"] else ""
    return (
        f"**{result['ratio']:.2f}** [{result['low']:.2f}, {result['high']:.2f}]{noisy}"
    )


def arm_of(result: dict[str, Any]) -> str:
    """The arm a result pairs against its baseline, as the tables name it."""
    arm = result.get("b", "patched")
    arm = "FASTLOOP=1" if arm == "patched" else arm
    base = result.get("a", "stock")
    return f"`{arm}`" if base == "stock" else f"`{arm}` against `{base}`"


def anchor(title: str) -> str:
    """The id MkDocs (and GitHub) give a heading: lower case, words joined by -."""
    words = re.sub(r"[^\w\s-]", "", title.lower()).split()
    return "-".join(words)


def verdict(result: dict[str, Any], target: float) -> str:
    """A target's mark: met when the median of the paired ratios reaches it."""
    return "met" if result["ratio"] <= target else "**missed**"


def _cell(result: dict[str, Any]) -> str:
    within = result["low"] <= 1.0 <= result["high"]
    return interval(result) + (f" {NOISE_MARK}" if within else "")


def _scenario(results: Path, name: str, scenario: str) -> list[str]:
    data = load(results, name)
    detail = data.get("load") or data.get("cluster", "")
    measures = list(dict.fromkeys(r["name"] for r in data["results"]))
    arms = list(dict.fromkeys(arm_of(r) for r in data["results"]))
    found = {(arm_of(r), r["name"]): r for r in data["results"]}
    rounds = max(r["rounds"] for r in data["results"])
    lines = [
        f"#### {scenario[:1].upper()}{scenario[1:]}",
        "",
        f"`bench/results/{name}`: CPython {data['python']}; {detail}; {rounds} rounds.",
        "",
        "| arm | " + " | ".join(measures) + " |",
        "|---|" + "---|" * len(measures),
    ]
    for arm in arms:
        cells = [_cell(found[arm, m]) if (arm, m) in found else "" for m in measures]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    marks = [
        f"{measure} of `{arm}` <= {target:.2f}: {verdict(found[f'`{arm}`', measure], target)}"
        for (file, arm, measure), target in TARGETS.items()
        if file == name and (f"`{arm}`", measure) in found
    ]
    if marks:
        lines += ["", "Targets (median against stock): " + "; ".join(marks) + "."]
    if name == "dask_toggle.json":
        lines += ["", _toggle_note(data)]
    return [*lines, ""]


def _toggle_note(toggle: dict[str, Any]) -> str:
    shown = all(r["low"] > 1.0 for r in toggle["results"])
    return (
        "One cluster started under `FASTLOOP=1` (`bench/dask_toggle.py`): blocks of "
        f"{toggle['block']} actor calls with the patches installed, then "
        "uninstalled, in the client's process and in each worker, the order "
        f"alternating pair by pair, for {toggle['seconds']:g} s. Fresh clusters "
        "differ from each other by more than a patch costs; one cluster does not, "
        "but what a process pays once at start-up is left out. To three places: "
        + "; ".join(
            f"{r['name']} {r['ratio']:.3f} [{r['low']:.3f}, {r['high']:.3f}]"
            for r in toggle["results"]
        )
        + (": a cost is shown (every interval is above 1.0)." if shown else ".")
    )


def measured(results: Path, name: str) -> list[tuple[str, str]]:
    """``name`` (CPython 3.11) and each ``NAME_py3.N.json`` a newer CPython
    wrote, oldest first: (file, that CPython's version)."""
    stem = name.removesuffix(".json")
    files = [name] if (results / name).exists() else []
    files += [p.name for p in results.glob(f"{stem}_py*.json")]
    found = [(file, load(results, file)["python"]) for file in files]
    return sorted(found, key=lambda pair: tuple(map(int, pair[1].split("."))))


def render(results: Path) -> list[str]:
    """The whole-application section, grouped by application, then scenario,
    a table per CPython each scenario was measured on."""
    found = [
        (file, label, scenario if file == name else f"{scenario}, CPython {python}")
        for name, label, scenario in APPS
        for file, python in measured(results, name)
    ]
    lines = [
        "Switched only by `FASTLOOP` (or the named setting) in paired subprocesses, "
        "time with the arm over stock's (lower is better; `bench/http_app.py`, "
        "`bench/dask_app.py`). `FASTLOOP=1` is the default set; `all,...` adds "
        "opt-in patches to it. The load generators (wrk, and the dask client with "
        "its scheduler) run on CPU 1, the idle servers on CPU 0, a busy server on "
        f"every core. {NOISE_MARK} marks an interval that contains 1.0: no "
        "difference shown.",
        "",
    ]
    application = None
    for name, label, scenario in found:
        if label != application:
            application = label
            lines += [f"### {label}", ""]
        lines += _scenario(results, name, scenario)
    return lines


def figure(results: Path, name: str, arm: str, measure: str) -> dict[str, Any]:
    """One whole-application result, by file, arm (against stock) and measure."""
    return next(
        r
        for r in load(results, name)["results"]
        if r.get("a", "stock") == "stock"
        and ("FASTLOOP=1" if r.get("b", "patched") == "patched" else r["b"]) == arm
        and r["name"] == measure
    )


def idle_apps(results: Path) -> list[str]:
    """An idle Tornado application and an idle Jupyter Server: CPU and
    wake-ups per arm, a table per CPython (``bench/idle_apps.py``)."""
    from _render_gil import _ratio

    lines: list[str] = []
    for name, python in measured(results, "idle_apps.json"):
        data = load(results, name)
        server = data.get("jupyter_server")
        lines += [
            f"`bench/results/{name}`: CPython {python}, Tornado {data['tornado']}"
            + (f", Jupyter Server {server}" if server else "")
            + f"; {data['rounds']} interleaved rounds of {data['window_s']:g} s "
            f"windows after {data['settle_s']:g} s; medians, CPU as a percentage "
            "of one core and wake-ups (voluntary context switches of all threads) "
            "a second; fastloop's threads: each one's wake-ups a second.",
            "",
            "| application | arm | CPU / wake-ups | CPU vs stock | wake-ups vs stock "
            "| fastloop's threads |",
            "|---|---|---|---|---|---|",
        ]
        for row in data["rows"].values():
            threads = ", ".join(
                f"`{thread}` {rate:.1f}"
                for thread, rate in row["fastloop_wakeups_per_s"].items()
            )
            lines.append(
                f"| {row['application']} | {row['arm']} "
                f"| {row['cpu_percent']:.3f}% / {row['wakeups_per_s']:.1f} "
                f"| {_ratio(row['cpu_percent_vs_stock']) or 'none: stock at 0'} "
                f"| {_ratio(row['wakeups_per_s_vs_stock']) or 'none: stock at 0'} "
                f"| {threads or 'none'} |"
            )
        lines.append("")
    return lines[:-1]
