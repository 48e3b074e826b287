"""Start-up hook for ``fastloop run`` where no site directory runs fastloop.pth.

``fastloop run`` puts this directory first on ``PYTHONPATH`` when fastloop
is importable only through ``PYTHONPATH`` or ``pip install --target``.  It
activates fastloop from the environment, then hands over to whichever
``sitecustomize`` the interpreter would otherwise have imported.
"""

import importlib
import os
import sys


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    del sys.modules["sitecustomize"]
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    finally:
        sys.path[:] = saved


try:
    from fastloop.runtime import bootstrap

    # As the .pth line: run() at the first event loop,
    # and then only if a FASTLOOP* activation variable is set.
    bootstrap.start()
except Exception as exc:  # start-up must go on
    print(f"fastloop: not activated: {exc!r}", file=sys.stderr)
_chain()
