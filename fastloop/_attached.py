"""Per-object state that the patches hang on Tornado and asyncio objects.

State lives in a plain attribute of its owner, never in ``owner.__dict__``:
touching ``__dict__`` turns CPython 3.11+'s inline instance values into a
real dict and slows every other attribute access on that object, and for
a loop all of asyncio's ``_run_once`` (measured: +17% on a 64-byte IOStream
echo, by bench/echo.py of commit ec01d4d, today ``fastloop bench``'s
echo-64).  Hot paths read the attribute directly and call ``attached`` only
when it is missing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_creating = threading.Lock()


def attached(owner: Any, attribute: str, make: Callable[[Any], T]) -> T:
    """``owner.<attribute>``, made by ``make(owner)`` the first time.

    First callers may race (producer threads adding to one IOLoop): the lock
    makes them share one object.
    """
    with _creating:
        state: T | None = getattr(owner, attribute, None)
        if state is None:
            state = make(owner)
            setattr(owner, attribute, state)
        return state
