"""``fastloop doctor``: what this interpreter has, and whether fastloop can apply."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from typing import Any

from fastloop.cli._arguments import Commands

TYPE_CHECKING = False
if TYPE_CHECKING:
    import asyncio

    from fastloop.dask import settings as dask_config

LOOPS = ("asyncio", "uvloop")
#: A patch of a package that is not installed is off, not failed (dask's).
NOT_INSTALLED = "is not installed"


def add_parser(commands: Commands) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="check this interpreter: versions, loop, .pth hook, each patch's verdict",
    )
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.add_argument(
        "--loop",
        choices=LOOPS,
        help="answer for an application that runs this loop "
        "(default: the running loop, else the one asyncio.new_event_loop() "
        "makes here)",
    )


def main(args: argparse.Namespace, top: argparse.ArgumentParser) -> int:
    import json

    if args.loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
        print("fastloop doctor: --loop uvloop needs uvloop", file=sys.stderr)
        return 2
    report = diagnose(loop=args.loop)
    print(json.dumps(report, indent=1) if args.json else render(report))
    return 0 if report["ok"] else 1


def _version(distribution: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _kind(loop: object) -> str:
    """'uvloop' for a loop of uvloop's, else 'asyncio' (a loop of asyncio's)."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def _asyncio_loop() -> asyncio.AbstractEventLoop:
    """A loop of asyncio's own, whatever the application set as default."""
    import asyncio

    made = getattr(asyncio, "EventLoop", None)  # 3.13+: the platform's default
    if made is not None:
        loop: asyncio.AbstractEventLoop = made()
        return loop
    if sys.platform == "win32":
        return asyncio.ProactorEventLoop()
    return asyncio.SelectorEventLoop()


@contextlib.contextmanager
def _sample_loop(loop: str | None = None) -> Iterator[asyncio.AbstractEventLoop]:
    """A loop of the kind the application runs, for the block.

    ``loop`` None: the loop running in this thread, if any (``diagnose()``
    called by the application); else a new one from ``asyncio.new_event_loop``,
    the factory ``asyncio.run`` and Tornado's ``IOLoop()`` use when given
    none, which an application's uvloop policy also governs (read through
    the loop it makes, never through the policy API, which 3.14 deprecates
    and 3.16 removes).  An application that passes uvloop as ``asyncio.run``'s
    ``loop_factory`` is seen only while its loop runs: ``--loop uvloop``
    answers for it from outside.  A loop made here is closed after the block.
    """
    import asyncio

    running = asyncio._get_running_loop() if loop is None else None
    if running is not None:
        yield running
        return
    if loop == "uvloop":
        import uvloop

        made: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    elif loop == "asyncio":
        made = _asyncio_loop()
    else:
        made = asyncio.new_event_loop()
    try:
        yield made
    finally:
        made.close()


def _verdicts(
    loop: asyncio.AbstractEventLoop,
) -> tuple[dict[str, str | None], dict[str, str]]:
    """Each patch's check(), then its check_loop() on ``loop``, and those off
    there by design.

    A patch that applies but keeps stock behaviour on this kind of loop (under
    uvloop, the patches of asyncio's selector loop: uvloop already does that
    work) is a supported set-up, not a failure; so is a patch that declines
    for want of a GIL on a free-threaded build.
    """
    from fastloop.patches import NO_GIL, registry

    verdicts = {name: registry.check(name) for name in registry.known()}
    for name in verdicts:
        package = registry.target(name).partition(".")[0]
        if importlib.util.find_spec(package) is None:
            verdicts[name] = f"{package} {NOT_INSTALLED}"
    by_design = {
        name: why
        for name, why in verdicts.items()
        if why is not None and (why.startswith(NO_GIL) or why.endswith(NOT_INSTALLED))
    }
    for name, why in verdicts.items():
        if why is None:
            off = registry.check_loop(name, loop)
            if off is not None:
                verdicts[name] = by_design[name] = off
    return verdicts, by_design


def _import_targets() -> None:
    """Import each patch's target module whose package is installed."""
    from fastloop.patches import registry

    for name in registry.known():
        target = registry.target(name)
        if importlib.util.find_spec(target.partition(".")[0]) is not None:
            with contextlib.suppress(Exception):  # check() says why
                importlib.import_module(target)


