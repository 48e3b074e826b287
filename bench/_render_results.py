"""The results pages' figures: fastloop bench, start-up, echo probes, observers, /metrics.

Each ``render_*`` returns the lines of one generated block; ``render_docs.py``
puts them in place.  Figures in the pages are never typed by hand.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from _render_apps import interval as _interval
from _render_apps import load, measured
from fastloop.cli.bench import NOT_PER_ROUND

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

#: The families the Prometheus page's /metrics excerpt shows, in its order.
EXCERPT = (
    "fastloop_write_to_fd_seconds",
    "fastloop_write_to_fd_written_bytes_total",
    "fastloop_wakeups_requested_total",
    "fastloop_gil_wait_at_poll_seconds",
    "fastloop_watchdog_blocked_seconds_total",
    "fastloop_patch_installed",
)

#: The targets the project set itself: workload -> (ratio to reach, and below
#: which other arm's time per operation: "limit", "uvloop" or None).
TARGETS: dict[str, tuple[float, str | None]] = {
    "onloop-burst": (0.40, "limit"),
    "onloop-chain": (0.70, "uvloop"),
    "onloop-mixed": (1.00, None),
    "xthread-burst-2": (0.20, "uvloop"),
    "threadsafe-burst": (0.35, None),
    "executor-storm": (0.85, None),
    "xthread-ping-pong": (1.03, None),
    "echo-64B": (0.97, None),
    "busy-chain": (0.05, "uvloop"),
}


def _load(name: str) -> dict[str, Any]:
    return load(RESULTS, name)


def _per_op(seconds: float, per: int, unit: str) -> str:
    ns = seconds / per * 1e9
    return f"{ns / 1000:,.1f} us" if ns >= 10_000 else f"{ns:,.0f} ns"


def _target(row: dict[str, Any]) -> str:
    """The workload's target and whether the run reached it."""
    if row["name"] not in TARGETS:
        return ""
    ratio, below = TARGETS[row["name"]]
    median = row["per_op_s"]
    reached = row["patched_vs_stock"]["ratio"] <= ratio
    text = f"<= {ratio:.2f}"
    if below is not None:
        other = median.get("limit" if below == "limit" else "uvloop")
        text += f", below {'the limit' if below == 'limit' else 'uvloop'}"
        reached = reached and other is not None and median["patched"] < other
    return f"{text}: {'met' if reached else '**missed**'}"


