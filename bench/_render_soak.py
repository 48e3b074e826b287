"""The differential soak's page block, from bench/results/soak.json (bench/soak.py)."""

from __future__ import annotations

from pathlib import Path

from _render_apps import load

COMMAND = "python bench/soak.py --count long --json bench/results/soak.json"


def render(results: Path) -> list[str]:
    soak = load(results, "soak.json")
    arms = soak["arms"]
    stock = arms["stock"]
    lines = [
        f"`{COMMAND}` on CPython {soak['python']}, Tornado {soak['tornado']}: "
        f"{soak['count']:,} scenarios an arm (seed {soak['seed']}), the same "
        f"script in every arm, {soak['wall_seconds'] / 60:.0f} min in all. "
        "Each arm's outcomes, scenario by scenario, and its server's log kinds "
        "against stock's; the server's fds, connections and cross-thread "
        "callbacks against what they must be:",
        "",
        "| arm | against stock | stalled loop ticks | callbacks received "
        "| out of order | install/uninstall toggles |",
        "|---|---|---|---|---|---|",
    ]
    for arm, run in arms.items():
        verdict = soak["verdicts"][arm]
        said = (
            "(the reference)"
            if arm == "stock" and verdict == "ok"
            else "same"
            if verdict == "ok"
            else f"{len(verdict)} mismatches"
        )
        server = run["server"]
        stalls, calls = server["stalls"], server["callbacks"]
        lines.append(
            f"| {arm} | {said} | {stalls['count']} of {stalls['ticks']:,} "
            f"| {calls['received']:,} of {calls['produced']:,} "
            f"| {calls['order_violations']} | {server['toggles']:,} |"
        )
    mismatches = [
        line
        for verdict in soak["verdicts"].values()
        if verdict != "ok"
        for line in verdict
    ]
    if mismatches:
        lines += ["", "```", *mismatches, "```"]
    lines += [
        "",
        "Stock's outcomes (what each client saw):",
        "",
        "| scenario | outcome | requests |",
        "|---|---|---|",
    ]
    for scenario, outcomes in stock["outcomes"].items():
        for outcome, count in sorted(outcomes.items()):
            lines.append(f"| `{scenario}` | {outcome} | {count:,} |")
    return lines
