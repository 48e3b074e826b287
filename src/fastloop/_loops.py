"""Which event loops exist, and which thread runs each: for the watchdog and profiler.

Tornado keeps every open IOLoop in ``IOLoop._ioloop_for_asyncio`` (asyncio
loop -> IOLoop) until it is closed.  Reading that dict from another thread
needs no hook in the loops, and imports nothing: if Tornado is not loaded
there is no IOLoop to watch yet.
"""

from __future__ import annotations

import sys
from typing import Any


def tornado_loops() -> list[Any]:
    """The asyncio loops of every IOLoop not yet closed (none before Tornado loads)."""
    module = sys.modules.get("tornado.ioloop")
    registry = getattr(getattr(module, "IOLoop", None), "_ioloop_for_asyncio", None)
    if not isinstance(registry, dict):
        return []
    # list(dict) runs in C without releasing the GIL: safe against the loop
    # threads adding and removing IOLoops meanwhile.
    return list(registry)


def asyncio_loop_of(loop: Any) -> Any:
    """The asyncio loop behind an IOLoop, or the asyncio loop itself."""
    return getattr(loop, "asyncio_loop", loop)


def running_thread(loop: Any) -> int | None:
    """The ident of the thread running an asyncio loop now, if the loop says.

    ``BaseEventLoop`` sets ``_thread_id`` for the duration of ``run_forever``;
    uvloop keeps it private, so callers learn it from a callback instead.
    """
    ident = getattr(loop, "_thread_id", None)
    return ident if isinstance(ident, int) else None


def is_running(loop: Any) -> bool:
    try:
        return bool(loop.is_running()) and not loop.is_closed()
    except Exception:  # a loop implementation we do not know: leave it be
        return False
