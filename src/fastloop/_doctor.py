"""``fastloop doctor``: what this interpreter has, and whether fastloop can apply."""

from __future__ import annotations

import asyncio
import os
import platform
import sys
from importlib import metadata
from typing import Any

from fastloop import _launch, _registry, _stats, config, watchdog


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _loop_kind() -> str:
    policy = asyncio.get_event_loop_policy()
    loop = policy.new_event_loop()
    try:
        return f"{type(loop).__module__}.{type(loop).__qualname__}"
    finally:
        loop.close()


def diagnose(environ: dict[str, str] | None = None) -> dict[str, Any]:
    env = dict(os.environ if environ is None else environ)
    requested, problems = config.patches_from_environ(env, _registry.known())
    _, setting_problems = config.settings_from_environ(env)
    problems += setting_problems
    running = watchdog.process_watchdog()
    verdicts = _registry.available()
    wanted = (
        list(_registry.known())
        if requested is None or not env.get("FASTLOOP")
        else sorted(requested)
    )
    settings = {
        variable: env.get(variable, "(unset)")
        for variable in ("FASTLOOP", *config.SETTING_VARIABLES.values())
    }
    settings["FASTLOOP_SLOW_WRITE_MS"] = _slow_write_line(
        env.get("FASTLOOP_SLOW_WRITE_MS")
    )
    return {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "executable": sys.executable,
        "versions": {
            name: _version(name) for name in ("fastloop", "tornado", "wrapt", "uvloop")
        },
        "event_loop": _loop_kind(),
        "pth_installed": _launch.pth_active(),
        "installed_now": sorted(_registry.installed()),
        "watchdog": {
            "running_now": _stats.WATCHDOG.snapshot().watching,
            "threshold_ms": running.threshold_ms if running else None,
            "block_ms_setting": env.get("FASTLOOP_BLOCK_MS"),
        },
        "patches": verdicts,
        "requested": wanted,
        "settings": settings,
        "problems": [str(p) for p in problems],
        "ok": not problems and all(verdicts.get(name) is None for name in wanted),
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
        f"event loop    {report['event_loop']}",
        "fastloop.pth  "
        + (
            "installed: FASTLOOP=1 works for this interpreter"
            if report["pth_installed"]
            else "not in a site directory: `fastloop run` falls back to sitecustomize"
        ),
        f"active now    {', '.join(report['installed_now']) or 'none (this process)'}",
        f"watchdog      {_watchdog_line(report['watchdog'])}",
        "patches",
    ]
    for name, why in report["patches"].items():
        mark = "requested" if name in report["requested"] else "not requested"
        lines.append(
            f"  {name:<14}{'ok' if why is None else 'declines: ' + why} ({mark})"
        )
    lines.append("settings")
    for variable, value in report["settings"].items():
        lines.append(f"  {variable:<24}{value}")
    for problem in report["problems"]:
        lines.append(f"  INVALID: {problem}")
    lines.append(
        "verdict       "
        + (
            "ok: everything requested can apply"
            if report["ok"]
            else "NOT OK: see above"
        )
    )
    return "\n".join(lines)
