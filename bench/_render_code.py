"""The docs' facts that come from the code: settings, patches, CLI usage, policy constants.

Nothing here reads bench/results/: each block is what the installed
fastloop says about itself, so a renamed setting or a new patch changes
the pages when ``render_docs.py`` runs, and ``--check`` fails until then.
"""

from __future__ import annotations

import argparse
import textwrap

from fastloop import config
from fastloop.patches import RECORDS, registry


def _default(row: config.Setting) -> str:
    value = row.default
    if value is None:
        return "unset: off"
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"default `{value}`"


def _fields() -> dict[str, object]:
    """The code's figures a setting's ``effect`` names in braces."""
    from fastloop.patches.write_to_fd import SAMPLE_EVERY

    return {"sample_every": SAMPLE_EVERY}


def _opt_in() -> list[str]:
    return [name for name, _, _, on in RECORDS if not on]


def settings_table() -> list[str]:
    """Every ``FASTLOOP*`` variable: ``FASTLOOP`` itself, then ``config.SETTINGS``."""
    opt_in = ", ".join(f"`{name}`" for name in _opt_in())
    lines = [
        "| variable | values | effect |",
        "|---|---|---|",
        "| `FASTLOOP` | unset, empty, `0`, `false` | nothing; unset, the `.pth` line "
        "imports nothing |",
        "| | `1`, `true`, `all` | every patch of the default set |",
        "| | `add_callback,wakeup,...` | only the named patches; `1`, `true` or "
        f"`all` in a list is the default set, so `1,{_opt_in()[0]}` adds the "
        f"opt-in {opt_in}; a value with no usable name installs nothing (the "
        "dask preload agrees) |",
    ]
    for row in config.SETTINGS:
        effect = row.effect.format(**_fields())
        lines.append(
            f"| `{row.variable}` | {row.accepted}; {_default(row)} | {effect} |"
        )
    return lines


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    """``fastloop``'s subcommands, by name, as its parser builds them."""
    from fastloop.cli import parser

    return next(
        action.choices
        for action in parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )


def _usage(command: str) -> str:
    """``fastloop COMMAND``'s usage line, as argparse prints it, on one line."""
    usage = _subcommands()[command].format_usage()
    return " ".join(usage.removeprefix("usage: ").split())


def run_usage() -> list[str]:
    """``fastloop run``'s flags: the settings table's, with ``--patches``."""
    return ["```sh", _usage("run"), "```"]


def cli_usage() -> list[str]:
    """Every subcommand's usage line."""
    return [
        "```sh",
        *(_usage(name) for name in _subcommands()),
        "fastloop --version",
        "```",
    ]


#: The public API, one line each: (call, what it does).  A test checks that
#: every name is in ``fastloop.__all__``.
API = (
    (
        "install(patches=None) -> frozenset[str]",
        "active, or armed until their module is imported",
    ),
    ("uninstall(patches=None)", "restores the original function objects"),
    ("installed() -> frozenset[str]", "active now"),
    ("available() -> dict[str, str | None]", "None, or why a patch cannot apply here"),
    ("patched(patches=None)", "context manager; restores the prior state"),
    ("configure(**settings)", None),
    (
        "stats() -> Snapshot",
        "immutable; .to_dict() is JSON-able; .installed, .gil, .switchinterval, ...",
    ),
    ("reset_stats()", "every counter back to zero"),
    ("report() -> str", "the table shown under Results"),
    ("stream_stats(stream) -> StreamStats", "one stream's write counters"),
    ("watch(threshold_ms=100, loop=None) -> Watchdog", ".stop(); a context manager"),
    (
        "profile(interval_ms=10, loop=None) -> Profile",
        "context manager or .start()/.stop(); .collapsed(), .speedscope()",
    ),
)


def configure_keywords() -> list[str]:
    """The API summary, ``configure()``'s keywords from ``config.SETTINGS``."""
    keywords = ", ".join(row.name for row in config.SETTINGS)
    lines = ["```python"]
    for call, what in API:
        notes = [what] if what else textwrap.wrap(keywords, 40)
        lines.append(f"fastloop.{call:<47} # {notes[0]}")
        lines += [f"{'':<57}# {note}" for note in notes[1:]]
    lines += [
        "fastloop.prometheus.register(registry=None)       # export stats() on each "
        "scrape (tornado-fastloop[prometheus])",
        "```",
    ]
    return lines


