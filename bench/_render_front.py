"""The README's "What you gain" bullets: one measured figure each, linked to its table."""

from __future__ import annotations

from pathlib import Path

from _render_apps import figure, interval, load

RESULTS_PAGE = "docs/results.md"


def _ratio(result: dict[str, float]) -> str:
    return interval(result).replace(" (noisy)", "")


def _added(cpu: dict[str, float]) -> str:
    return (
        f"{cpu['added_ms']:.2f} ms [{cpu['added_low_ms']:.2f}, "
        f"{cpu['added_high_ms']:.2f}]"
    )


#: The results files the gains quote (``NAME.json`` from CPython 3.11,
#: ``NAME_py3.N.json`` from a newer one).
SOURCES = (
    "bench",
    "dask_busy",
    "http_busy",
    "http_uvloop",
    "dask_idle_streams",
    "dask_idle",
    "echo_socketpair",
    "startup",
    "observe_overhead",
)


def newest(results: Path) -> tuple[str, str]:
    """The suffix of the newest CPython every source was measured on
    (``""`` or ``"_py3.N"``), and that CPython's version."""
    newer = {p.stem.removeprefix(SOURCES[0]) for p in results.glob("bench_py*.json")}
    complete = {
        suffix: load(results, f"{SOURCES[0]}{suffix}.json")["python"]
        for suffix in ("", *newer)
        if all((results / f"{name}{suffix}.json").exists() for name in SOURCES)
    }
    suffix = max(complete, key=lambda s: tuple(map(int, complete[s].split("."))))
    return suffix, complete[suffix]


def render(results: Path) -> list[str]:
    suffix, python = newest(results)

    def named(name: str) -> str:
        return f"{name}{suffix}.json"

    data = load(results, named("bench"))
    bench = {row["name"]: row for row in data["workloads"]}
    busy_dask = figure(
        results, named("dask_busy"), "FASTLOOP=1", "1 ms actor call, p50"
    )
    busy_http = figure(results, named("http_busy"), "FASTLOOP=1", "time per request")
    idle_http = figure(results, named("http_uvloop"), "FASTLOOP=1", "time per request")
    idle = named("dask_idle_streams")
    idle_call = figure(results, idle, "FASTLOOP=1", "actor round trip")
    idle_uv = figure(results, idle, "uvloop+FASTLOOP=1", "actor round trip")
    direct = figure(results, idle, "direct_to_workers+FASTLOOP=1", "actor round trip")
    asleep = load(results, named("dask_idle"))["rows"]["FASTLOOP=1"]
    echo = {r["arm"]: r for r in load(results, named("echo_socketpair"))["results"]}[
        "FASTLOOP=1"
    ]
    startup = {
        row["program"]: row["cpu"]
        for row in load(results, named("startup"))["programs"]
    }
    observe = {
        (r["name"], r["observer"], r["baseline"]): r
        for r in load(results, named("observe_overhead"))["results"]
    }
    watchdog = observe["onloop-chain", "watchdog", "other-thread"]
    link = f"({RESULTS_PAGE}#"
    return [
        f"Measured on CPython {python} with Tornado {data['tornado']}; each "
        f"figure's table, for every Python measured, is in [results]({RESULTS_PAGE}).",
        "",
        "- **Beside threads that compute in Python** (dask/distributed#6325): a busy "
        f"dask worker's 1 ms actor call takes {_ratio(busy_dask)} of stock's time "
        f"(p50), a Tornado server's request {_ratio(busy_http)} "
        f"([whole applications]{link}whole-applications)).",
        f"- **Idle**: a dask actor call takes {_ratio(idle_call)} of stock's time, "
        f"{_ratio(idle_uv)} with uvloop, {_ratio(direct)} with "
        "`direct_to_workers=True`, which fastloop's advice names "
        f"([dask LocalCluster]{link}dask-localcluster)); a Tornado server's "
        f"request {_ratio(idle_http)} "
        f"([Tornado HTTP server]{link}tornado-http-server-under-wrk)).",
        "- **An idle dask cluster sleeps**: a scheduler, nanny and worker started "
        "from the command line wake "
        f"{_ratio(asleep['trio_wakeups_per_s_vs_stock'])} as often as stock's and "
        f"burn {_ratio(asleep['trio_cpu_percent_vs_stock'])} of its CPU, while "
        "every figure dask reports keeps its meaning "
        "([what an idle cluster burns](docs/dask.md#what-an-idle-cluster-burns)).",
        "- **The loop's own operations**: a burst of on-loop `add_callback` takes "
        f"{_ratio(bench['onloop-burst']['patched_vs_stock'])} of stock's time, "
        "from two threads "
        f"{_ratio(bench['xthread-burst-2']['patched_vs_stock'])}; a 64-byte "
        f"IOStream echo {_ratio(echo)}, counting included "
        f"([loop operations]{link}loop-operations)).",
        "- **Seeing what blocks the loop**, for what it costs: a watchdog that logs "
        f"the stuck stack ({_ratio(watchdog)} on a callback chain), a sampling "
        "profiler, the time every socket write held the loop, GIL waits "
        "([observers](docs/blocking.md)).",
        "- **Nothing before the first event loop**: `FASTLOOP=1` adds "
        f"{_added(startup['pass'])} to `python -c pass` and "
        f"{_added(startup['import tornado.web'])} to `import tornado.web`; the "
        f"patches install as the process makes its first loop ([start-up]{link}start-up)).",
    ]


#: The README's two set-up commands: the main job, and the tests (which
#: ``.ci/run`` runs exactly as written).
BENCH_COMMAND = "python3 -m venv .venv && .venv/bin/pip install '.[bench]' && .venv/bin/fastloop bench"
TEST_COMMAND = (
    "python3 -m venv .venv && .venv/bin/pip install '.[test]' && .venv/bin/pytest"
)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def commands(results: Path) -> list[str]:
    """The two commands, each with how long its last recorded run took here."""
    bench = load(results, "bench.json")
    quick = load(results, "bench_quick.json")
    tests = load(results, "test_command.json")
    return [
        "```sh",
        BENCH_COMMAND,
        "```",
        "",
        f"The last full run here took {_minutes(bench['seconds'])} after the "
        f"install (`fastloop bench --quick`: {_minutes(quick['seconds'])}); the "
        "figures are under [Results](docs/results.md#loop-operations).",
        "",
        "The tests: fastloop's suite, then Tornado's own suite with and without "
        "every patch, which must give the same results test for test:",
        "",
        "```sh",
        TEST_COMMAND,
        "```",
        "",
        f"It took {_minutes(tests['seconds'])} here from a fresh clone, the install "
        f"included (CPython {tests['python']}, `bench/time_test_command.py`).",
    ]
