"""Activation: what the ``fastloop.pth`` line runs at start-up, and ``configure()``.

The one module that turns settings into running things: the start-up
sequence (``run()``, called by the ``.pth`` line and the ``sitecustomize``
fallback when a ``FASTLOOP*`` activation variable is set), ``configure()``
at run time, and what a change of setting sets in motion, as each row of
``fastloop.config.SETTINGS`` names it (``on_change``: the watchdog, the GIL
probe, the profiler, the switch interval, the exit report).

Start-up comes in two steps.  ``start()`` is all the ``.pth`` line runs.
Under ``FASTLOOP`` alone it puts a finder on ``sys.meta_path`` that waits
for the first import of ``asyncio`` or ``tornado`` and imports nothing
itself, so a process that never loads an event loop (a build step, a CLI,
a pool's worker) pays for three small modules and no more.  ``run()``
reads the settings and installs the patches: when that first import
begins, or when the application first uses fastloop's own API, whichever
comes first.  An output or an observer asked for by its variable
(``OUTPUTS``: the exit report, the profile, the watchdog) is the process's
whatever it imports, so any of those makes ``start()`` run at once, as the
paths' checks and the SIGTERM handler need.  It must not raise, and
reports a bad setting in one line on stderr; each patch's module loads with
its target module, the watchdog and the profiler only when their variable
is set.
"""

from __future__ import annotations

import os
import sys

# ``typing`` costs ~2 ms to import, more than all of ``start()``: mypy reads
# any name ``TYPE_CHECKING`` as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from importlib.machinery import ModuleSpec

#: Activating variables besides ``FASTLOOP`` (``config.ACTIVATING``, which a
#: test holds this to): each asks for something in every process.
OUTPUTS = ("FASTLOOP_REPORT", "FASTLOOP_BLOCK_MS", "FASTLOOP_PROFILE")

#: The first import of either begins ``run()``: every patch's target module
#: is a submodule of one, and ``tornado`` is imported before any of its own.
FIRST_IMPORTS = frozenset({"asyncio", "tornado"})

_started = False
_exit_report_armed = False


class _FirstImport:
    """A ``sys.meta_path`` finder that calls ``run()`` when a loop module loads.

    It fires as the first of ``FIRST_IMPORTS`` is *looked up*, before any of
    its code runs: so every patch target is still unimported (none can be
    caught half-initialised by ``install()``), and the registry's hooks are
    in place for each.  It then finds the module's spec itself, with the
    finders behind it, and returns that: the import machinery iterates
    ``sys.meta_path`` while this runs, and returning ends that loop, so
    removing this finder from the list cannot make it skip another.
    """

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: object = None
    ) -> ModuleSpec | None:
        if fullname not in FIRST_IMPORTS:
            return None
        run()  # disarms this finder first
        # Loaded by run() with the registry: no cost to the .pth line.
        from fastloop.runtime.importhook import spec_behind

        return spec_behind(self, fullname, path, target)


_first_import = _FirstImport()


def start() -> None:
    """What the ``.pth`` line calls: ``run()`` now, or at the first loop import."""
    if _started:
        return
    if any(os.environ.get(variable) for variable in OUTPUTS) or any(
        name in sys.modules
        for name in FIRST_IMPORTS  # another hook imported one
    ):
        run()
    elif _first_import not in sys.meta_path:
        sys.meta_path.insert(0, _first_import)


def run_if_deferred() -> None:
    """The application uses fastloop's API before any loop module: start now."""
    if _first_import in sys.meta_path:
        run()


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
    if _started:
        return
    _started = True
    if _first_import in sys.meta_path:
        sys.meta_path.remove(_first_import)
    if not activated(os.environ):
        return
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
    """Run each changed setting's ``on_change`` hook, in table order."""
    import importlib

    from fastloop.config import SETTINGS, settings

    wanted = set(names)
    for row in SETTINGS:
        if row.name in wanted and row.on_change:
            module, _, function = row.on_change.partition(":")
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
