"""Activation: what the ``fastloop.pth`` line runs at start-up, and ``configure()``.

The one module that turns settings into running things: the start-up
sequence (``run()``, called by the ``.pth`` line and the ``sitecustomize``
fallback when a ``FASTLOOP*`` activation variable is set), ``configure()``
at run time, and what both set in motion: the process-wide watchdog, the
GIL probe, the switch interval that follows its setting, and the exit
report.  (Named for the ``.pth`` line that calls it; the README's start-up
figure lists the modules that line imports.)

``run()`` runs inside ``site`` at interpreter start-up, before the
application: it must not raise, must not import Tornado (patches arm
post-import hooks instead), and reports a bad setting in one line on
stderr.  Every process started under ``FASTLOOP=1`` pays for what this
imports, so it loads the settings and the registry only (``fastloop/__init__``
loads its names lazily); each patch's module loads with its target module,
the watchdog and the profiler only when their variable is set.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

#: The variables whose presence activates fastloop at start-up.  The
#: ``fastloop.pth`` line spells them out itself, because it must import
#: nothing while they are unset; a test keeps it in step with this.
ACTIVATING = ("FASTLOOP", "FASTLOOP_BLOCK_MS", "FASTLOOP_PROFILE", "FASTLOOP_REPORT")

_started = False


def activated(environ: Mapping[str, str]) -> bool:
    """Whether the environment asks for fastloop at start-up."""
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
        from fastloop import _registry, config

        names, problems = config.patches_from_environ(
            os.environ, _registry.known(), _registry.default_set()
        )
        chosen, setting_problems = config.settings_from_environ(os.environ)
        for problem in problems + setting_problems:
            print(problem, file=sys.stderr)
        for name, value in chosen.items():
            setattr(config.settings, name, value)
        follow_settings(config.settings.block_ms is not None)
        if os.environ.get("FASTLOOP_PROFILE"):
            from fastloop.observers import profiler

            profiler.profile_until_exit(os.environ["FASTLOOP_PROFILE"], os.environ)
        if os.environ.get("FASTLOOP") and (names is None or names):
            _registry.install(names)
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
        if name not in config.SETTING_VARIABLES:
            valid = ", ".join(config.SETTING_VARIABLES)
            raise ValueError(f"unknown fastloop setting {name!r}; valid: {valid}")
        try:
            parsed[name] = config.parse_setting(name, value)
        except config.SettingError as accepted:
            raise ValueError(
                f"fastloop setting {name}={value!r}: expected {accepted}"
            ) from None
    for name, value in parsed.items():
        setattr(config.settings, name, value)
    follow_settings("block_ms" in parsed, changed=frozenset(parsed))


def follow_settings(
    block_ms_changed: bool = True, changed: frozenset[str] = frozenset()
) -> None:
    """Arm the exit report, start or stop the watchdog and the GIL probe."""
    from fastloop.config import settings

    if settings.report is not None:
        arm_exit_report()
    if block_ms_changed:
        from fastloop.observers import watchdog

        watchdog.follow_setting(settings.block_ms)
    if "gil_probe_ms" in changed or settings.gil_probe_ms is not None:
        from fastloop.observers import gil

        gil.follow_setting(settings.gil_probe_ms)
    if "switch_interval_us" in changed:
        from fastloop.patches import switchinterval

        switchinterval.follow_setting()


_exit_report_armed = [False]


def arm_exit_report() -> None:
    """Write the report when the interpreter exits, as ``settings.report`` says then."""
    if not _exit_report_armed[0]:
        _exit_report_armed[0] = True
        from fastloop import _exit

        _exit.register(_exit_report)


def _exit_report() -> None:
    import json

    from fastloop import _report, _stats
    from fastloop.config import settings

    target = settings.report
    if target and target != "stderr":
        target = target.replace("{pid}", str(os.getpid()))
    try:
        if target == "stderr":
            print(_report.report(), file=sys.stderr)
        elif target:
            with open(target, "w", encoding="utf-8") as handle:
                json.dump(_stats.stats().to_dict(), handle, indent=1)
                handle.write("\n")
    except Exception as exc:  # at exit, one line rather than a traceback
        print(
            f"fastloop: could not write the report to {target!r}: {exc}",
            file=sys.stderr,
        )
