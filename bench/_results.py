"""Write a benchmark's results file in bench/results/: what ran it, then its figures."""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

import tornado

import fastloop


def save(path: Path, benchmark: str, **fields: Any) -> None:
    """JSON with the benchmark's name and the Python, Tornado and fastloop it ran on."""
    data = {
        "benchmark": benchmark,
        "python": platform.python_version(),
        "tornado": tornado.version,
        "fastloop": fastloop.__version__,
        **fields,
    }
    path.write_text(json.dumps(data, indent=1) + "\n")
