"""One picture per scenario: latency against compute throughput, one point per arm.

The frontier at a glance: a fixed interval trades one for the other, so
the fixed arms draw a curve; an arm below and to the right of another is
better on both at once.  Needs matplotlib (``pip install '.[bench]'``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(
    path: Path, title: str, scenarios: list[tuple[str, dict[str, dict[str, Any]]]]
) -> None:
    """``scenarios``: (name, arm -> row with ``p50_s`` and ``compute_per_s_vs_stock``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(
        1, len(scenarios), figsize=(4.2 * len(scenarios), 4.2), squeeze=False
    )
    for axis, (name, rows) in zip(axes[0], scenarios, strict=True):
        fixed_x, fixed_y = [], []
        for arm, row in rows.items():
            ratio = row.get("compute_per_s_vs_stock", {}).get("ratio", 1.0)
            latency_ms = row["p50_s"] * 1e3
            if arm.endswith(" us"):
                fixed_x.append(ratio)
                fixed_y.append(latency_ms)
            style = {"auto": ("*", "#c0504d", 14), "stock": ("s", "black", 8)}.get(
                arm, ("o", "#2a7ab0", 7)
            )
            axis.plot(
                [ratio], [latency_ms], style[0], color=style[1], markersize=style[2]
            )
            axis.annotate(
                arm,
                (ratio, latency_ms),
                textcoords="offset points",
                xytext=(5, 4),
                fontsize=8,
            )
        axis.plot(fixed_x, fixed_y, "-", color="#2a7ab0", linewidth=0.8, alpha=0.6)
        axis.set_yscale("log")
        axis.set_title(name, fontsize=10)
        axis.set_xlabel("compute throughput / stock (higher is better)")
        axis.set_ylabel("request latency p50, ms (lower is better)")
        axis.grid(True, which="both", alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
