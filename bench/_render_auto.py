"""Auto mode's price where it runs: bench/handover_signal.py and bench/auto_frontier.py."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from _render_apps import load
from _render_gil import _ms, _ratio

RESULTS = Path(__file__).parent / "results"


#: The signals of bench/handover_signal.py, as the table names them.
SIGNALS = {
    "cpu": "CPU time",
    "user": "user time",
    "system": "system time",
    "run_delay": "waiting for a CPU",
    "runs": "times run",
}
#: The table's columns: system time, in ticks of 10 ms, hardly moves.
SHOWN_SIGNALS = ("cpu", "user", "run_delay", "runs")
#: The intervals the table shows of each machine (the others are in the file).
SHOWN_US = ("50", "500")


def handover_signal() -> list[str]:
    """Progress lost beside each signal's change, and how well each tracks it."""
    data = load(RESULTS, "handover_signal.json")
    results = data["results"]
    counted = sorted({r["instructions"] for r in results})
    lines = [
        f"`bench/handover_signal.py`, {data['rounds']} rounds of "
        f"{data['window_s']:g} s windows; each figure is the change against "
        "CPython's 5 ms, the median over rounds. Instructions retired: "
        + "; ".join(counted)
        + ".",
        "",
        "| machine | threads | interval | progress lost | "
        + " | ".join(SIGNALS[s] for s in SHOWN_SIGNALS)
        + " |",
        "|---|---|---|---|" + "---|" * len(SHOWN_SIGNALS),
    ]
    for result in results:
        for interval in SHOWN_US:
            row = result["changes"][interval]
            cells = [f"{row[s]:+.2f}" if s in row else "" for s in SHOWN_SIGNALS]
            lines.append(
                f"| {result['machine']} | {result['threads']} | {interval} us "
                f"| {row['progress_loss']:+.3f} | " + " | ".join(cells) + " |"
            )
    cells = [row for r in results for i, row in r["changes"].items() if i != "5000"]
    tracked = []
    for signal, name in SIGNALS.items():
        pairs = [(row["progress_loss"], row[signal]) for row in cells if signal in row]
        try:
            tracked.append(
                f"{name} {statistics.correlation(*zip(*pairs, strict=True)):+.2f}"
            )
        except (statistics.StatisticsError, TypeError):  # too few, or constant
            tracked.append(f"{name} none (it did not move)")
    runs: dict[tuple[str, int], list[float]] = {}
    for r in results:
        runs.setdefault((r["machine"], r["threads"]), []).append(
            r["changes"]["50"]["progress_loss"]
        )
    again = [
        f"{machine}, {threads} threads: "
        + " and ".join(f"{loss:+.3f}" for loss in losses)
        for (machine, threads), losses in runs.items()
        if len(losses) > 1
    ]
    lines += [
        "",
        f"Over all {len(cells)} cells (every interval, machine and thread count), "
        "the correlation of each signal's change with the progress lost: "
        + ", ".join(tracked)
        + ".",
    ]
    per_run = [
        r["changes"]["50"]["progress_loss"] / r["changes"]["50"]["runs"]
        for r in results
        if r["changes"]["50"].get("runs", 0) > 1
        and r["changes"]["50"]["progress_loss"] > 0.02
    ]
    if per_run:
        lines += [
            "",
            "Progress lost at 50 us per unit of change in times run, where both "
            f"moved: {min(per_run):.4f} to {max(per_run):.4f} "
            f"({max(per_run) / min(per_run):.1f}x apart).",
        ]
    if again:
        lines += [
            "",
            "Progress lost at 50 us by the same machine in runs minutes apart: "
            + "; ".join(again)
            + ".",
        ]
    return lines


#: The frontier's files: every machine with today's auto, and one core with
#: auto and auto as it priced before the one-CPU rule (``auto-prior``).
FRONTIERS = ("auto_frontier.json", "auto_frontier_one_cpu.json")


