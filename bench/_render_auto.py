"""Auto mode's price where it runs: bench/handover_signal.py and bench/auto_machines.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _render_apps import load
from _render_gil import _ms, _ratio

RESULTS = Path(__file__).parent / "results"


def handover_signal() -> list[str]:
    """Progress lost and CPU time gained per interval, per machine and threads."""
    data = load(RESULTS, "handover_signal.json")
    intervals = list(data["results"][0]["losses"])[:-1]  # 5000 us is the base
    lines = [
        f"`bench/handover_signal.py`, {data['rounds']} rounds of "
        f"{data['window_s']:g} s windows; against CPython's 5 ms, the threads' "
        "progress lost / their CPU time's change:",
        "",
        "| machine | threads | " + " | ".join(f"{i} us" for i in intervals) + " |",
        "|---|---|" + "---|" * len(intervals),
    ]
    for result in data["results"]:
        cells = [
            f"{result['losses'][i]['progress_loss']:+.3f} / "
            f"{result['losses'][i]['cpu_change']:+.3f}"
            for i in intervals
        ]
        lines.append(
            f"| {result['machine']} | {result['threads']} | " + " | ".join(cells) + " |"
        )
    return lines


def machines() -> list[str]:
    """Today's auto on each variant of this machine, against the budget."""
    lines = []
    for name in ("auto_machines.json", "auto_machines_quota.json"):
        data = load(RESULTS, name)
        lines += [
            f"`bench/results/{name}`: {data['rounds']} interleaved rounds per "
            f"machine and thread count, {data['seconds']:g} s each; arms: "
            + ", ".join(data["arms"])
            + f"; budget: compute >= {data['budget']:g} of stock.",
            "",
            "| machine | task threads | auto's compute | held | auto's p50 "
            "| best fixed within the budget | its compute | its p50 | budget |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for result in data["results"]:
            lines.append(_machine_row(result))
        lines.append("")
    return lines[:-1]


def _machine_row(result: dict[str, Any]) -> str:
    verdict, rows = result["verdict"], result["rows"]
    best = verdict["best_fixed_within_budget"]
    held = sorted(set(verdict.get("auto_held_us", [])))
    auto = rows["auto"]
    return (
        f"| {result['machine']} | {result['threads']} "
        f"| {_ratio(auto.get('compute_per_s_vs_stock'))} "
        f"| {', '.join(f'{h:g} us' for h in held)} | {_ms(auto['p50_s'])} "
        f"| {best or 'none'} "
        f"| {_ratio(rows[best].get('compute_per_s_vs_stock')) if best else ''} "
        f"| {_ms(rows[best]['p50_s']) if best else ''} "
        f"| {'held' if verdict['auto_holds_budget'] else 'broken'} |"
    )
