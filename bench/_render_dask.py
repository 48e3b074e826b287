"""The dask page's figures: bench/dask_gil_contention.py's agreement and cost."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from _render_gil import _ms, _ratio, _threads

RESULTS = Path(__file__).parent / "results"


def _load() -> dict[str, Any]:
    with open(RESULTS / "dask_gil_contention.json", encoding="utf-8") as results:
        data: dict[str, Any] = json.load(results)
    return data


def gil_agreement() -> list[str]:
    """gilknocker's and fastloop's figure per monitor update, per scenario."""
    data = _load()
    lines = [
        f"`bench/dask_gil_contention.py`, {data['rounds']} interleaved rounds of "
        f"{data['seconds']:g} s per arm (distributed {data['distributed']}); one "
        "worker, 1 ms actor calls; both figures read at every update of dask's "
        "monitor in the arm where both run:",
        "",
        "| task threads | monitor updates | gilknocker, mean | fastloop, mean "
        "| difference, mean | correlation |",
        "|---|---|---|---|---|---|",
    ]
    pooled = []
    for scenario in data["scenarios"]:
        agreed = scenario["agreement"]
        pooled += agreed["pairs"]
        lines.append(_agreement_row(str(scenario["threads"]), agreed["pairs"]))
    lines.append(_agreement_row("all together", pooled))
    return lines


def _agreement_row(name: str, pairs: list[list[float]]) -> str:
    knocks, mine = [p[0] for p in pairs], [p[1] for p in pairs]
    correlation = statistics.correlation(knocks, mine)
    difference = statistics.fmean(m - k for k, m in pairs)
    return (
        f"| {name} | {len(pairs)} | {statistics.fmean(knocks):.3f} "
        f"| {statistics.fmean(mine):.3f} | {difference:+.3f} | {correlation:.2f} |"
    )


def gil_cost() -> list[str]:
    """Each arm's 1 ms actor call p50 and compute, against stock."""
    data = _load()
    lines = [
        "| task threads | arm | actor p50 | p50 against stock "
        "| compute against stock | gilknocker's cost beside fastloop (p50; compute) |",
        "|---|---|---|---|---|---|",
    ]
    for scenario in data["scenarios"]:
        for arm, row in scenario["rows"].items():
            beside = ""
            if "p50_s_vs_FASTLOOP=1" in row:
                beside = _ratio(row["p50_s_vs_FASTLOOP=1"])
                if "compute_per_s_vs_FASTLOOP=1" in row:
                    beside += "; " + _ratio(row["compute_per_s_vs_FASTLOOP=1"])
            lines.append(
                f"| {_threads(scenario['threads'])} | {arm} | {_ms(row['p50_s'])} "
                f"| {_ratio(row.get('p50_s_vs_stock'))} "
                f"| {_ratio(row.get('compute_per_s_vs_stock'))} | {beside} |"
            )
    return lines
