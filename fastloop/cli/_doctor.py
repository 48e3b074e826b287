"""``fastloop doctor``: what this interpreter has, and whether fastloop can apply."""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import sys
from collections.abc import Iterator
from importlib import metadata
from typing import Any

import fastloop
from fastloop import _registry, _stats, ab, config
from fastloop.cli import _launch
from fastloop.observers import watchdog


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


LOOPS = ("asyncio", "uvloop")


def current_loop() -> str:
    """The loop this interpreter's policy makes: 'uvloop' or 'asyncio'."""
    policy = type(asyncio.get_event_loop_policy())
    return "uvloop" if policy.__module__.startswith("uvloop") else "asyncio"


@contextlib.contextmanager
def _policy(loop: str) -> Iterator[None]:
    """Answer as if the application ran ``loop``: its policy, for the block."""
    saved = asyncio.get_event_loop_policy()
    if loop == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    else:
        asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())
    try:
        yield
    finally:
        asyncio.set_event_loop_policy(saved)


def _loop_kind() -> str:
    policy = asyncio.get_event_loop_policy()
    loop = policy.new_event_loop()
    try:
        return f"{type(loop).__module__}.{type(loop).__qualname__}"
    finally:
        loop.close()


def _verdicts(loop: str) -> tuple[dict[str, str | None], dict[str, str]]:
    """Each patch's check() under ``loop``, and those off there by design.

    A patch that applies under asyncio's loop and declines under uvloop is a
    supported set-up (uvloop already does that work), not a failure.
    """
    # Patches active here are taken off for the look: check() reads the
    # stock internals, not fastloop's replacements.  Importing the targets
    # first lets patches armed by FASTLOOP apply, so that they come off too.
    _registry.available()
    with ab.stock():
        with _policy(loop):
            verdicts = {name: _registry.check(name) for name in _registry.known()}
        by_design: dict[str, str] = {}
        if loop == "uvloop":
            with _policy("asyncio"):
                for name, why in verdicts.items():
                    if why is not None and _registry.check(name) is None:
                        by_design[name] = why
    return verdicts, by_design


def diagnose(
    environ: dict[str, str] | None = None, loop: str | None = None
) -> dict[str, Any]:
    """What applies here, and why not; ``loop`` answers for an app running it."""
    env = dict(os.environ if environ is None else environ)
    requested, problems = config.patches_from_environ(
        env, _registry.known(), _registry.default_set()
    )
    _, setting_problems = config.settings_from_environ(env)
    problems += setting_problems
    profile_problem = config.profile_problem(env)
    if profile_problem is not None:
        problems.append(profile_problem)
    running = watchdog.process_watchdog()
    loop = loop or current_loop()
    verdicts, by_design = _verdicts(loop)
    with _policy(loop):
        loop_class = _loop_kind()
    wanted = (
        list(_registry.default_set())
        if requested is None or not env.get("FASTLOOP")
        else sorted(requested)
    )
    settings = {
        variable: env.get(variable, "(unset)")
        for variable in (
            "FASTLOOP",
            *config.SETTING_VARIABLES.values(),
            "FASTLOOP_PROFILE",
        )
    }
    settings["FASTLOOP_SLOW_WRITE_MS"] = _slow_write_line(
        env.get("FASTLOOP_SLOW_WRITE_MS")
    )
    return {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "executable": sys.executable,
        "versions": {
            "fastloop": fastloop.__version__,
            **{name: _version(name) for name in ("tornado", "wrapt", "uvloop")},
        },
        "loop": loop,
        "event_loop": loop_class,
        "pth_installed": _launch.pth_active(),
        "installed_now": sorted(_registry.installed()),
        "watchdog": {
            "running_now": watchdog.WATCHDOG.snapshot().watching,
            "threshold_ms": running.threshold_ms if running else None,
            "block_ms_setting": env.get("FASTLOOP_BLOCK_MS"),
        },
        "gil": _stats.stats().to_dict()["gil"],
        "patches": verdicts,
        "off_by_design": by_design,
        "requested": wanted,
        "settings": settings,
        "problems": [str(p) for p in problems],
        "ok": not problems
        and all(verdicts.get(name) is None or name in by_design for name in wanted),
    }


def _slow_write_line(value: str | None) -> str:
    # Off unless asked for: a busy machine makes any write look slow.
    try:
        threshold = float(config.parse_setting("slow_write_ms", value or 0))  # type: ignore[arg-type]
    except config.SettingError:
        return f"{value} (invalid)"
    shown = "(unset)" if value is None else value
    if not threshold:
        return f"{shown}: slow-write log off (the default); every write is still timed"
    return f"{shown}: warn about write_to_fd calls slower than {threshold:g} ms"


def _watchdog_line(state: dict[str, Any]) -> str:
    if state["threshold_ms"] is not None:
        return f"on, threshold {state['threshold_ms']:g} ms (FASTLOOP_BLOCK_MS)"
    if state["running_now"]:
        return "on (fastloop.watch in this process)"
    if state["block_ms_setting"]:
        return "off here; FASTLOOP_BLOCK_MS starts it in each new process"
    return "off: set FASTLOOP_BLOCK_MS=N to log stacks of loops blocked > N ms"


def render(report: dict[str, Any]) -> str:
    versions = report["versions"]
    lines = [
        f"python        {report['python']} ({report['executable']})",
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
        "patches",
    ]
    for name, why in report["patches"].items():
        mark = "requested" if name in report["requested"] else "not requested"
        if why is None:
            verdict = "ok"
        elif name in report["off_by_design"]:
            verdict = f"off under {report['loop']}, by design: {why}"
        else:
            verdict = f"declines: {why}"
        lines.append(f"  {name:<16}{verdict} ({mark})")
    lines.append("settings")
    for variable, value in report["settings"].items():
        lines.append(f"  {variable:<29}{value}")
    for problem in report["problems"]:
        lines.append(f"  INVALID: {problem}")
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
