"""The registry: the only code that applies patches, and the owner of every undo.

Each patch is a plain record (``fastloop.patches.Patch``): which module arms
it, a ``check()`` that feature-detects the exact internals it replaces, and
an ``apply()`` that *lists* its changes (``fastloop.patches.changes``)
without making them.  The registry makes them in order, keeps them, and
undoes them in reverse order, so a patch can never half-apply and
``uninstall()`` leaves no trace on classes or on objects: the very function
objects that were there before are back, and every attribute a patch hung
on a loop, selector, stream or IOLoop is gone.

Patches whose target module is not imported yet are armed with a
post-import hook (``fastloop.runtime.importhook``, which says why it is not
wrapt's), so ``install()`` before ``import tornado`` works.  A patch's own
module is imported only when its target is (``register_lazy``): ``import
tornado.web`` never loads the ``add_callback`` patch, whose target it does
not import.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType
from typing import Any, TypeVar

from fastloop.patches import ON_IMPORT_ONLY, RECORDS, Patch, loop_class
from fastloop.patches.changes import Change, Swap
from fastloop.runtime.importhook import PostImportFinder

log = logging.getLogger("fastloop")

#: ``available()``'s reason for a patch waiting for its package's import.
NOT_IMPORTED = "is not imported here: the patch applies when the application imports it"

C = TypeVar("C", bound=Change)


class _Lazy:
    """A patch known by name and target, its module not imported yet."""

    __slots__ = ("module", "name", "target")

    def __init__(self, name: str, target: str, module: str) -> None:
        self.name = name
        self.target = target
        self.module = module


class _State:
    """Everything the registry knows, in one object; ``lock`` guards it all.

    Only this module's functions read or change it: they are the interface.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        #: name -> its record (or, until its module is imported, where it is)
        self.patches: dict[str, Patch | _Lazy] = {}
        #: the names ``install()`` applies when given none, in order
        self.default: list[str] = []
        #: asked for, active or armed until their target module is imported
        self.requested: set[str] = set()
        #: asked for by name (a decline is then a warning, not information)
        self.explicit: set[str] = set()
        #: active now, with the changes made (undone in reverse order)
        self.applied: dict[str, list[Change]] = {}
        #: declined, and why
        self.declined: dict[str, str] = {}
        #: (patch, loop class) -> why the patch keeps stock behaviour there;
        #: its own lock, taken from patched code that may hold a change's lock
        self.loop_declines: dict[tuple[str, str], str] = {}
        #: Reentrant: an allocation under it (``loop_declines()``'s copy) can
        #: run a finalizer that adds a callback to a new loop, declined here.
        self.loop_declines_lock = threading.RLock()


_state = _State()


def register(patch: Patch | _Lazy, *, default: bool = True) -> None:
    """Make a patch known by name (``fastloop.patches.RECORDS``, at import)."""
    with _state.lock:
        _state.patches[patch.name] = patch
        if default and patch.name not in _state.default:
            _state.default.append(patch.name)


def unregister(name: str) -> None:
    """Forget a patch registered at run time (uninstalled first, if it is on)."""
    with _state.lock:
        uninstall([name])
        _state.patches.pop(name, None)
        _state.declined.pop(name, None)
        if name in _state.default:
            _state.default.remove(name)


def register_lazy(name: str, target: str, module: str, *, default: bool = True) -> None:
    """Know a patch by name now; import ``module`` (its ``PATCH``) with ``target``."""
    register(_Lazy(name, target, module), default=default)


def _record(name: str) -> Patch:
    """The patch record, its module imported on first need."""
    entry = _state.patches[name]
    if isinstance(entry, Patch):
        return entry
    # __import__ rather than importlib.import_module: only the former shows
    # in ``python -X importtime``, where start-up costs are looked for.
    __import__(entry.module)
    record = sys.modules[entry.module].PATCH
    if not isinstance(record, Patch) or (record.name, record.target) != (
        entry.name,
        entry.target,
    ):
        raise ImportError(f"{entry.module}.PATCH is not the {entry.name!r} patch")
    _state.patches[name] = record
    return record


_finder = PostImportFinder(lambda module: _apply_requested(module))


def known() -> tuple[str, ...]:
    """All patch names, in registration order."""
    return tuple(_state.patches)


def target(name: str) -> str:
    """The module a patch changes (imported or not)."""
    return _state.patches[name].target


