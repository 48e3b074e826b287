"""The patches, one module each: what fastloop changes in Tornado and asyncio.

Each patch module holds a ``PATCH`` record (``Patch``, below).
``RECORDS`` names each patch, its target module and its own module, in
default-set order; the registry (``fastloop._registry``) knows them by that
row and imports a patch's module only with its target (start-up pays for
no patch whose target the application never imports).  This package
imports no other fastloop module.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple, Protocol

#: (name, target module, the patch's module, in the default set)
RECORDS = (
    ("add_callback", "tornado.platform.asyncio", f"{__name__}.add_callback", True),
    ("wakeup", "asyncio.selector_events", f"{__name__}.wakeup", True),
    ("write_to_fd", "tornado.iostream", f"{__name__}.write_to_fd", True),
    ("poll", "asyncio.selector_events", f"{__name__}.poll", False),
    ("switchinterval", "sys", f"{__name__}.switchinterval", False),
)


# Records are NamedTuples rather than dataclasses: they are built while the
# interpreter starts under FASTLOOP=1, and a dataclass costs ~0.4 ms to
# define there, a NamedTuple ~0.08 ms (``python -X importtime``, issue 12).


class Swap(NamedTuple):
    """Replace ``owner.<attribute>`` with ``replacement`` while the patch is on."""

    owner: Any
    attribute: str
    replacement: Any


class Effect(Protocol):
    """A change that is not an attribute swap (an interpreter setting)."""

    def undo(self) -> None:
        """Put back what was found, unless someone changed it since (never raises)."""


class Patch(NamedTuple):
    """A patch record.

    ``check(module)`` returns None when the internals it replaces look exactly
    as expected, else a one-line reason.  ``apply(module)`` returns the swaps;
    it must not mutate anything itself.  ``effect()``, for a patch that
    changes a setting rather than attributes, makes that change once the
    swaps are in and returns how to undo it; the registry keeps it.
    ``remove()`` runs after the originals are back, for patches that must
    hand over state (it must not raise).
    """

    name: str
    target: str
    summary: str
    check: Callable[[ModuleType], str | None]
    apply: Callable[[ModuleType], list[Swap]]
    remove: Callable[[], None] | None = None
    effect: Callable[[], Effect] | None = None
