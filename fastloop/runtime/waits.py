"""Stand-ins for a selector's ``select``: marked by a patch, read by the profiler.

A loop thread inside ``selectors.py`` called by ``_run_once`` waits for
I/O, and the profiler counts it idle.  A patch that replaces ``select``
(``poll``'s gate, which waits in C) marks its replacement here, so that the
profiler sees the same wait without knowing the patch.
"""

from __future__ import annotations

from collections.abc import Callable
from types import CodeType
from typing import Any

_codes: set[CodeType] = set()


def mark(function: Callable[..., Any]) -> None:
    """``function`` waits in the kernel as ``select`` does (idempotent)."""
    _codes.add(function.__code__)


def waits(code: CodeType) -> bool:
    """Whether a frame running ``code`` is in a marked stand-in for ``select``."""
    return code in _codes