def patch_names() -> list[str]:
    """The patch names and the default set, from ``RECORDS``."""
    names = ", ".join(f"`{name}`" for name, _, _, _ in RECORDS)
    opt_in = _opt_in()
    return [
        f"Patch names: {names}. The default set is all but "
        + ", ".join(f"`{name}`" for name in opt_in)
        + f", which is opt-in (`FASTLOOP=all,{opt_in[0]}`, `install([...])`): it "
        "trades something a whole application can feel (see [The GIL](gil.md) and "
        "the tables under [Results](results.md)), which only the application can "
        "weigh.",
    ]


def preload_log() -> list[str]:
    """What the dask preload logs in a worker with the default set, where
    gilknocker is not installed (dask's default config)."""
    from fastloop.dask.gil import fastloop_source

    active = ", ".join(sorted(registry.default_set()))
    return [
        "```",
        "distributed.preloading - INFO - fastloop: preload in Worker: patches "
        f"{active} active; GIL contention from {fastloop_source('1ms')}",
        "```",
    ]


def dask_settings_table() -> list[str]:
    """Each setting's key in dask's config and its preload argument."""
    from fastloop.dask import settings as dask_settings

    variables = ["FASTLOOP", *(row.variable for row in config.SETTINGS)]
    lines = [
        "| dask config | preload argument | variable |",
        "|---|---|---|",
    ]
    for key, variable in zip(dask_settings.keys(), variables, strict=True):
        lines.append(f"| `{dask_settings.SECTION}.{key}` | `--{key}` | `{variable}` |")
    return lines


def prometheus_rules() -> list[str]:
    """fastloop/rules/prometheus.yml, as shipped."""
    from fastloop.rules import PROMETHEUS

    with open(PROMETHEUS, encoding="utf-8") as rules:
        return ["```yaml", *rules.read().splitlines(), "```"]


def replaces_table() -> list[str]:
    """What each patch replaces and the private names it relies on."""
    lines = [
        "| patch | replaces | private names it relies on |",
        "|---|---|---|",
    ]
    for patch in registry.records():
        lines.append(f"| `{patch.name}` | {patch.replaces} | {patch.relies_on} |")
    return lines


def _ci_cells(name: str) -> set[tuple[str, str]]:
    """The (CPython, Tornado) cells ``.ci/run`` lists in its array ``name``."""
    import re
    from pathlib import Path

    script = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    found = re.search(rf"^{name}=\((.*)\)$", script, re.MULTILINE)
    if found is None:
        raise SystemExit(f".ci/run has no {name}=(...) line")
    return {tuple(cell.split()) for cell in re.findall(r'"([^"]+)"', found[1])}  # type: ignore[misc]


def support_table() -> list[str]:
    """The support matrix, where each cell runs, and the releases verified."""
    from fastloop.patches import fingerprints
    from fastloop.patches.verified import SUPPORTED

    ci = _ci_cells("cells") | _ci_cells("sid_cells")
    tornados = sorted({t for ts in SUPPORTED.values() for t in ts}, key=float)
    releases = fingerprints.verified_releases()
    lines = [
        "| CPython | " + " | ".join(f"Tornado {t}" for t in tornados) + " | verified |",
        "|---" * (len(tornados) + 2) + "|",
    ]
    for python, supported in SUPPORTED.items():
        row = [
            ("CI" if (python, t) in ci else "nox") if t in supported else "-"
            for t in tornados
        ]
        verified = [v for v in releases["CPython"] if v.startswith(f"{python}.")]
        lines.append(
            f"| {python} | " + " | ".join(row) + f" | {', '.join(verified) or 'none'} |"
        )
    lines += [
        "",
        "Tornado releases verified: " + ", ".join(releases["Tornado"]) + ".",
    ]
    return lines


def support_range() -> list[str]:
    """The support table in one sentence (README, docs/support.md)."""
    from fastloop.patches.verified import SUPPORTED

    def span(versions: list[str]) -> str:
        return versions[0] if len(versions) == 1 else f"{versions[0]}-{versions[-1]}"

    groups: dict[tuple[str, ...], list[str]] = {}
    for python, tornados in SUPPORTED.items():
        groups.setdefault(tornados, []).append(python)
    parts = [
        f"Tornado {span(list(tornados))} on {span(pythons)}"
        for tornados, pythons in groups.items()
    ]
    return [
        f"CPython {span(list(SUPPORTED))}: {'; '.join(parts)}; asyncio's default "
        "loop and uvloop, and from 3.14 zuvloop and rloop."
    ]


