"""What a patch may change, and how each change is undone: the registry's vocabulary.

A patch's ``apply(module)`` returns a list of changes and performs none of
them.  The registry does each in order (``do()``) and, on uninstall or when
a later one fails, undoes the done ones in reverse order (``undo()``), so a
patch never half-applies and never undoes anything itself.  Three kinds:

* ``Swap``: a class (or module) attribute replaced while installed; undone
  by putting back the very object that was there.
* ``PerObject``: attributes a patch hangs on objects it meets at run time
  (loops, selectors, streams), or objects it must revisit; undone by taking
  them off every such object still alive, after an optional ``detach``.
* ``Flag``: on while the patch is installed, for code of the patch's that
  outlives its uninstall (a thread's loop, a method bound before it) and
  must act as stock from then on.
* a ``Change`` of the patch's own for a process setting (the interpreter's
  switch interval): ``do()`` sets it, ``undo()`` restores it.

List per-object changes before the swaps that use them: they are then
active before any patched code runs, and undone only after every class
attribute is stock again, when no new call can attach anything.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

log = logging.getLogger("fastloop")

T = TypeVar("T")

_MISSING = object()


class Change:
    """One thing a patch changes while it is installed."""

    __slots__ = ()

    def do(self) -> None:
        """Make the change (the registry calls this once)."""

    def undo(self) -> None:
        """Put back what ``do()`` found, unless changed since (never raises)."""


class Swap(Change):
    """Replace ``owner.<attribute>`` with ``replacement`` while the patch is on."""

    __slots__ = ("_original", "attribute", "owner", "replacement")

    def __init__(self, owner: Any, attribute: str, replacement: Any) -> None:
        self.owner = owner
        self.attribute = attribute
        self.replacement = replacement
        self._original: Any = _MISSING

    @property
    def original(self) -> Any:
        """What ``do()`` replaced (None if the attribute was not there)."""
        return None if self._original is _MISSING else self._original

    def do(self) -> None:
        self._original = self.owner.__dict__.get(self.attribute, _MISSING)
        setattr(self.owner, self.attribute, self.replacement)

    def undo(self) -> None:
        current = self.owner.__dict__.get(self.attribute, _MISSING)
        if current is not self.replacement:
            log.warning(
                "fastloop: %s.%s was replaced by someone else while patched; "
                "restoring the original anyway",
                getattr(self.owner, "__qualname__", self.owner),
                self.attribute,
            )
        if self._original is _MISSING:
            with contextlib.suppress(AttributeError):
                delattr(self.owner, self.attribute)
        else:
            setattr(self.owner, self.attribute, self._original)


class Flag(Change):
    """True while the patch is installed (``flag.on``: one attribute read)."""

    __slots__ = ("on",)

    def __init__(self) -> None:
        self.on = False

    def do(self) -> None:
        self.on = True

    def undo(self) -> None:
        self.on = False


class PerObject(Change):
    """Attributes a patch hangs on the objects it meets while installed.

    State lives in a plain attribute of its owner, never in ``owner.__dict__``
    written directly: touching ``__dict__`` turns CPython 3.11+'s inline
    instance values into a real dict and slows every other attribute access
    on that object, and for a loop all of asyncio's ``_run_once``
    (docs/design.md#state-on-the-objects-a-patch-meets).  Hot paths read the
    attribute directly and come here only when it is missing.

    Why undo cannot race a thread that is attaching: attaching checks that
    the change is still active and sets the attributes under this change's
    lock, and ``undo()`` clears the flag and takes the owners under the same
    lock.  So an owner is either attached before ``undo()`` looks, and then
    it is among the owners undone, or it finds the change inactive and gets
    nothing.  Calls that began before uninstall and finish after it (the
    class attributes are stock again by then, so no new one starts) thus
    leave no attribute behind; what they hold in hand keeps working for
    the rest of that one call, which each patch argues for its own state.
    """

    __slots__ = ("__weakref__", "_active", "_detach", "_lock", "_owners", "attributes")

    def __init__(
        self, *attributes: str, detach: Callable[[Any], None] | None = None
    ) -> None:
        self.attributes = attributes
        self._detach = detach
        self._active = False
        #: Reentrant: an allocation under it (in ``make``, or the owner set's
        #: own) can run a finalizer that comes back here on the same thread
        #: (distributed's ``Future.__del__`` writes to a stream), which a
        #: plain Lock would deadlock.
        self._lock = threading.RLock()
        self._owners: weakref.WeakSet[Any] = weakref.WeakSet()

    def setdefault(self, owner: Any, make: Callable[[Any], T]) -> T:
        """``owner.<the attribute>``, made by ``make(owner)`` the first time.

        First callers may race (producer threads adding to one IOLoop): the
        lock makes them share one object.  Once uninstalled the object made
        is returned but not attached.
        """
        (attribute,) = self.attributes
        with self._lock:
            state: T | None = getattr(owner, attribute, None)
            if state is None:
                state = make(owner)
                # A nested call (a finalizer run by make) may have attached one
                # meanwhile: share it rather than overwrite what it counted.
                # make() outside the lock would not spare the RLock (the owner
                # set allocates under it) and would let threads race makes.
                attached: T | None = getattr(owner, attribute, None)
                if attached is not None:
                    return attached
                if self._active:
                    setattr(owner, attribute, state)
                    self._owners.add(owner)
            return state

    def put(self, owner: Any, **values: Any) -> bool:
        """Set these attributes on ``owner`` (or only track it); False once undone."""
        with self._lock:
            if not self._active:
                return False
            for attribute, value in values.items():
                setattr(owner, attribute, value)
            self._owners.add(owner)
            return True

    def do(self) -> None:
        self._active = True

    def undo(self) -> None:
        with self._lock:
            self._active = False
            owners = list(self._owners)
            self._owners.clear()
        for owner in owners:
            if self._detach is not None:
                try:
                    self._detach(owner)
                except Exception as exc:  # undo must go on for the others
                    log.warning("fastloop: could not detach from %r: %r", owner, exc)
            for attribute in self.attributes:
                with contextlib.suppress(AttributeError):
                    delattr(owner, attribute)