def dask_settings() -> dict[str, Any] | None:
    """The two dask settings that gain more than a patch on an idle cluster,
    as dask's config sets them here (None without dask), with advice."""
    if importlib.util.find_spec("dask") is None:
        return None
    import dask.config

    from fastloop import _measured

    direct = dask.config.get("distributed.client.direct-to-workers", None)
    event_loop = dask.config.get("distributed.admin.event-loop", "tornado")
    advice = []
    if not direct:
        advice.append(
            "actor calls go through the scheduler unless clients call workers "
            "directly: distributed.client.direct-to-workers: true (or "
            f"Client(direct_to_workers=True)), {_measured.DIRECT_TO_WORKERS}; "
            "it needs every worker reachable from the client"
        )
    if event_loop != "uvloop" and importlib.util.find_spec("uvloop") is not None:
        advice.append(
            "uvloop is installed and unused: distributed.admin.event-loop: "
            f"uvloop, {_measured.UVLOOP}"
        )
    return {"direct_to_workers": direct, "event_loop": event_loop, "advice": advice}


def diagnose(
    environ: dict[str, str] | None = None, loop: str | None = None
) -> dict[str, Any]:
    """What applies here, and why not; ``loop`` answers for an app running it."""
    import platform
    import sysconfig

    import fastloop
    from fastloop import config
    from fastloop.cli import run
    from fastloop.dask import settings as dask_config
    from fastloop.observers import watchdog
    from fastloop.patches import fingerprints, gil_enabled, loop_class, registry

    env = dict(os.environ if environ is None else environ)
    section = dask_config.dask_section()
    chosen = dask_config.choose(env, (), section)
    running = watchdog.process_watchdog()
    # Patches active here are taken off for the look: check() reads the
    # stock internals, not fastloop's replacements, and a loop made for the
    # look is a stock one.  Importing the targets first (distributed's too,
    # where installed: doctor is not the application) lets patches armed by
    # FASTLOOP apply, so that they come off too.
    _import_targets()
    with registry.suspended(), _sample_loop(loop) as sample:
        verdicts, by_design = _verdicts(sample)
        kind, event_loop = _kind(sample), loop_class(sample)
    wanted = sorted(
        registry.default_set() if chosen.patches is None else chosen.patches
    )
    settings = {"FASTLOOP": _from(env.get("FASTLOOP", "(unset)"), chosen, "patches")}
    for row in config.SETTINGS:
        settings[row.variable] = _from(
            row.doctor(env.get(row.variable)), chosen, row.name
        )
    dask_only = (dask_config.CONFIG, dask_config.ARGUMENTS)
    here = [p for p in chosen.problems if not p.variable.startswith(dask_only)]
    in_dask = [p for p in chosen.problems if p.variable.startswith(dask_only)]
    snapshot = fastloop.stats()
    return {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "executable": sys.executable,
        "versions": {
            "fastloop": fastloop.__version__,
            **{name: _version(name) for name in ("tornado", "uvloop")},
        },
        "build": {
            "free_threaded": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
            "gil_enabled": gil_enabled(),
        },
        "loop": kind,
        "event_loop": event_loop,
        "pth_installed": run.pth_active(),
        "installed_now": sorted(registry.installed()),
        "watchdog": {
            "running_now": snapshot.watchdog.watching,
            "threshold_ms": running.threshold_ms if running else None,
            "block_ms_setting": env.get("FASTLOOP_BLOCK_MS"),
        },
        "gil": snapshot.to_dict()["gil"],
        "switchinterval": snapshot.to_dict()["switchinterval"],
        "switch_interval_now_us": sys.getswitchinterval() * 1e6,
        "patches": verdicts,
        "verified": fingerprints.verified_releases(),
        "off_by_design": by_design,
        "dask": dask_settings(),
        "requested": wanted,
        "settings": settings,
        "problems": [str(p) for p in here],
        "dask_problems": [str(p) for p in in_dask],
        "ok": not here
        and all(verdicts.get(name) is None or name in by_design for name in wanted),
    }