def machines() -> list[str]:
    """Auto on each variant of this machine, against the budget and the frontier."""
    lines = []
    for name in FRONTIERS:
        data = load(RESULTS, name)
        autos = [a for a in ("auto", "auto-prior") if a in data["results"][0]["rows"]]
        lines += [
            f"`bench/results/{name}`: {data['rounds']} interleaved rounds of "
            f"{data['window_s']:g} s windows per machine and thread count, in one "
            f"worker; budget: compute >= {data['budget']:g} of 5 ms's.",
            "",
            "| machine | task threads | "
            + " | ".join(f"{a}: compute, held, p50" for a in autos)
            + " | best fixed within the budget: compute, p50 | budget |",
            "|---|---|" + "---|" * len(autos) + "---|---|",
        ]
        for result in data["results"]:
            lines.append(_machine_row(result, autos))
        lines.append("")
    return lines[:-1]


def _machine_row(result: dict[str, Any], autos: list[str]) -> str:
    rows, verdict = result["rows"], result["verdict"]
    best = verdict["best_fixed_within_budget"]
    cells = []
    for auto in autos:
        row = rows[auto]
        held = ", ".join(f"{h:g}" for h in row["held_us"])
        cells.append(
            f"{_ratio(row['compute_per_s_vs_stock'])}, {held} us, {_ms(row['p50_s'])}"
        )
    best_cell = (
        f"{best}: {_ratio(rows[best]['compute_per_s_vs_stock'])}, "
        f"{_ms(rows[best]['p50_s'])}"
        if best
        else "none"
    )
    budget = "held" if verdict["auto_holds_budget"] else "broken"
    return (
        f"| {result['machine']} | {result['threads']} | "
        + " | ".join(cells)
        + f" | {best_cell} | {budget} |"
    )


#: bench/gil_dask.py --machine NAME, one file a machine: fresh clusters.
FRESH = {
    "one-core": "auto_fresh_one_core.json",
    "busy-machine": "auto_fresh_busy_machine.json",
    "quota": "auto_fresh_quota.json",
}
#: What auto must keep there: compute's median and its interval's lower end.
FRESH_BUDGET = (0.95, 0.92)


def _held(runs: list[dict[str, Any]]) -> str:
    """The rung each run of auto spent the most time at, as counted."""
    counts: dict[str, int] = {}
    for run in runs:
        times = {
            key.removeprefix("at_").removesuffix("us_ns"): value
            for key, value in run["switchinterval"].items()
            if key.startswith("at_") and key != "at_found_ns"
        }
        times["5000 (CPython's)"] = run["switchinterval"]["at_found_ns"]
        most = max(times, key=lambda rung: times[rung])
        counts[most] = counts.get(most, 0) + 1
    return ", ".join(
        f"{rung} us in {n}" for rung, n in sorted(counts.items(), key=lambda c: -c[1])
    )


def fresh_workers() -> list[str]:
    """Auto in a fresh dask worker on each machine, as a user would measure it."""
    median, low = FRESH_BUDGET
    lines = [
        "| machine | task threads | rounds | auto: compute vs stock | auto: p50 vs "
        "stock | auto held (rung of most time, runs) | best fixed within the "
        "budget: compute, p50 vs stock | budget |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, file in FRESH.items():
        data = load(RESULTS, file)
        for scenario in data["scenarios"]:
            rows = scenario["rows"]
            auto = rows["auto"]
            compute = auto["compute_per_s_vs_stock"]
            within = [
                arm
                for arm, row in rows.items()
                if arm.endswith(" us")
                and row["compute_per_s_vs_stock"]["ratio"] >= median
            ]
            best = min(within, key=lambda arm: rows[arm]["p50_s"], default=None)
            best_cell = (
                f"{best}: {_ratio(rows[best]['compute_per_s_vs_stock'])}, "
                f"{_ratio(rows[best]['p50_s_vs_stock'])}"
                if best
                else "none"
            )
            kept = compute["ratio"] >= median and compute["low"] >= low
            lines.append(
                f"| {name} | {scenario['threads']} | {data['rounds']} "
                f"| {_ratio(compute)} | {_ratio(auto['p50_s_vs_stock'])} "
                f"| {_held(scenario['runs']['auto'])} | {best_cell} "
                f"| {'kept' if kept else 'broken'} |"
            )
    return lines
