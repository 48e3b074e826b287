"""What an idle Tornado application and an idle Jupyter Server burn: CPU and wake-ups.

    python bench/idle_apps.py [--rounds N] [--settle S] [--window S] [--json PATH]

Per application, arm and round, one process starts from the command line
as a user starts it, and nothing is requested of it: the Tornado
application of ``samples/idle_tornado_app.py`` (an HTTP server with a
cache refreshed every 100 ms, metrics every second and a clean-up every
15 s), and ``jupyter server`` (without a browser or a token, in a scratch
directory with its own Jupyter paths) where jupyter_server is installed.
After ``--settle`` seconds the process's CPU time and its threads'
wake-ups are read (``_idle_counts``), and again ``--window`` seconds
later.  Arms: stock and ``FASTLOOP=1``, in balanced orders
(``ab.interleave``) with every application's arms in one rotation.
Reported per application: CPU as a percentage of one core and wake-ups a
second (medians), each against stock's as the median of paired ratios,
and the wake-ups of fastloop's own threads.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _results
from _arms import without_fastloop
from _idle_counts import ours_median, per_process, reading
from fastloop import ab

ARMS: dict[str, dict[str, str]] = {"stock": {}, "FASTLOOP=1": {"FASTLOOP": "1"}}
TORNADO_APP = Path(__file__).parent / "samples" / "idle_tornado_app.py"
#: jupyter's command line, as this interpreter's environment installed it.
JUPYTER = str(Path(sys.executable).with_name("jupyter"))
#: How long an application may take to say it serves.
START_S = 60.0


def tornado_app(
    scratch: Path, env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start the idle Tornado application; the file that says it listens."""
    port_file = scratch / "port"
    process = subprocess.Popen(
        [sys.executable, str(TORNADO_APP), str(port_file)],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    return process, port_file


def jupyter_server(
    scratch: Path, env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start an idle Jupyter Server; the file that says it serves."""
    paths = {
        name: str(scratch / name.lower())
        for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR")
    }
    process = subprocess.Popen(
        [
            JUPYTER,
            "server",
            "--allow-root",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            "--ServerApp.port=0",
            "--IdentityProvider.token=",
            f"--ServerApp.root_dir={scratch}",
        ],
        env={**env, **paths},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return process, Path(paths["JUPYTER_RUNTIME_DIR"]) / f"jpserver-{process.pid}.json"


Start = Callable[[Path, dict[str, str]], tuple["subprocess.Popen[bytes]", Path]]


def applications() -> dict[str, Start]:
    """The applications this environment can run."""
    found: dict[str, Start] = {"Tornado application": tornado_app}
    if importlib.util.find_spec("jupyter_server") is not None:
        found["Jupyter Server"] = jupyter_server
    return found


def one_run(start: Start, arm: str, settle: float, window: float) -> dict[str, Any]:
    env = {**without_fastloop(dict(os.environ)), **ARMS[arm]}
    with tempfile.TemporaryDirectory() as scratch:
        process, ready = start(Path(scratch), env)
        try:
            deadline = time.monotonic() + START_S
            while not ready.exists():
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"{arm}: the application did not start")
                time.sleep(0.1)
            time.sleep(settle)
            before = reading({"app": process.pid})["app"]
            time.sleep(window)
            after = reading({"app": process.pid})["app"]
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    return per_process(before, after, window)


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per ``application / arm`` run list: medians, and ratios to stock's."""
    rows: dict[str, dict[str, Any]] = {}
    for key, mine in runs.items():
        application, _, arm = key.partition(" / ")
        stock = runs[f"{application} / stock"]
        row: dict[str, Any] = {"application": application, "arm": arm}
        for measure in ("cpu_percent", "wakeups_per_s"):
            row[measure] = statistics.median(r[measure] for r in mine)
            # An application that never wakes has no ratio to stock's.
            row[f"{measure}_vs_stock"] = (
                ab.paired(
                    [r[measure] for r in stock],
                    [r[measure] for r in mine],
                    name=f"{key} {measure}",
                    b_label=arm,
                ).to_dict()
                if all(r[measure] > 0 for r in stock)
                else None
            )
        row["fastloop_wakeups_per_s"] = ours_median(
            [r["fastloop_wakeups_per_s"] for r in mine]
        )
        rows[key] = row
    return rows


def ratio(result: dict[str, Any] | None) -> str:
    if result is None:
        return "none (stock's is 0)"
    return f"{result['ratio']:.2f} [{result['low']:.2f}, {result['high']:.2f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle", type=float, default=8.0)
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    found = applications()
    arms = {
        f"{application} / {arm}": (
            lambda start=start, arm=arm: one_run(start, arm, args.settle, args.window)
        )
        for application, start in found.items()
        for arm in ARMS
    }
    each = args.settle + args.window + 3
    print(
        f"{len(arms)} arms x {args.rounds} rounds, about {each:.0f} s a run: "
        f"{len(arms) * args.rounds * each / 60:.0f} min",
        file=sys.stderr,
        flush=True,
    )
    runs = ab.interleave(arms, rounds=args.rounds, warmup=0)
    rows = summarize(runs)
    for key, row in rows.items():
        ours = "; ".join(
            f"{thread} {rate:.1f}"
            for thread, rate in row["fastloop_wakeups_per_s"].items()
        )
        print(
            f"{key:>34}: {row['cpu_percent']:.3f}% / {row['wakeups_per_s']:.1f} a "
            f"second; vs stock: CPU {ratio(row['cpu_percent_vs_stock'])}, wake-ups "
            f"{ratio(row['wakeups_per_s_vs_stock'])}; fastloop's threads a second: "
            f"{ours or 'none'}"
        )
    if args.json:
        versions = {}
        if "Jupyter Server" in found:
            import jupyter_server

            versions["jupyter_server"] = jupyter_server.__version__
        _results.save(
            args.json,
            "idle_apps",
            **versions,
            rounds=args.rounds,
            settle_s=args.settle,
            window_s=args.window,
            rows=rows,
            runs=runs,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