def policy_constants() -> list[str]:
    """How auto mode looks and decides, in the values the policy module has."""
    from fastloop.patches import _switch_controller as controller
    from fastloop.patches import _switch_policy as policy

    ladder = ", ".join(str(us) for us in policy.LADDER_US[:-1])
    budget = config.BY_NAME["switch_budget"].default
    return [
        f"A controller thread wakes every {policy.FAST_TICK_NS / 1e6:g} ms (every "
        f"{policy.SLOW_TICK_NS / 1e6:g} ms while calm, and once "
        f"{policy.SETTLE_TICKS} ticks in a row have changed nothing, since each "
        "wake-up costs a compute thread a hand-over of the GIL and back; not at "
        f"all after {policy.DORMANT_TICKS} ticks in a row with nothing to decide, "
        "until a loop iteration finds the other threads computing, a thread "
        "starts or an IOLoop is made, where every loop can wake it: not beside a "
        "uvloop loop or without the add_callback patch), notes how "
        "late it woke, which is the GIL wait any waking thread pays (a loop woken "
        "by I/O too), and reads every thread's CPU clock. Nothing changes until its "
        f"wake-ups come {policy.ENGAGE_WAIT_NS / 1e6:g} ms late "
        f"{policy.ENGAGE_TICKS} ticks in a row while a Tornado loop runs beside a "
        f"thread that computes; then it holds the shortest of {ladder} and "
        f"{policy.LADDER_US[-1]} us whose estimated cost stays within "
        f"`FASTLOOP_SWITCH_BUDGET` (default {budget:.0%} of the compute threads' "
        "throughput). The estimate is none with one compute thread (the hand-overs "
        "are then set by the loop's own requests, whatever the interval), and a "
        f"thread that ran less than {policy.COMPETING_PART:g} of the busiest one's "
        f"CPU time (smoothed over ticks, weight {controller.SMOOTHING:g}) does not "
        "count as a compute thread: it computes in bursts between waits, as dask's "
        "actor thread serving calls does, and hand-overs to it measured free. With "
        "two or more, the share lost at 100 us is "
        f"{policy.SHARE_AT_100US_FIT:.0%} while the compute threads fit the CPUs "
        "(the ones the process may run on, no more than its CPU quota buys, and "
        "of those the ones other processes leave it: their use past "
        f"{controller.TAKEN_SHARE:.0%} of a CPU takes one; each count rounded "
        "down, so that in doubt the interval is the longer) "
        f"and {policy.SHARE_AT_100US_OVER:.0%} beyond them (the thread handed to "
        "must first get a CPU), falling as the square root of the interval, which "
        "is how the measured loss fell (not as 1/interval, which a fixed cost per "
        "hand-over would give; the evidence is in "
        "[the design notes](design.md#the-switch-interval-policy)). It lengthens "
        "the interval at once when more compute threads make hand-overs dearer, "
        f"shortens it only after {policy.SHORTEN_TICKS} ticks that agree, and lets "
        f"go, back to CPython's 5 ms, after {policy.RELEASE_TICKS} ticks without a "
        "compute thread or when a check every "
        f"{policy.VALIDATE_EVERY_NS / 1e9:g} s at {policy.VALIDATE_US / 1000:g} ms "
        "finds that nothing holds the GIL any more (threads busy in C code that "
        "releases it use CPU without making anyone wait).",
    ]


def api_reference() -> list[str]:
    """One mkdocstrings entry per public name, from where it is defined."""
    import fastloop

    homes: dict[str, str] = fastloop._HOMES
    lines = []
    for name in fastloop.__all__:
        if name.startswith("_"):
            continue
        lines += [f"::: {homes.get(name, 'fastloop')}.{name}", ""]
    lines.append("::: fastloop.prometheus.register")
    return lines


def contracts() -> list[str]:
    """Each patch's contract: its record's summary, then its module docstring."""
    lines = []
    for patch, (_, _, module, on) in zip(registry.records(), RECORDS, strict=True):
        kind = "default set" if on else "opt-in"
        lines += [
            f"### `{patch.name}`",
            "",
            f"{patch.summary} ({kind}; `{module.replace('.', '/')}.py`).",
            "",
            f"::: {module}",
            "    options:",
            "      members: false",
            "      show_root_heading: false",
            "      show_root_toc_entry: false",
            "",
        ]
    return lines


def test_map() -> list[str]:
    """Each test module with the first line of its docstring."""
    import ast
    from pathlib import Path

    tests = Path(__file__).resolve().parents[1] / "tests"
    lines = ["| test module | what it covers |", "|---|---|"]
    for path in sorted(tests.glob("test_*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        lines.append(f"| `tests/{path.name}` | {doc.splitlines()[0]} |")
    return lines
