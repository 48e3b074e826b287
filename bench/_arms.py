"""The FASTLOOP values the whole-application benchmarks pair, in the order they rotate."""

from __future__ import annotations

#: Arms per scenario: every patch against stock where nothing contends (no
#: regression), and what each opt-in patch adds where a thread does.
ARMS: dict[str, dict[str, str | None]] = {
    "idle": {
        "stock": None,
        "FASTLOOP=1": "1",
        "FASTLOOP=all,poll,switchinterval": "all,poll,switchinterval",
    },
    "busy": {
        "stock": None,
        "FASTLOOP=1": "1",
        "FASTLOOP=all,switchinterval": "all,switchinterval",
        "FASTLOOP=all,poll,switchinterval": "all,poll,switchinterval",
    },
}
