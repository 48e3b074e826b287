"""Activation: what the ``fastloop.pth`` line runs at start-up, and ``configure()``.

The one module that turns settings into running things: the start-up
sequence (``run()``, called by the ``.pth`` line and the ``sitecustomize``
fallback when a ``FASTLOOP*`` activation variable is set), ``configure()``
at run time, and what a change of setting sets in motion, as each row of
``fastloop.config.SETTINGS`` names it (``follows``: the watchdog, the GIL
probe, the profiler, the switch interval, the exit report).

``run()`` runs inside ``site`` at interpreter start-up, before the
application: it must not raise, must not import Tornado (patches arm
post-import hooks instead), and reports a bad setting in one line on
stderr.  Every process started under ``FASTLOOP=1`` pays for what this
imports, so it loads the settings and the registry only (``fastloop/__init__``
loads its names lazily); each patch's module loads with its target module,
the watchdog and the profiler only when their variable is set.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

_started = False
_exit_report_armed = False


def activated(environ: Mapping[str, str]) -> bool:
    """Whether the environment asks for fastloop at start-up."""
    from fastloop.config import ACTIVATING

    return any(environ.get(variable) for variable in ACTIVATING)


def run() -> None:
    """Start-up: act on the ``FASTLOOP*`` variables, if one activates fastloop."""
    # In a virtual environment ``site`` may process site-packages twice (once
    # for the venv, once for the prefixes it points at) and runs every .pth
    # line each time: act on the first call only.
    global _started
    if _started or not activated(os.environ):
        return
    _started = True
    try:
        from fastloop import config
        from fastloop.patches import registry

        names, problems = config.patches_from_environ(
            os.environ, registry.known(), registry.default_set()
        )
        chosen, setting_problems = config.settings_from_environ(os.environ)
        for problem in problems + setting_problems:
            print(problem, file=sys.stderr)
        for name, value in chosen.items():
            setattr(config.settings, name, value)
        follow(name for name, value in chosen.items() if value is not None)
        if os.environ.get("FASTLOOP") and (names is None or names):
            registry.install(names)
    except Exception as exc:  # start-up must go on whatever happens here
        print(f"fastloop: not activated: {exc!r}", file=sys.stderr)


def configure(**changes: object) -> None:
    """Change settings at run time; same names and values as the variables.

    Raises ``ValueError`` naming the setting and what it accepts; nothing is
    changed unless every value is valid.
    """
    from fastloop import config

    parsed: dict[str, object] = {}
    for name, value in changes.items():
        if name not in config.BY_NAME:
            valid = ", ".join(config.BY_NAME)
            raise ValueError(f"unknown fastloop setting {name!r}; valid: {valid}")
        try:
            parsed[name] = config.parse_setting(name, value)
        except config.SettingError as accepted:
            raise ValueError(
                f"fastloop setting {name}={value!r}: expected {accepted}"
            ) from None
    for name, value in parsed.items():
        setattr(config.settings, name, value)
    follow(parsed)


def follow(names: Iterable[str]) -> None:
    """Set in motion what these settings' rows say follows them, in table order."""
    from fastloop.config import SETTINGS, settings

    wanted = set(names)
    for row in SETTINGS:
        if row.name in wanted and row.follows:
            module, _, function = row.follows.partition(":")
            getattr(importlib.import_module(module), function)(
                getattr(settings, row.name)
            )


def arm_exit_report(target: str | None) -> None:
    """Write the report when the interpreter exits, as ``settings.report`` says then."""
    global _exit_report_armed
    if target is not None and not _exit_report_armed:
        _exit_report_armed = True
        from fastloop.runtime import exit_outputs

        exit_outputs.register(_exit_report)


def _exit_report() -> None:
    import json

    import fastloop
    from fastloop.config import settings

    target = settings.report
    if target and target != "stderr":
        target = target.replace("{pid}", str(os.getpid()))
    try:
        if target == "stderr":
            print(fastloop.report(), file=sys.stderr)
        elif target:
            with open(target, "w", encoding="utf-8") as handle:
                json.dump(fastloop.stats().to_dict(), handle, indent=1)
                handle.write("\n")
    except Exception as exc:  # at exit, one line rather than a traceback
        print(
            f"fastloop: could not write the report to {target!r}: {exc}",
            file=sys.stderr,
        )
