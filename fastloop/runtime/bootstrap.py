"""Activation: what the ``fastloop.pth`` line runs at start-up, and ``configure()``.

The one module that turns settings into running things: the start-up
sequence (``run()``, called by the ``.pth`` line and the ``sitecustomize``
fallback when a ``FASTLOOP*`` activation variable is set), ``configure()``
at run time, and what a change of setting sets in motion, as each row of
``fastloop.config.SETTINGS`` names it (``on_change``: the watchdog, the GIL
probe, the profiler, the switch interval, the exit report).

Start-up comes in two steps.  ``start()`` is all the ``.pth`` line runs.
Under ``FASTLOOP`` alone it waits for the process's first event loop and
imports nothing itself: a process that never makes one (a build step, a
CLI, a pool's worker, one that imports Tornado and exits) pays for three
small modules and a finder.  ``run()`` reads the settings and installs the
patches as the first loop is made: asyncio's ``BaseEventLoop.__init__``
calls it first, through a stand-in put on the class once
``asyncio.base_events`` has run, and taken off by ``run()`` once the
patches are in; the first look-up of ``tornado.platform.asyncio``
(Tornado imports it as it makes its first IOLoop, on any asyncio loop,
uvloop's too) calls it too, as does the application's first use of
fastloop's own API.  The
patches' targets are imported by then, so they apply at once, and every
loop is made patched (``wakeup`` can only coalesce on a loop made while
installed).  An output or an observer asked for by its variable
(``OUTPUTS``: the exit report, the profile, the watchdog) is the process's
whatever it runs, so any of those makes ``start()`` run at once, as the
paths' checks and the SIGTERM handler need.  It must not raise, and
reports a bad setting in one line on stderr; the watchdog and the profiler
load only when their variable is set.
"""

from __future__ import annotations

import _thread
import os
import sys

# ``typing`` costs ~2 ms to import, more than all of ``start()``: mypy reads
# any name ``TYPE_CHECKING`` as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

#: Activating variables besides ``FASTLOOP`` (``config.ACTIVATING``, which a
#: test holds this to): each asks for something in every process.
OUTPUTS = ("FASTLOOP_REPORT", "FASTLOOP_BLOCK_MS", "FASTLOOP_PROFILE")

#: Whose first look-up starts fastloop: Tornado imports it as it makes its
#: first IOLoop, on asyncio's loops and uvloop's alike.
TORNADO_LOOPS = "tornado.platform.asyncio"
#: Whose ``BaseEventLoop.__init__`` starts fastloop, once its code has run.
ASYNCIO_LOOPS = "asyncio.base_events"

_started = False
_exit_report_armed = False
#: Held through ``run()``: a thread making its first loop while another
#: installs waits, so that its loop too is made patched.  ``_thread``: no
#: import at start-up.
_running = _thread.RLock()
#: (class, stock ``__init__``) while the first-loop stand-in is on the class.
_armed: list[tuple[type, Any]] = []


class _FirstLoop:
    """A ``sys.meta_path`` finder that waits for the first event loop.

    At the look-up of ``TORNADO_LOOPS`` it calls ``run()`` before any of
    that module's code runs (so the registry's hook is in place for the
    patches that target it); ``ASYNCIO_LOOPS`` it imports with a loader
    that puts the first-loop stand-in on ``BaseEventLoop`` once the code
    ran.  Either way it finds the spec itself, with the finders behind it,
    and returns that: the import machinery iterates ``sys.meta_path`` while
    this runs, and returning ends that loop, so removing this finder from
    the list cannot make it skip another.
    """

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: object = None
    ) -> ModuleSpec | None:
        if fullname not in (TORNADO_LOOPS, ASYNCIO_LOOPS):
            return None
        # Loaded here, not by the .pth line: asyncio is being imported.
        from fastloop.runtime.importhook import spec_behind, spec_calling_back

        if fullname == ASYNCIO_LOOPS:
            return spec_calling_back(self, fullname, path, target, _arm_first_loop)
        run()  # installs, then takes this finder off sys.meta_path
        return spec_behind(self, fullname, path, target)


_first_loop = _FirstLoop()


def _arm_first_loop(base_events: ModuleType) -> None:
    """Put on ``BaseEventLoop`` an ``__init__`` that calls ``run()`` first."""
    import functools

    cls = base_events.BaseEventLoop
    stock_init = cls.__dict__["__init__"]

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        run()  # installs, then puts stock_init back on the class
        stock_init(self, *args, **kwargs)

    with _running:
        if _started or _armed:
            return
        _armed.append((cls, stock_init))
        cls.__init__ = functools.update_wrapper(__init__, stock_init)


def _disarm() -> None:
    """Take the finder and the first-loop stand-in away (under ``_running``)."""
    if _first_loop in sys.meta_path:
        sys.meta_path.remove(_first_loop)
    while _armed:
        cls, stock_init = _armed.pop()
        cls.__init__ = stock_init  # type: ignore[misc]


def start() -> None:
    """What the ``.pth`` line calls: ``run()`` now, or at the first event loop."""
    if _started:
        return
    if any(os.environ.get(variable) for variable in OUTPUTS) or any(
        name in sys.modules
        for name in (TORNADO_LOOPS, ASYNCIO_LOOPS)  # another hook imported one
    ):
        run()
    elif _first_loop not in sys.meta_path:
        sys.meta_path.insert(0, _first_loop)


def run_if_deferred() -> None:
    """The application uses fastloop's API before its first loop: start now."""
    if _first_loop in sys.meta_path or _armed:
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
    with _running:
        if _started:
            return
        _started = True  # a nested call (same thread) returns at once
        try:
            _start_up()
        finally:
            # Only now: a thread making its first loop meanwhile found the
            # stand-in, and waited above for the patches to be in place.
            _disarm()


def _start_up() -> None:
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
            config.sources[name] = config.BY_NAME[name].variable
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
    apply(parsed, dict.fromkeys(parsed, "fastloop.configure()"))


def apply(parsed: Mapping[str, object], sources: Mapping[str, str]) -> None:
    """Set already parsed settings, note where each came from, and follow them."""
    from fastloop import config

    for name, value in parsed.items():
        setattr(config.settings, name, value)
        config.sources[name] = sources[name]
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
