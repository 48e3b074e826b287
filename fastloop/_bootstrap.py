"""What the ``fastloop.pth`` line calls when a ``FASTLOOP*`` activation variable is set.

Runs inside ``site`` at interpreter start-up, before the application: it
must not raise, must not import Tornado (patches arm post-import hooks
instead), and reports a bad setting in one line on stderr.  Every process
started under ``FASTLOOP=1`` pays for what this imports, so it loads the
settings and the registry only (``fastloop/__init__`` loads its names
lazily); each patch's module loads with its target module, the watchdog and
the profiler only when their variable is set.
"""

from __future__ import annotations

import os
import sys

_started = False


def run() -> None:
    # In a virtual environment ``site`` may process site-packages twice (once
    # for the venv, once for the prefixes it points at) and runs every .pth
    # line each time: act on the first call only.
    global _started
    if _started:
        return
    _started = True
    try:
        from fastloop import _registry, config, patches  # noqa: F401  (registers)

        names, problems = config.patches_from_environ(
            os.environ, _registry.known(), _registry.default_set()
        )
        chosen, setting_problems = config.settings_from_environ(os.environ)
        for problem in problems + setting_problems:
            print(problem, file=sys.stderr)
        for name, value in chosen.items():
            setattr(config.settings, name, value)
        config.apply_side_effects(config.settings.block_ms is not None)
        if os.environ.get("FASTLOOP_PROFILE"):
            from fastloop import profiler

            profiler.profile_until_exit(os.environ["FASTLOOP_PROFILE"], os.environ)
        if os.environ.get("FASTLOOP") and (names is None or names):
            _registry.install(names)
    except Exception as exc:  # start-up must go on whatever happens here
        print(f"fastloop: not activated: {exc!r}", file=sys.stderr)
