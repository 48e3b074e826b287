"""Which event loops exist, and which thread runs each: for the observers and auto mode.

Tornado keeps every open IOLoop in ``IOLoop._ioloop_for_asyncio`` (asyncio
loop -> IOLoop) until it is closed.  Reading that dict from another thread
needs no hook in the loops, and imports nothing: if Tornado is not loaded
there is no IOLoop to watch yet.

A forked child inherits that dict with the parent's loops in it, and a loop
copied while it ran still says it is running, though no thread of the child
will ever run it: those are set aside at fork and never reported.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from fastloop.runtime import fork

#: id -> loop, for loops this process inherited through fork (held, so that
#: their ids cannot be reused by new loops).
_inherited: dict[int, Any] = {}


def _registered() -> list[Any]:
    module = sys.modules.get("tornado.ioloop")
    registry = getattr(getattr(module, "IOLoop", None), "_ioloop_for_asyncio", None)
    if not isinstance(registry, dict):
        return []
    # list(dict) runs in C without releasing the GIL: safe against the loop
    # threads adding and removing IOLoops meanwhile.
    return list(registry)


def tornado_loops() -> list[Any]:
    """The asyncio loops of this process's open IOLoops (none before Tornado loads)."""
    return [loop for loop in _registered() if _inherited.get(id(loop)) is not loop]


def _set_aside_inherited_loops() -> None:
    _inherited.update((id(loop), loop) for loop in _registered())


fork.in_child(_set_aside_inherited_loops)


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
        return bool(loop.is_running())
    except Exception:  # a loop implementation we do not know: leave it be
        return False


def thread_names() -> dict[int | None, str]:
    """Name of every live thread by ident, for the lines the observers write."""
    return {thread.ident: thread.name for thread in threading.enumerate()}


def thread_name(ident: int | None, names: dict[int | None, str] | None = None) -> str:
    return (thread_names() if names is None else names).get(ident, f"ident {ident}")
