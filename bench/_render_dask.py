"""The dask page's figures: bench/dask_gil_contention.py's agreement and cost."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from _render_apps import load, measured
from _render_gil import _ms, _ratio, _threads

RESULTS = Path(__file__).parent / "results"


def gil_agreement() -> list[str]:
    """gilknocker's and fastloop's figure per monitor update, per scenario."""
    data = load(RESULTS, "dask_gil_contention.json")
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
    data = load(RESULTS, "dask_gil_contention.json")
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
    lines += ["", _gilknocker_verdict(data)]
    aborted: dict[str, list[int]] = {}
    for scenario in data["scenarios"]:
        for arm, runs in scenario["runs"].items():
            counts = aborted.setdefault(arm, [0, 0])
            counts[0] += sum(run["exit_status"] != 0 for run in runs)
            counts[1] += len(runs)
    lines += [
        "",
        "Runs whose process ended abnormally after its figures were taken: "
        + ", ".join(f"{arm} {bad} of {total}" for arm, (bad, total) in aborted.items())
        + ".",
    ]
    return lines


def _gilknocker_verdict(data: dict[str, Any]) -> str:
    """Whether gilknocker's probe cost anything measurable, from its ratios."""
    ratios = [
        (f"{_threads(scenario['threads'])}, {what} {against}", row[key])
        for scenario in data["scenarios"]
        for arm, row in scenario["rows"].items()
        for what in ("p50", "compute")
        for against in ("against stock", "beside fastloop")
        if (arm == "gilknocker") == (against == "against stock")
        and (key := _key(what, against)) in row
    ]
    shown = "; ".join(
        f"{name} {_ratio(r)}" for name, r in ratios if not r["low"] <= 1.0 <= r["high"]
    )
    if not shown:
        return (
            "gilknocker's 1 ms probe cost nothing measurable here: each of its "
            f"{len(ratios)} ratios above has 1.00 inside its interval (wide: busy "
            "workers on two shared cores)."
        )
    return (
        f"Of gilknocker's {len(ratios)} ratios above, these leave 1.00 outside "
        f"their interval: {shown}; the others have it inside (wide intervals: "
        "busy workers on two shared cores)."
    )


def _key(what: str, against: str) -> str:
    measure = "p50_s" if what == "p50" else "compute_per_s"
    return f"{measure}_vs_{'stock' if against == 'against stock' else 'FASTLOOP=1'}"


def idle(results: Path = RESULTS) -> list[str]:
    """An idle scheduler, nanny and worker: CPU and wake-ups, per arm; and
    fastloop's own threads' wake-ups where the file counted them."""
    lines = []
    for name, _ in measured(results, "dask_idle.json"):
        data = load(results, name)
        processes = ("scheduler", "nanny", "worker")
        ours = any(
            "fastloop_wakeups_per_s" in row[p]
            for row in data["rows"].values()
            for p in processes
        )
        lines += [
            f"`bench/results/{name}`: CPython {data['python']}, distributed "
            f"{data['distributed']}, Tornado {data['tornado']}; {data['rounds']} "
            f"interleaved rounds of {data['window_s']:g} s windows after "
            f"{data['settle_s']:g} s; medians, CPU as a percentage of one core "
            "and wake-ups (voluntary context switches of all threads) a second"
            + (
                "; fastloop's threads: each one's wake-ups a second, by its name "
                "and process"
                if ours
                else ""
            )
            + ".",
            "",
            "| arm | scheduler | nanny | worker | the three | CPU vs stock "
            "| wake-ups vs stock |" + (" fastloop's threads |" if ours else ""),
            "|---|---|---|---|---|---|---|" + ("---|" if ours else ""),
        ]
        for arm, row in data["rows"].items():
            cells = [
                f"{row[p]['cpu_percent']:.2f}% / {row[p]['wakeups_per_s']:.0f}"
                for p in processes
            ]
            threads = ", ".join(
                f"{p} `{thread}` {rate:.1f}"
                for p in processes
                for thread, rate in row[p].get("fastloop_wakeups_per_s", {}).items()
            )
            lines.append(
                f"| {arm} | {' | '.join(cells)} | {row['trio_cpu_percent']:.2f}% / "
                f"{row['trio_wakeups_per_s']:.0f} "
                f"| {_ratio(row['trio_cpu_percent_vs_stock'])} "
                f"| {_ratio(row['trio_wakeups_per_s_vs_stock'])} |"
                + (f" {threads or 'none'} |" if ours else "")
            )
        lines.append("")
    return lines[:-1]
