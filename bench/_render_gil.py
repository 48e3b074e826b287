"""The GIL page's figures, from bench/gil_echo.py's and bench/gil_dask.py's results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _dask_rates(data: dict[str, Any]) -> str:
    """Each scenario's call rate: '20 a second, 10 beside 2 task threads, 5 beside 4'."""
    rates = [(s["threads"], s["rate"]) for s in data["scenarios"]]
    first = rates[0][1]
    others = [f"{rate:g} beside {threads}" for threads, rate in rates if rate != first]
    if others:
        others[0] += " task threads"
    return ", ".join([f"{first:g} a second", *others])


def _dask_calls(data: dict[str, Any]) -> str:
    """Which arms made fewer calls than offered: their request work differed."""
    short = []
    for s in data["scenarios"]:
        offered = max(row["calls"] for row in s["rows"].values())
        short += [
            f"{arm} {row['calls']:.0f} of {offered:.0f} beside {s['threads']}"
            for arm, row in s["rows"].items()
            if row["calls"] < 0.95 * offered
        ]
    if not short:
        return "Every arm made the calls offered (median of its rounds)."
    return (
        "Calls made (median of the rounds), where an arm made fewer than offered: "
        + "; ".join(short)
        + "."
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 0.1 else f"{seconds * 1e3:.0f} ms"


def _threads(n: int) -> str:
    return f"{n} thread{'' if n == 1 else 's'}"


def _ratio(result: dict[str, Any] | None) -> str:
    if not result:
        return ""
    noisy = " (noisy)" if result["noisy"] else ""
    return f"{result['ratio']:.2f} [{result['low']:.2f}, {result['high']:.2f}]{noisy}"


def _dominated(rows: dict[str, dict[str, Any]]) -> list[str]:
    return [arm for arm, row in rows.items() if row.get("dominates_auto")]


def _verdict(where: list[tuple[str, dict[str, dict[str, Any]]]]) -> str:
    beaten = [
        f"{name} ({', '.join(_dominated(rows))})"
        for name, rows in where
        if _dominated(rows)
    ]
    if not beaten:
        return (
            "No arm is better than auto on p50 and on compute throughput at once "
            "(both 95% intervals of the paired ratios on the better side) in any of "
            "these scenarios."
        )
    compared = sum(len([arm for arm in rows if arm != "auto"]) for _, rows in where)
    return (
        "Better than auto on p50 and compute at once (on p50 alone where no thread "
        "computes), both 95% intervals on the better side: "
        + "; ".join(beaten)
        + f"; of {compared} arms compared with auto in these scenarios, each at 95%."
    )


def _echo_rate(data: dict[str, Any]) -> list[str]:
    scenarios = [s for s in data["scenarios"] if s["phases"][0] > 0]
    idle = next((s for s in data["scenarios"] if s["phases"][0] == 0), None)
    head = "| arm |" + "".join(
        f" {s['phases'][0]} thread{'s' if s['phases'][0] > 1 else ''}: p50 | p99 | compute vs stock |"
        for s in scenarios
    )
    if idle:
        head += " alone: p50 |"
    lines = [head, "|---|" + "--:|--:|---|" * len(scenarios) + ("--:|" if idle else "")]
    for arm in scenarios[0]["per_phase"][0]:
        cells = [f"`{arm}`" if arm == "auto" else arm]
        for s in scenarios:
            row = s["per_phase"][0][arm]
            cells += [
                _ms(row["p50_s"]),
                _ms(row["p99_s"]),
                _ratio(row.get("compute_per_s_vs_stock")),
            ]
        if idle:
            cells.append(_ms(idle["per_phase"][0][arm]["p50_s"]))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _echo_closed(data: dict[str, Any]) -> list[str]:
    scenarios = data["scenarios"]
    lines = [
        "| arm |"
        + "".join(
            f" {_threads(s['phases'][0])}: req/s | vs stock |" for s in scenarios
        ),
        "|---|" + "--:|---|" * len(scenarios),
    ]
    for arm in scenarios[0]["per_phase"][0]:
        cells = [arm]
        for s in scenarios:
            row = s["per_phase"][0][arm]
            cells += [f"{row['req_per_s']:,.0f}", _ratio(row.get("req_per_s_vs_stock"))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _phased(data: dict[str, Any]) -> list[str]:
    (scenario,) = data["scenarios"]
    phases = scenario["phases"]
    names = [f"{n} thread{'s' if n != 1 else ''}" if n else "alone" for n in phases]
    lines = [
        "| arm |"
        + "".join(
            f" {i + 1}: {name}, p50 |" + (" compute |" if phases[i] else "")
            for i, name in enumerate(names)
        ),
        "|---|" + "".join("--:|" + ("---|" if n else "") for n in phases),
    ]
    for arm in scenario["per_phase"][0]:
        cells = [arm]
        for index, n in enumerate(phases):
            row = scenario["per_phase"][index][arm]
            cells.append(_ms(row["p50_s"]))
            if n:
                cells.append(_ratio(row.get("compute_per_s_vs_stock")))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _dask(data: dict[str, Any]) -> list[str]:
    scenarios = [s for s in data["scenarios"] if s["threads"]]
    lines = [
        "| arm |"
        + "".join(
            f" {s['threads']} task thread{'s' if s['threads'] > 1 else ''}: p50 | p90 | compute vs stock |"
            for s in scenarios
        ),
        "|---|" + "--:|--:|---|" * len(scenarios),
    ]
    for arm in scenarios[0]["rows"]:
        cells = [arm]
        for s in scenarios:
            row = s["rows"][arm]
            cells += [
                _ms(row["p50_s"]),
                _ms(row["p90_s"]),
                _ratio(row.get("compute_per_s_vs_stock")),
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _arm_figures(rows: dict[str, dict[str, Any]]) -> str:
    """'200 us p50 5.42 ms, compute 1.00 [0.98, 1.00]; ... (stock 14.56 ms).'"""
    figures = "; ".join(
        f"{arm} p50 {_ms(row['p50_s'])}, compute {_ratio(row['compute_per_s_vs_stock'])}"
        for arm, row in rows.items()
        if arm != "stock"
    )
    return f"{figures} (stock {_ms(rows['stock']['p50_s'])})."


#: gil_dask runs of one scenario with more rounds, and why that scenario.
AGAIN = (
    ("gil_dask_one_thread.json", "where auto holds the shortest interval"),
    ("gil_dask_four_threads.json", "where the budget decides between 1000 and 2000 us"),
)


def render(results: Path) -> list[str]:
    """The block's lines; empty when no GIL benchmark has run yet."""
    lines: list[str] = []
    verdicts: list[tuple[str, dict[str, dict[str, Any]]]] = []

    def load(name: str) -> dict[str, Any] | None:
        path = results / name
        return json.loads(path.read_text()) if path.exists() else None

    rate = load("gil_echo_rate.json")
    if rate:
        lines += [
            f"**A Tornado echo server beside T threads that compute in Python** "
            f"(`python bench/gil_echo.py --scenario rate`: {rate['rate']:g} requests a "
            f"second, open loop, from a client pinned to its own core; {rate['rounds']} "
            "interleaved rounds of every arm; p50/p99 are medians over rounds, compute is "
            "the server threads' counting rate as the median of paired ratios to stock; "
            "`bench/results/gil_echo_rate.json`):",
            "",
            *_echo_rate(rate),
            "",
            "![echo: latency against compute](bench-results/gil_echo_rate.png)",
            "",
        ]
        verdicts += [
            (f"echo, {s['name']}", s["per_phase"][0]) for s in rate["scenarios"]
        ]
    compute = load("gil_echo_compute.json")
    if compute:
        lines += [
            "Compute throughput is the noisiest figure here; the same scenario again "
            f"with {compute['rounds']} rounds of only "
            f"{', '.join(compute['arms'])} (`bench/results/gil_echo_compute.json`):",
            "",
            *_echo_rate(compute),
            "",
        ]
        verdicts += [
            (f"echo, {s['name']}, {compute['rounds']} rounds", s["per_phase"][0])
            for s in compute["scenarios"]
        ]
    against = load("gil_echo_auto_vs_50.json")
    if against:
        (scenario,) = against["scenarios"]
        base, other = list(against["arms"])
        row = scenario["per_phase"][0][other]
        lines += [
            f"`{other}` against the shortest fixed interval, {base}, "
            f"beside {_threads(scenario['phases'][0])}, {against['rounds']} rounds "
            "(`bench/results/gil_echo_auto_vs_50.json`): p50 "
            f"{_ms(scenario['per_phase'][0][base]['p50_s'])} and "
            f"{_ms(row['p50_s'])}, {other}/{base} "
            f"{_ratio(row['p50_s_vs_stock'])}; compute {other}/{base} "
            f"{_ratio(row['compute_per_s_vs_stock'])}.",
            "",
        ]
    closed = load("gil_echo_closed.json")
    if closed:
        lines += [
            "Capacity, each request as soon as the last is answered "
            f"(`--scenario closed`, {closed['rounds']} rounds, "
            "`bench/results/gil_echo_closed.json`):",
            "",
            *_echo_closed(closed),
            "",
        ]
    phased = load("gil_echo_phased.json")
    if phased:
        lines += [
            "One server per arm going through phases of "
            f"{phased['seconds']:g} s, alone, beside 1 and 4 computing threads, then "
            f"alone again, at {phased['rate']:g} requests a second (`--scenario phased`, "
            f"{phased['rounds']} rounds, each phase measured whole, auto's reaction "
            "included; `bench/results/gil_echo_phased.json`):",
            "",
            *_phased(phased),
            "",
            "![phased: latency against compute](bench-results/gil_echo_phased.png)",
            "",
        ]
        phases = phased["scenarios"][0]["phases"]
        verdicts += [
            (f"phased, phase {i + 1}, {_threads(n) if n else 'alone'}", rows)
            for i, (n, rows) in enumerate(
                zip(phases, phased["scenarios"][0]["per_phase"], strict=True)
            )
        ]
    dask = load("gil_dask.json")
    if dask:
        lines += [
            "**A dask worker whose task threads compute in Python**, 1 ms actor calls "
            f"at {_dask_rates(dask)} (`python bench/gil_dask.py`, distributed "
            f"{dask['distributed']}, {dask['rounds']} rounds, a fresh cluster per arm "
            "and round; `bench/results/gil_dask.json`):",
            "",
            *_dask(dask),
            "",
            _dask_calls(dask),
            "",
            "![dask: latency against compute](bench-results/gil_dask.png)",
            "",
        ]
        verdicts += [
            (f"dask, {s['threads']} task threads", s["rows"]) for s in dask["scenarios"]
        ]
    for name, where in AGAIN:
        again = load(name)
        if not again:
            continue
        (scenario,) = again["scenarios"]
        rows = scenario["rows"]
        threads = scenario["threads"]
        lines += [
            f"Beside {threads} task thread{'s' if threads != 1 else ''} again, "
            f"{where}, with more rounds (`--threads {threads} --rounds "
            f'{again["rounds"]} --arms "{",".join(rows)}"`, `bench/results/{name}`): '
            + _arm_figures(rows),
            "",
        ]
        verdicts.append(
            (f"dask, {threads} task threads, {again['rounds']} rounds", rows)
        )
    dense = load("gil_dask_busy_actor.json")
    if dense:
        (scenario,) = dense["scenarios"]
        rows = scenario["rows"]
        lines += [
            f"Beside {scenario['threads']} task thread with the actor busy, "
            f"{scenario['rate']:g} calls a second, more than stock serves "
            f"(`--threads {scenario['threads']} --rate {scenario['rate']:g} --rounds "
            f'{dense["rounds"]} --arms "{",".join(rows)}"`, '
            "`bench/results/gil_dask_busy_actor.json`; stock made "
            f"{rows['stock']['calls']:.0f} calls of "
            f"{max(r['calls'] for r in rows.values()):.0f}, so its compute keeps the "
            "GIL time of the calls it did not make: compare the other arms with "
            "each other): " + _arm_figures(rows),
            "",
        ]
        verdicts.append((f"dask, {scenario['threads']} task thread, busy actor", rows))
    ticks = load("controller_ticks.json")
    if ticks:
        figures = "; ".join(  # three places: the arms differ by about 1%
            f"{r['b']} {r['ratio']:.3f} [{r['low']:.3f}, {r['high']:.3f}] "
            f"(holding {r['held_us']:g} us)"
            for r in ticks["results"]
            if r["b"] != r["a"]
        )
        lines += [
            "What the controller's own wake-ups cost a thread that computes, while "
            "auto holds 50 us beside it (`python bench/controller_ticks.py`: one "
            "process, a loop serving about 19 calls a second and one counting thread, "
            f"{ticks['rounds']} rounds of one-second slices; "
            "`bench/results/controller_ticks.json`), compute against 50 us fixed: "
            f"{figures}.",
            "",
        ]
    if verdicts:
        lines += [_verdict(verdicts), ""]
    return lines