def records() -> list[Patch]:
    """Every patch record of ``RECORDS``, its module imported (not its target)."""
    with _state.lock:
        return [_record(name) for name, *_ in RECORDS]


def default_set() -> tuple[str, ...]:
    """The names ``install()`` applies when given none."""
    return tuple(_state.default)


def _resolve(patches: Iterable[str] | str | None) -> list[str]:
    if patches is None:
        return list(_state.default)
    names = [patches] if isinstance(patches, str) else list(patches)
    unknown = [n for n in names if n not in _state.patches]
    if unknown:
        valid = ", ".join(_state.patches)
        raise ValueError(f"unknown fastloop patch {unknown!r}; valid names: {valid}")
    return names


def install(patches: Iterable[str] | str | None = None) -> frozenset[str]:
    """Install patches (default: all), now or when their module is imported.

    Idempotent and thread-safe.  Returns the names that are active or armed
    (waiting for their target module's import); a declined patch is logged
    once on logger ``fastloop`` and left out, and the others still apply.
    """
    names = _resolve(patches)
    with _state.lock:
        for name in names:
            _state.requested.add(name)
            if patches is not None:
                _state.explicit.add(name)
            _state.declined.pop(name, None)
        for target in sorted({_state.patches[n].target for n in names}):
            module = sys.modules.get(target)
            if getattr(getattr(module, "__spec__", None), "_initializing", False):
                # Another thread is importing it: wait for the whole module
                # (the import lock), never check half of one.
                module = importlib.import_module(target)
            if module is not None:
                _apply_requested(module)
            elif target not in _finder.targets:
                _finder.targets.add(target)
                if _finder not in sys.meta_path:
                    sys.meta_path.insert(0, _finder)
        return frozenset(n for n in names if n in _state.requested)


def uninstall(patches: Iterable[str] | str | None = None) -> None:
    """Undo every change of these patches (default: every installed patch)."""
    names = list(_state.patches) if patches is None else _resolve(patches)
    with _state.lock:
        for name in names:
            _state.requested.discard(name)
            _state.explicit.discard(name)
            changes = _state.applied.pop(name, None)
            if changes is not None:
                _undo(changes)


def installed() -> frozenset[str]:
    """Names of the patches active right now."""
    with _state.lock:
        return frozenset(_state.applied)


def applied_change(name: str, kind: type[C]) -> C | None:
    """The change of this kind an applied patch made (for settings that follow it)."""
    with _state.lock:
        for change in _state.applied.get(name, ()):
            if isinstance(change, kind):
                return change
    return None


def check(name: str) -> str | None:
    """What ``name``'s ``check()`` says in this process now, installed or not.

    Imports the patch's target module (Tornado, asyncio).  The answer does
    not depend on the event loop the application runs: ``check_loop`` does.
    """
    target = _state.patches[name].target
    try:
        module = importlib.import_module(target)
    except Exception as exc:  # any failure to import is a reason, not a crash
        return f"cannot import {target}: {exc}"
    return _safe_check(name, module)


def check_loop(name: str, loop: object) -> str | None:
    """Why ``name`` keeps stock behaviour on this asyncio loop, or None.

    None also for a patch that acts on every loop, and for one whose
    ``check()`` declines (ask that first).  ``fastloop doctor`` asks it of a
    loop of the kind the application runs.
    """
    try:
        patch = _record(name)
    except Exception:  # check() says why
        return None
    if patch.check_loop is None:
        return None
    try:
        return patch.check_loop(loop)
    except Exception as exc:  # a loop this patch cannot read is not one it knows
        return f"check failed: {exc!r}"


def available() -> dict[str, str | None]:
    """For each patch: None if it can apply in this process, else why not.

    Imports each patch's target module to look, all of them first: an
    import can apply a patch that is armed for it, whose check would then
    read fastloop's replacement; but no package of ``ON_IMPORT_ONLY`` the
    application has not imported.  An active patch applies by definition.
    """
    names = list(_state.patches)
    for target in {_state.patches[name].target for name in names}:
        if _imported_on_demand(target):
            with contextlib.suppress(Exception):  # check() says why, below
                importlib.import_module(target)
    return {
        name: None
        if name in _state.applied
        else check(name)
        if _imported_on_demand(_state.patches[name].target)
        else f"{_state.patches[name].target} {NOT_IMPORTED}"
        for name in names
    }