def _table(bench: dict[str, Any]) -> list[str]:
    """fastloop against stock, per workload, with the target."""
    lines = [
        "| workload | per | stock | fastloop | fastloop/stock [95% CI] | target |",
        "|---|---|--:|--:|---|---|",
    ]
    for row in bench["workloads"]:
        # Rounds are time slices: each arm's median time per operation.
        unit, median = row["unit"], row["per_op_s"]
        cells = [
            f"`{row['name']}`",
            unit,
            _per_op(median["stock"], 1, unit),
            _per_op(median["patched"], 1, unit),
            _interval(row["patched_vs_stock"]),
            _target(row),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _alternatives_table(bench: dict[str, Any]) -> list[str]:
    """fastloop against what a user could pick instead: bare asyncio, uvloop."""
    lines = [
        "| workload | limit: bare asyncio | fastloop/limit | stock uvloop "
        "| uvloop + fastloop | fastloop/stock uvloop |",
        "|---|--:|---|--:|--:|---|",
    ]
    for row in bench["workloads"]:
        unit, median = row["unit"], row["per_op_s"]
        limit = row.get("patched_vs_limit")
        uv = row.get("patched_vs_uvloop")
        if not (limit or uv):
            continue
        cells = [
            f"`{row['name']}`",
            _per_op(median["limit"], 1, unit) if limit else "",
            _interval(limit) if limit else "",
            _per_op(median["uvloop"], 1, unit) if uv else "",
            _per_op(median["uvloop+fastloop"], 1, unit) if uv else "",
            _interval(uv) if uv else "",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _startup_rows(startup: dict) -> list[str]:
    lines = [
        "| program | unset | added with `FASTLOOP=1` | budget | pairs | fastloop modules |",
        "|---|---|---|---|---|---|",
    ]
    for row in startup["programs"]:
        cpu = row["cpu"]
        budget = row["budget_ms"]
        held = (
            "none: the patches install here, once"
            if budget is None
            else f"<= {budget:g} ms, "
            + ("met" if cpu["added_high_ms"] <= budget else "**missed**")
        )
        lines.append(
            f'| `python -c "{row["program"]}"` | {cpu["unset_ms"]:.1f} ms '
            f"| {cpu['added_ms']:.2f} ms [{cpu['added_low_ms']:.2f}, "
            f"{cpu['added_high_ms']:.2f}] | {held} "
            f"| {row['pairs']} | {len(row['fastloop_modules_imported'])} |"
        )
    frontier = next(
        (row["frontier_cpu"] for row in startup["programs"] if "frontier_cpu" in row),
        None,
    )
    if frontier:
        lines += [
            "",
            "What each part costs the program that makes an IOLoop, in the same rounds "
            "(child CPU, "
            "paired with unset): "
            + "; ".join(
                f"`FASTLOOP={value}`{' (start-up, no patch)' if value == '0' else ''} "
                f"{cost['added_ms']:.2f} ms [{cost['added_low_ms']:.2f}, "
                f"{cost['added_high_ms']:.2f}]"
                for value, cost in frontier.items()
            )
            + ".",
        ]
    return lines


def render_bench() -> list[str]:
    """``fastloop bench``: the loop's own operations, against stock and the alternatives."""
    bench = _load("bench.json")
    machine = bench["machine"]
    versions = f"CPython {bench['python']}, Tornado {bench['tornado']}, uvloop {bench['uvloop']}"
    cores = f"{machine['cpus']} shared cores ({machine['machine']})"
    return [
        f"`fastloop bench` on {versions}, {cores}{_durations(bench)}: "
        f"{bench['rounds']} interleaved rounds per workload, the fastloop arm "
        f"{', '.join(f'`{name}`' for name in bench['workloads'][0]['patches'])} "
        f"(the default set but {', '.join(f'`{n}`' for n in NOT_PER_ROUND)}, which "
        "a 0.1 s round cannot measure: [The GIL](gil.md) does, in whole "
        "processes), each arm's median "
        "time per operation, "
        "and ratios as the median of per-round ratios with a 95% interval "
        "(`bench/results/bench.json`). A target is met when the median reaches it.",
        "",
        *_table(bench),
        "",
        "![fastloop/stock per workload](bench-results/bench.png)",
        "",
        'Against what a user could pick instead: "limit" is the same workload on '
        "bare asyncio primitives (`loop.call_soon`), the floor stock Tornado builds "
        'on; "fastloop/stock uvloop" pairs asyncio with fastloop against stock '
        "uvloop.",
        "",
        *_alternatives_table(bench),
        *_frontier_rows(),
    ]


def render_loops() -> list[str]:
    """Each loop with fastloop against the same loop alone, on the newest CPython
    measured (``bench_py*.json``): fastloop never makes a loop slower."""
    lines: list[str] = []
    for path in sorted(RESULTS.glob("bench_py*.json")):
        bench = _load(path.name)
        loops = ["asyncio", *bench.get("loops", {})]
        versions = ", ".join(
            f"{name} {version}" for name, version in bench.get("loops", {}).items()
        )
        lines += [
            f"`fastloop bench` on CPython {bench['python']}, Tornado "
            f"{bench['tornado']}, {versions}: {bench['rounds']} interleaved rounds "
            "per workload; each cell is the time per operation with fastloop over "
            "the same loop's without it, the median of per-round ratios with a 95% "
            f"interval (`bench/results/{path.name}`).",
            "",
            "| workload | " + " | ".join(loops) + " |",
            "|---" * (len(loops) + 1) + "|",
        ]
        for row in bench["workloads"]:
            cells = [_interval(row["patched_vs_stock"])] + [
                _interval(row[f"{name}_fastloop_vs_{name}"]) for name in loops[1:]
            ]
            lines.append(f"| `{row['name']}` | " + " | ".join(cells) + " |")
        lines.append("")
    return lines[:-1]


def _frontier_rows() -> list[str]:
    """Each patch alone on chosen workloads (bench/workload_frontier.py)."""
    path = RESULTS / "workload_frontier.json"
    if not path.exists():
        return []
    data = _load(path.name)
    lines = [
        "",
        "Which patch moves a workload (`bench/workload_frontier.py`, every arm in "
        "one interleaved run, `bench/results/workload_frontier.json`). "
        "`switchinterval` is installed afresh each round here, as the table "
        "above cannot do for it: its auto mode engages only after a few 20 ms "
        "ticks, and until then its ticks cost a saturated loop beside a busy "
        "thread; the GIL pages measure it in whole processes.",
        "",
        "| workload | arm | fastloop/stock [95% CI] | rounds |",
        "|---|---|---|--:|",
    ]
    shown: set[str] = set()
    for result in data["results"]:
        name = result["workload"]
        cell = "" if name in shown else f"`{name}`"
        shown.add(name)
        lines.append(
            f"| {cell} | {result['arm']} | {_interval(result)} | {result['rounds']} |"
        )
    return lines


def render_writes() -> list[str]:
    """What counting and timing ``write_to_fd`` costs, and the echo probes."""
    echo = _load("write_overhead.json")
    per_call = {
        r["name"]: r["added_ns_per_call"]
        for r in echo["results"]
        if "added_ns_per_call" in r
    }
    return [
        "Added cost per `write_to_fd` call (`bench/write_overhead.py`: median of paired "
        "differences on a stream whose `send` returns at once, "
        "`bench/results/write_overhead.json`): "
        f"{per_call['per-call']:.0f} ns by default (durations of 1 call in "
        f"{echo['sample_every']} timed), {per_call['per-call, every call timed']:.0f} ns "
        "with every call timed (`FASTLOOP_WRITE_TIMING=every`), "
        f"{per_call['per-call, write_cpu']:.0f} ns with `FASTLOOP_WRITE_CPU=1`.",
        *_instruction_rows(),
        *(line for row in _floor_rows() for line in ("", row)),
    ]


def render_startup() -> list[str]:
    """What a process pays at start-up, with ``FASTLOOP`` unset and set: a
    table per CPython measured."""
    lines: list[str] = []
    for name, python in measured(RESULTS, "startup.json"):
        startup = _load(name)
        imported = (
            ", ".join(startup["fastloop_modules_imported"]) or "no fastloop module"
        )
        lines += [
            f"On CPython {python}, with `FASTLOOP` unset the `.pth` line costs "
            f"{startup['median_us']:.0f} us (median, p99 {startup['p99_us']:.0f} us) "
            f"and imports {imported}. With `FASTLOOP=1` it imports three small "
            "modules and waits for the first event loop; what each "
            "program's start-up costs more (`bench/startup.py`: paired processes on "
            "one CPU, median of the paired differences of the child's CPU time with "
            f"a 95% interval, `bench/results/{name}`; a budget is met when the "
            "interval's upper end is within it):",
            "",
            *_startup_rows(startup),
            "",
        ]
    return lines[:-1]


def render_samples() -> list[str]:
    """Real outputs: ``fastloop.report()`` and ``cluster_stats(client)``."""
    report = (RESULTS / "report.txt").read_text().rstrip("\n")
    return [
        "`fastloop.report()` after `bench/samples/report.py` (HTTP requests with 64 KiB "
        "bodies and one handler that serialises a large document on the loop, then 4 "
        "threads adding 5,000 callbacks each; watchdog at 100 ms throughout):",
        "",
        "```",
        report,
        "```",
        *_cluster_rows(),
    ]


def render_observe() -> list[str]:
    """The watchdog and profiler section: a real log, a real flame graph, their cost."""
    episode = (RESULTS / "blocked_loop.txt").read_text().rstrip("\n")
    profile = _load("tornado_profile.json")
    idle = profile["idle_samples"] / profile["samples"]
    lines = [
        f"What `{profile['command']}` logged for the app of "
        f"`bench/samples/blocked_app.py` ({profile['load']}; "
        f"{profile['episodes']} episodes, the first one here):",
        "",
        "```",
        episode,
        "```",
        "",
        f"and the flame graph of its loop thread ({profile['samples']:,} samples "
        f"at 10 ms, {idle:.0%} of them idle in the selector and left out), drawn "
        "by `fastloop flamegraph bench/results/tornado_profile.collapsed "
        "flamegraph.svg --no-idle` from the collapsed file the profiler wrote:",
        "",
        "![flame graph of the Tornado app's loop thread](bench-results/flamegraph.svg)",
    ]
    for name, python in measured(RESULTS, "observe_overhead.json"):
        lines += ["", *_observe_table(name, python)]
    lines += [
        "",
        "Both observers are a thread. On Linux the first extra thread of any kind "
        "makes every file-descriptor syscall of the process dearer (a "
        "single-threaded process skips the reference count in `fdget`): "
        "the last column is that effect alone. A dask worker or a Tornado server "
        "with an executor already pays it; against such a process the first "
        "two columns are the observers' own cost.",
    ]
    return lines


def _observe_table(name: str, python: str) -> list[str]:
    """What the watchdog and the profiler cost, from one results file."""
    overhead = _load(name)
    found = {
        (r["name"], r["observer"], r["baseline"]): _interval(r)
        for r in overhead["results"]
    }
    rounds = overhead["results"][0]["rounds"]
    lines = [
        f"What watching costs (`bench/observe_overhead.py`, {rounds} interleaved "
        f"rounds, CPython {python}, `bench/results/{name}`):",
        "",
        "| workload | watchdog (100 ms) | profiler (10 ms) | one parked thread, nothing else |",
        "|---|---|---|---|",
    ]
    for workload in ("onloop-chain", "echo-64B"):
        lines.append(
            f"| `{workload}`, against a process with one other thread "
            f"| {found[workload, 'watchdog', 'other-thread']} "
            f"| {found[workload, 'profiler', 'other-thread']} | |"
        )
        lines.append(
            f"| `{workload}`, against a single-threaded process "
            f"| {found[workload, 'watchdog', 'bare']} "
            f"| {found[workload, 'profiler', 'bare']} "
            f"| {found[workload, 'other-thread', 'bare']} |"
        )
    return lines


def _durations(bench: dict) -> str:
    """How long the recorded full run (and a recorded --quick run) took."""
    took = f", which took {bench['seconds']:.0f} s ({bench['planned_s']:.0f} s planned"
    quick_path = RESULTS / "bench_quick.json"
    if quick_path.exists():
        quick = _load(quick_path.name)
        took += (
            f"; `--quick` took {quick['seconds']:.0f} s, "
            f"{quick['planned_s']:.0f} s planned"
        )
    return took + ")"


#: The default set on the socketpair echo: a gain, counting included.
ECHO_SOCKETPAIR_TARGET = 0.98


def _echo_verdict(result: dict) -> str:
    """The default set's echo target: a median of at most 1.01."""
    return (
        "within the 1.01 target" if result["ratio"] <= 1.01 else "over the 1.01 target"
    )


def _overlap(a: dict, b: dict) -> bool:
    """Whether two results' 95% intervals overlap (their difference is noise)."""
    return bool(a["low"] <= b["high"] and b["low"] <= a["high"])


def _floor_rows() -> list[str]:
    """What per-call timing costs at the least, what sampling leaves, and a second probe."""
    lines = []
    path = RESULTS / "echo_floor.json"
    if path.exists():
        rows = {r["b"]: r for r in _load("echo_floor.json")["results"]}
        sampled = rows["fastloop write_to_fd"]
        every = rows["fastloop write_to_fd, every call timed"]
        floor = rows["two clock reads, inlined"]
        counted = rows["fastloop write_to_fd, no call timed"]
        beyond = (
            "is within the noise"
            if _overlap(sampled, counted)
            else "is more than the noise"
        )
        lines.append(
            "The floor under that echo ratio (`bench/echo_floor.py`, "
            f"{sampled['rounds']} interleaved rounds, "
            "`bench/results/echo_floor.json`): replacing `write_to_fd` with a "
            f"wrapper that only calls stock gives {_interval(rows['wrapper only'])}; "
            "one that also reads `time.perf_counter_ns` before and after "
            f"{_interval(rows['two clock reads'])}; stock's one line with the two "
            "clock reads inlined, the least any per-call timing costs in pure "
            f"Python, {_interval(floor)}; stock's line with one counter bumped "
            f"{_interval(rows['one counter, inlined'])}. fastloop's patch with no "
            f"call timed after a stream's first, its exact counting alone, "
            f"{_interval(counted)}; timing 1 call in 16 "
            f"{_interval(rows['fastloop write_to_fd, 1 in 16 timed'])}; as by "
            f"default, 1 call in {_load('echo_floor.json')['sample_every']}, "
            f"{_interval(sampled)}: {_echo_verdict(sampled)}; timing every call "
            f"{_interval(every)}. So durations are sampled by default and counts "
            f"are not, and what the default costs beyond the counting {beyond}."
        )
    for name, python in measured(RESULTS, "echo_socketpair.json"):
        probes = {r["arm"]: r for r in _load(name)["results"]}
        default = probes["FASTLOOP=1"]
        verdict = "within" if default["high"] <= ECHO_SOCKETPAIR_TARGET else "over"
        alone = ", ".join(
            f"`{arm.removesuffix(' alone')}` {_interval(r)}"
            for arm, r in probes.items()
            if arm.endswith(" alone")
        )
        lines.append(
            f"An independent probe on CPython {python} (`bench/echo_socketpair.py`: "
            f"{default['per_round']:,} round trips of 64 bytes between two IOStreams "
            f"over a `socket.socketpair()`, {default['rounds']} interleaved rounds, "
            f"`bench/results/{name}`): the default set, counting "
            f"included, {_interval(default)} ({verdict} the "
            f"{ECHO_SOCKETPAIR_TARGET} target); each patch alone: {alone}; "
            "`write_to_fd` timing every call "
            f"{_interval(probes['write_to_fd, every call timed'])}."
        )
    return lines


def _instruction_rows() -> list[str]:
    """Instructions per cross-thread ping under callgrind (bench/instructions.py)."""
    path = RESULTS / "instructions.json"
    if not path.exists():
        return []
    per_ping = _load(path.name)["per_ping"]
    stock = per_ping["stock"]
    added = ", ".join(
        f"`{arm}` {count - stock:+,.0f} ({count / stock:.3f})"
        for arm, count in per_ping.items()
        if arm != "stock"
    )
    return [
        "",
        "Instructions a cross-thread ping executes (`bench/instructions.py`: "
        "another thread adds `pong.set` to a Tornado IOLoop and waits, counted "
        "by callgrind, so exact where wall clocks are noise; "
        f"`bench/results/instructions.json`): stock {stock:,.0f}; {added}.",
    ]


def _cluster_rows() -> list[str]:
    path = RESULTS / "cluster_stats.txt"
    if not path.exists():
        return []
    return [
        "",
        "`fastloop.dask.cluster_stats(client)` after `bench/samples/cluster_stats.py` "
        "(LocalCluster, 2 worker processes, 2,000 tiny tasks and 500 actor calls; "
        "per-write times are wall clock on a shared 2-core machine):",
        "",
        "```",
        path.read_text().rstrip("\n"),
        "```",
    ]


def render_metrics() -> list[str]:
    """Lines of one worker's real scrape (bench/samples/metrics.py), a few families."""
    text = (RESULTS / "metrics.txt").read_text()
    keep = []
    for line in text.splitlines():
        name = line.split()[2] if line.startswith("# ") else re.split(r"[{ ]", line)[0]
        family = re.sub(r"_(bucket|count|sum)$", "", name)
        if (family in EXCERPT and "_bucket{" not in line) or (
            family in EXCERPT and ('le="+Inf"' in line or 'le="6.5536e-05"' in line)
        ):
            keep.append(line)
    return [
        "(`bench/samples/metrics.py`: LocalCluster with 2 worker processes, "
        "watchdog at 100 ms, 2,000 tiny tasks and 500 actor calls; the whole "
        "scrape is `bench/results/metrics.txt`, two buckets of each histogram "
        "shown here)",
        "",
        "```",
        *keep,
        "```",
    ]
