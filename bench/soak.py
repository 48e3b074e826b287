"""Differential soak: a Tornado server under hostile load, stock against each patch set.

    python bench/soak.py [--count short|long|N] [--seed S] [--arms a,b,...]
                         [--pause-scale F] [--json PATH] [--check]

Per arm, bench/soak_server.py runs pinned to CPU 0 with the arm's
environment (every ``FASTLOOP*`` variable removed, then the arm's added),
bench/soak_client.py runs the script of ``--seed`` and ``--count`` against
it pinned to CPU 1, stock Python (the client is the same in every arm), and
the server writes its report once asked to finish.  Every arm is then
compared with stock, scenario by scenario and on the server's report
(``compare``, ``check_server``); ``--check`` exits 1 on any mismatch, each
printed on one line.  ``--count short`` (the default) is CI's run,
``--count long`` the long one.  Prints how long the run will take first.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

import _results
import soak_client
from fastloop.patches import RECORDS

HERE = Path(__file__).parent
#: Scenarios per run: CI's short run (one arm about 30-45 s on the project's
#: 2-core machines) and the long one.
COUNTS = {"short": 40_000, "long": 200_000}
#: For the announced duration: the pace of one arm, and its fixed cost (s).
SECONDS_PER_SCENARIO = 0.0009
ARM_START_S = 1.5
#: A timing-dependent share differs from stock's only where a two-sided
#: Fisher exact test rejects at this level.
ALPHA = 0.001

#: arm -> (environment added to the clean one, toggle install/uninstall)
ARMS: dict[str, tuple[dict[str, str], bool]] = {
    "stock": ({}, False),
    "FASTLOOP=1": ({"FASTLOOP": "1"}, False),
    **{name: ({"FASTLOOP": name}, False) for name, *_ in RECORDS},
    "FASTLOOP=1+toggle": ({"FASTLOOP": "1"}, True),
}

#: Scenarios whose outcome on stock depends on timing, and why: their
#: outcomes are compared as shares (``ALPHA``), every other one exactly.
#: Not half_close_post: stock answers in the loop iteration that reads the
#: body, before it can read the FIN.  Not the mid-response closes: the fixed
#: buffers on both sides make them always meet a server still writing, so
#: even the server's log lines are the same run after run.
TIMING_DEPENDENT: dict[str, str] = {
    "malformed_huge_header": "Tornado stops reading once the head passes its "
    "limit; whether the rest had already arrived and been read (the close is "
    "a FIN) or not (unread data: an RST) is a race with the client's segments",
}


def log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def fisher_p(a: int, n1: int, b: int, n2: int) -> float:
    """Two-sided Fisher exact p-value of ``a`` of ``n1`` against ``b`` of ``n2``."""
    drawn = a + b

    def log_p(x: int) -> float:
        return log_comb(n1, x) + log_comb(n2, drawn - x) - log_comb(n1 + n2, drawn)

    # Tables as likely as the observed one count in full, rounding aside.
    observed = log_p(a) + 1e-7
    tables = range(max(0, drawn - n2), min(drawn, n1) + 1)
    return min(1.0, sum(math.exp(p) for x in tables if (p := log_p(x)) <= observed))


def differing(stock: Counter[str], arm: Counter[str], timing: bool) -> list[str]:
    """The keys whose counts differ from stock's: exactly, or where ``timing``
    (stock's counts depend on timing), as shares of each side's total."""
    keys = sorted(stock.keys() | arm.keys())
    if not timing:
        return [key for key in keys if stock[key] != arm[key]]
    n1, n2 = stock.total(), arm.total()
    return [key for key in keys if fisher_p(stock[key], n1, arm[key], n2) < ALPHA]


def mismatch(
    arm: str, scenario: str, outcome: str, stock: object, other: object
) -> str:
    return f"MISMATCH {arm} | {scenario} | {outcome} | stock {stock}, {arm} {other}"


def compared_kinds(report: dict) -> Counter[str]:
    """The server's log kinds, less fastloop's own info lines (stock has none)."""
    return Counter(
        {
            f"{name} {level} {template!r}": n
            for name, level, template, n in report["log_kinds"]
            if not (name.startswith("fastloop") and level in ("DEBUG", "INFO"))
        }
    )


def compare(arm: str, stock: dict, other: dict) -> list[str]:
    """Mismatches of an arm's run against stock's (runs as ``run_arm`` returns):
    outcomes per scenario and the server's log kinds, and loop stalls as a
    share of the busy ticks (they come from the machine as much as the loop)."""
    lines = []
    for scenario in sorted(stock["outcomes"].keys() | other["outcomes"].keys()):
        ours = Counter(stock["outcomes"].get(scenario, {}))
        theirs = Counter(other["outcomes"].get(scenario, {}))
        lines += [
            mismatch(arm, scenario, outcome, ours[outcome], theirs[outcome])
            for outcome in differing(ours, theirs, scenario in TIMING_DEPENDENT)
        ]
    ours, theirs = compared_kinds(stock["server"]), compared_kinds(other["server"])
    lines += [
        mismatch(arm, "server log", kind, ours[kind], theirs[kind])
        for kind in differing(ours, theirs, timing=False)
    ]
    a, b = stock["server"]["stalls"], other["server"]["stalls"]
    if fisher_p(a["count"], a["ticks"], b["count"], b["ticks"]) < ALPHA:
        lines.append(
            mismatch(
                arm,
                "server loop",
                "stalled ticks",
                f"{a['count']}/{a['ticks']}",
                f"{b['count']}/{b['ticks']}",
            )
        )
    return lines


def check_server(arm: str, report: dict, toggled: bool) -> list[str]:
    """What every arm's server must report, stock's included."""
    fds, calls = report["fds"], report["callbacks"]
    wrong = {
        "open fds at end": (fds["start"], fds["end"]),
        "open connections at end": (0, report["open_connections"]),
        "callbacks received": (calls["produced"], calls["received"]),
        "callbacks out of order": (0, calls["order_violations"]),
    }
    lines = [
        f"MISMATCH {arm} | server | {what} | expected {want}, got {got}"
        for what, (want, got) in wrong.items()
        if want != got
    ]
    if toggled and not report["toggles"]:
        lines.append(f"MISMATCH {arm} | server | toggles | expected some, got 0")
    return lines


def wait_for_port(path: Path, server: subprocess.Popen[bytes]) -> int:
    deadline = time.monotonic() + 30
    while not path.exists():
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the server did not start (exit {server.poll()})")
        time.sleep(0.05)
    return int(path.read_text())


def run_arm(arm: str, args: argparse.Namespace, workdir: Path) -> dict:
    """One arm: server and client, then the client's tallies and the server's report."""
    extra, toggle = ARMS[arm]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
    files = {kind: workdir / f"{arm}.{kind}" for kind in ("port", "report", "log")}
    started = time.monotonic()
    with files["log"].open("w") as log:
        server = subprocess.Popen(
            [sys.executable, HERE / "soak_server.py"]
            + ["--port-file", files["port"], "--report", files["report"]]
            + ["--toggle"] * toggle,
            env={**clean, **extra},
            stderr=log,
            preexec_fn=functools.partial(os.sched_setaffinity, 0, {0}),
        )
        try:
            port = wait_for_port(files["port"], server)
            client = subprocess.run(
                [
                    sys.executable,
                    HERE / "soak_client.py",
                    f"--port={port}",
                    f"--seed={args.seed}",
                    f"--count={args.count}",
                    f"--pause-scale={args.pause_scale}",
                ],
                env=clean,
                capture_output=True,
                text=True,
                timeout=soak_client.run_timeout(args.count) + 60,
                preexec_fn=functools.partial(os.sched_setaffinity, 0, {1}),
            )
            if client.returncode != 0:
                raise RuntimeError(f"{arm}: the client failed:\n{client.stderr}")
            finish = f"http://127.0.0.1:{port}/soak/finish"
            urllib.request.urlopen(finish, timeout=30).read()
            server.wait(timeout=60)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
    if server.returncode != 0:
        log = files["log"].read_text()
        raise RuntimeError(f"{arm}: the server exited {server.returncode}:\n{log}")
    return {
        "outcomes": json.loads(client.stdout)["outcomes"],
        "server": json.loads(files["report"].read_text()),
        "seconds": round(time.monotonic() - started, 1),
    }


def table(runs: dict[str, dict]) -> str:
    """Per scenario and outcome, each arm's count."""
    arms = list(runs)
    rows = [["scenario", "outcome", *arms]]
    for scenario in soak_client.MIX:
        outcomes = sorted(
            set().union(*(r["outcomes"][scenario] for r in runs.values()))
        )
        rows += [
            [scenario, outcome]
            + [str(runs[arm]["outcomes"][scenario].get(outcome, 0)) for arm in arms]
            for outcome in outcomes
        ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in rows
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--count",
        type=lambda text: COUNTS.get(text) or int(text),
        default=COUNTS["short"],
        help=f"scenarios per arm, or {' or '.join(COUNTS)} ({COUNTS})",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--arms", default=",".join(ARMS), help=f"comma list of {', '.join(ARMS)}"
    )
    parser.add_argument(
        "--pause-scale", type=float, default=1.0, help="shortens slow_reader's pauses"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--check", action="store_true", help="exit 1 on any mismatch")
    args = parser.parse_args(argv)
    chosen = args.arms.split(",")
    unknown = [arm for arm in chosen if arm not in ARMS]
    if unknown:
        parser.error(f"unknown arms {unknown}: choose from {list(ARMS)}")
    arms = ["stock", *(arm for arm in chosen if arm != "stock")]
    per_arm = ARM_START_S + args.count * SECONDS_PER_SCENARIO
    print(
        f"{len(arms)} arms of {args.count} scenarios (seed {args.seed}): "
        f"about {per_arm:.0f} s an arm, {len(arms) * per_arm / 60:.1f} min in all",
        flush=True,
    )
    started = time.monotonic()
    runs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="soak-") as workdir:
        for arm in arms:
            runs[arm] = run_arm(arm, args, Path(workdir))
            print(f"{arm}: {runs[arm]['seconds']} s", flush=True)
    verdicts = {
        arm: check_server(arm, run["server"], ARMS[arm][1])
        + (compare(arm, runs["stock"], run) if arm != "stock" else [])
        for arm, run in runs.items()
    }
    print(table(runs))
    for arm, run in runs.items():
        server = run["server"]
        print(
            f"{arm}: stalls {server['stalls']}, callbacks {server['callbacks']}, "
            f"toggles {server['toggles']}, installed {server['fastloop_installed']}"
        )
    lines = [line for arm_lines in verdicts.values() for line in arm_lines]
    print("\n".join(lines) or "no mismatch")
    if args.json:
        _results.save(
            args.json,
            "soak",
            seed=args.seed,
            count=args.count,
            wall_seconds=round(time.monotonic() - started, 1),
            arms=runs,
            verdicts={arm: lines or "ok" for arm, lines in verdicts.items()},
        )
    return 1 if args.check and lines else 0


if __name__ == "__main__":
    sys.exit(main())