def _imported_on_demand(target: str) -> bool:
    """Whether fastloop may import ``target`` to look (not so a package of
    ``ON_IMPORT_ONLY`` the application has not imported)."""
    package = target.partition(".")[0]
    return package not in ON_IMPORT_ONLY or package in sys.modules


@contextlib.contextmanager
def patched(patches: Iterable[str] | str | None = None) -> Iterator[frozenset[str]]:
    """Install for the duration of a ``with`` block, then restore the prior state.

    Only what the block added is removed: patches active before stay active.
    """
    with _state.lock:
        before_requested = set(_state.requested)
        before_explicit = set(_state.explicit)
        active = install(patches)
    try:
        yield active
    finally:
        with _state.lock:
            added = _state.requested - before_requested
            if added:
                uninstall(added)
            _state.explicit.clear()
            _state.explicit.update(before_explicit & _state.requested)


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Run a block with every active patch removed, then put them back."""
    active = installed()
    uninstall(active)
    try:
        yield
    finally:
        if active:
            install(active)


def _safe_check(name: str, module: ModuleType) -> str | None:
    try:
        patch = _record(name)
    except Exception as exc:  # the patch's own module does not import here
        return f"cannot load the patch: {exc!r}"
    try:
        from fastloop.patches import fingerprints  # with the first target only

        return patch.check(module) or fingerprints.unverified(patch.verifies, _stock())
    except Exception as exc:  # a crashing check means the internals are unknown
        return f"check failed: {exc!r}"


def _stock() -> Callable[[Any, str], Any]:
    """A lookup of ``owner.<name>`` as it is without fastloop: what a patch
    relies on may be what another one replaced."""
    replaced = {
        (id(change.owner), change.attribute): change
        for changes in _state.applied.values()
        for change in changes
        if isinstance(change, Swap)
    }

    def attribute(owner: Any, name: str) -> Any:
        found = owner.__dict__.get(name)
        change = replaced.get((id(owner), name))
        if change is not None and change.replacement is found:
            return change.original
        return found

    return attribute


def _apply_requested(module: ModuleType) -> None:
    """Post-import hook: apply every requested patch that targets ``module``."""
    with _state.lock:
        for name, entry in list(_state.patches.items()):
            if entry.target != module.__name__:
                continue
            if (
                name not in _state.requested
                or name in _state.applied
                or name in _state.declined
            ):
                continue
            reason = _safe_check(name, module)
            if reason is None:
                patch = _record(name)
                try:
                    _state.applied[name] = _do(patch.apply(module))
                except Exception as exc:  # never break the host application
                    reason = f"apply failed: {exc!r}"
            if reason is not None:
                _decline(name, reason)


def declined_on_loop(name: str, loop: object, reason: str) -> None:
    """A patch keeps stock behaviour on this kind of loop: say why, once per class."""
    kind = loop_class(loop)
    # Made before the lock: then nothing under it allocates an object the
    # collector tracks, and no finalizer nests between the test and the set.
    key = (name, kind)
    with _state.loop_declines_lock:
        if key in _state.loop_declines:
            return
        _state.loop_declines[key] = reason
    log.info(
        "fastloop: patch %r keeps stock behaviour on %s loops: %s", name, kind, reason
    )


def loop_declines() -> dict[tuple[str, str], str]:
    """Every (patch, loop class) declined so far, with its reason."""
    with _state.loop_declines_lock:
        return dict(_state.loop_declines)


def _decline(name: str, reason: str) -> None:
    _state.declined[name] = reason
    _state.requested.discard(name)
    # A patch the user named is worth a warning; one from the default set
    # that does not fit this process (uvloop, proactor) is only information.
    level = logging.WARNING if name in _state.explicit else logging.INFO
    log.log(
        level, "fastloop: patch %r declined, stock behaviour kept: %s", name, reason
    )


def _do(changes: list[Change]) -> list[Change]:
    """Make every change in order; on any failure undo those made, and raise."""
    done: list[Change] = []
    try:
        for change in changes:
            change.do()
            done.append(change)
    except BaseException:
        _undo(done)
        raise
    return done


def _undo(changes: list[Change]) -> None:
    for change in reversed(changes):
        change.undo()


for _name, _target, _module, _default in RECORDS:
    register_lazy(_name, _target, _module, default=_default)
del _name, _target, _module, _default