def _from(line: str, chosen: dask_config.Chosen, name: str) -> str:
    """A settings line; where dask's config sets the value (for dask servers,
    through the preload), that value and its key."""
    from fastloop.dask import settings as dask_config

    source = chosen.sources[name]
    if not source.startswith(dask_config.CONFIG):
        return line
    value = chosen.configured[dask_config.key(name)]
    return f"{line}; in dask servers: {value!r} (from {source})"


def _watchdog_line(state: dict[str, Any]) -> str:
    if state["threshold_ms"] is not None:
        return f"on, threshold {state['threshold_ms']:g} ms (FASTLOOP_BLOCK_MS)"
    if state["running_now"]:
        return "on (fastloop.watch in this process)"
    if state["block_ms_setting"]:
        return "off here; FASTLOOP_BLOCK_MS starts it in each new process"
    return "off: set FASTLOOP_BLOCK_MS=N to log stacks of loops blocked > N ms"


def _switch_line(report: dict[str, Any]) -> str:
    from fastloop.telemetry.schema_gil import SwitchIntervalStats

    if "switchinterval" in report["installed_now"]:
        stats = SwitchIntervalStats.from_dict(report["switchinterval"])
        return str(SwitchIntervalStats.interval.show(stats))
    return (
        f"{report['switch_interval_now_us']:g} us now; switchinterval is not active "
        "in this process (FASTLOOP=1 makes it auto)"
    )


def _build_line(build: dict[str, bool]) -> str:
    if build["gil_enabled"]:
        return "GIL enabled" + (
            " (a free-threaded build running with its GIL)"
            if build["free_threaded"]
            else ""
        )
    return (
        "free-threaded, GIL disabled: the patches that rely on the GIL are off "
        "(see below)"
    )


def _verdict(report: dict[str, Any], name: str, why: str | None) -> str:
    from fastloop.patches import NO_GIL

    if why is None:
        return "ok"
    if name not in report["off_by_design"]:
        return f"declines: {why}"
    if why.startswith(NO_GIL) or why.endswith(NOT_INSTALLED):
        return f"off, by design: {why}"
    return f"off under {report['loop']}, by design: {why}"


def render(report: dict[str, Any]) -> str:
    versions = report["versions"]
    lines = [
        f"python        {report['python']} ({report['executable']})",
        f"build         {_build_line(report['build'])}",
        "versions      "
        + ", ".join(f"{k} {v or 'not installed'}" for k, v in versions.items()),
        f"event loop    {report['loop']}: {report['event_loop']}",
        "fastloop.pth  "
        + (
            "installed: FASTLOOP=1 works for this interpreter"
            if report["pth_installed"]
            else "not in a site directory: `fastloop run` falls back to sitecustomize"
        ),
        f"active now    {', '.join(report['installed_now']) or 'none (this process)'}",
        f"watchdog      {_watchdog_line(report['watchdog'])}",
        "gil           "
        + (
            report["gil"]["advice"]
            or "no contention measured in this process (an application's "
            "report() says it for its own threads)"
        ),
        f"switch        {_switch_line(report)}",
        "verified      "
        + "; ".join(
            f"{publisher} {', '.join(versions)}"
            for publisher, versions in report["verified"].items()
        )
        + " (the releases each patch's code was checked on)",
        "patches",
    ]
    width = max(map(len, report["patches"]), default=0) + 2
    for name, why in report["patches"].items():
        mark = "requested" if name in report["requested"] else "not requested"
        lines.append(f"  {name:<{width}}{_verdict(report, name, why)} ({mark})")
    if report["dask"] is not None:
        lines.append(
            "dask          direct-to-workers "
            f"{report['dask']['direct_to_workers']}, event-loop "
            f"{report['dask']['event_loop']}"
        )
        lines += [f"  advice: {advice}" for advice in report["dask"]["advice"]]
    lines.append("settings")
    for variable, value in report["settings"].items():
        lines.append(f"  {variable:<29}{value}")
    for problem in report["problems"]:
        lines.append(f"  INVALID: {problem}")
    for problem in report["dask_problems"]:
        lines.append(f"  INVALID in dask servers: {problem}")
    lines.append(
        "verdict       "
        + (
            "ok: everything requested can apply"
            + (", or is off by design here" if report["off_by_design"] else "")
            if report["ok"]
            else "NOT OK: see above"
        )
    )
    return "\n".join(lines)
