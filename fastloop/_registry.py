"""Patch records and the only code that swaps attributes on foreign modules.

Each patch is a plain record: which module arms it, a ``check()`` that
feature-detects the exact internals it replaces, and an ``apply()`` that
*describes* the swaps (owner, attribute, replacement) without performing
them.  The registry performs every swap, keeps the originals, and restores
them by identity, so a patch can never half-apply and ``uninstall()`` hands
back the very function objects that were there before.

Patches whose target module is not imported yet are armed with a
post-import hook, so ``install()`` before ``import tornado`` works: one
finder at the front of ``sys.meta_path`` that, for a target module only,
runs the requested patches right after the module's code
(``_importhook.py``, which says why it is not wrapt's).  A patch's own
module is imported only when its target is (``register_lazy``): ``import
tornado.web`` never loads the ``add_callback`` patch, whose target it
does not import.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
import threading
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import Any, NamedTuple

from fastloop._importhook import PostImportFinder
from fastloop.patches import RECORDS, Effect, Patch, Swap

log = logging.getLogger("fastloop")

_MISSING = object()


class _Lazy(NamedTuple):
    """A patch known by name and target, its module not imported yet."""

    name: str
    target: str
    module: str


class _Applied(NamedTuple):
    patch: Patch
    swaps: list[Swap]
    originals: list[Any]
    effect: Effect | None = None


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
        #: active now, with the originals to put back
        self.applied: dict[str, _Applied] = {}
        #: declined, and why
        self.declined: dict[str, str] = {}
        #: (patch, loop class) -> why the patch keeps stock behaviour there
        self.loop_declines: dict[tuple[str, str], str] = {}


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
            if module is not None:
                _apply_requested(module)
            elif target not in _finder.targets:
                _finder.targets.add(target)
                if _finder not in sys.meta_path:
                    sys.meta_path.insert(0, _finder)
        return frozenset(n for n in names if n in _state.requested)


def uninstall(patches: Iterable[str] | str | None = None) -> None:
    """Restore the exact original objects (default: every installed patch)."""
    names = list(_state.patches) if patches is None else _resolve(patches)
    with _state.lock:
        for name in names:
            _state.requested.discard(name)
            _state.explicit.discard(name)
            applied = _state.applied.pop(name, None)
            if applied is not None:
                _restore(applied)


def installed() -> frozenset[str]:
    """Names of the patches active right now."""
    with _state.lock:
        return frozenset(_state.applied)


def effect_of(name: str) -> Effect | None:
    """The live effect of an applied patch, for settings that follow it."""
    with _state.lock:
        applied = _state.applied.get(name)
        return applied.effect if applied is not None else None


def available() -> dict[str, str | None]:
    """For each patch: None if it can apply in this process, else why not.

    Imports each patch's target module (Tornado, asyncio) to look.
    """
    verdicts: dict[str, str | None] = {}
    for name, entry in list(_state.patches.items()):
        try:
            module = importlib.import_module(entry.target)
        except Exception as exc:  # any failure to import is a reason, not a crash
            verdicts[name] = f"cannot import {entry.target}: {exc}"
            continue
        if name in _state.applied:
            verdicts[name] = None
            continue
        verdicts[name] = _safe_check(name, module)
    return verdicts


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


def _safe_check(name: str, module: ModuleType) -> str | None:
    try:
        patch = _record(name)
    except Exception as exc:  # the patch's own module does not import here
        return f"cannot load the patch: {exc!r}"
    try:
        return patch.check(module)
    except Exception as exc:  # a crashing check means the internals are unknown
        return f"check failed: {exc!r}"


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
                    _perform(patch, patch.apply(module))
                except Exception as exc:  # never break the host application
                    reason = f"apply failed: {exc!r}"
            if reason is not None:
                _decline(name, reason)


def declined_on_loop(name: str, loop: object, reason: str) -> None:
    """A patch keeps stock behaviour on this kind of loop: say why, once per class."""
    kind = f"{type(loop).__module__}.{type(loop).__qualname__}"
    with _state.lock:
        if (name, kind) in _state.loop_declines:
            return
        _state.loop_declines[(name, kind)] = reason
    log.info(
        "fastloop: patch %r keeps stock behaviour on %s loops: %s", name, kind, reason
    )


def loop_declines() -> dict[tuple[str, str], str]:
    """Every (patch, loop class) declined so far, with its reason."""
    with _state.lock:
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


def _perform(patch: Patch, swaps: list[Swap]) -> None:
    originals = [s.owner.__dict__.get(s.attribute, _MISSING) for s in swaps]
    done: list[Swap] = []
    try:
        for swap in swaps:
            setattr(swap.owner, swap.attribute, swap.replacement)
            done.append(swap)
        effect = patch.effect() if patch.effect is not None else None
    except BaseException:
        _restore(_Applied(patch, done, originals[: len(done)]))
        raise
    _state.applied[patch.name] = _Applied(patch, swaps, originals, effect)


def _restore(applied: _Applied) -> None:
    for swap, original in reversed(
        list(zip(applied.swaps, applied.originals, strict=True))
    ):
        current = swap.owner.__dict__.get(swap.attribute, _MISSING)
        if current is not swap.replacement:
            log.warning(
                "fastloop: %s.%s was replaced by someone else while patched; "
                "restoring the original anyway",
                getattr(swap.owner, "__qualname__", swap.owner),
                swap.attribute,
            )
        if original is _MISSING:
            with contextlib.suppress(AttributeError):
                delattr(swap.owner, swap.attribute)
        else:
            setattr(swap.owner, swap.attribute, original)
    if applied.effect is not None:
        applied.effect.undo()
    if applied.patch.remove is not None:
        applied.patch.remove()


def check(name: str) -> str | None:
    """What ``name``'s ``check()`` says in this process now, installed or not.

    Imports the patch's target module; ``fastloop doctor`` asks this under
    each event loop policy it answers for.
    """
    target = _state.patches[name].target
    try:
        module = importlib.import_module(target)
    except Exception as exc:  # any failure to import is a reason, not a crash
        return f"cannot import {target}: {exc}"
    return _safe_check(name, module)


for _row in RECORDS:
    register_lazy(*_row[:3], default=_row[3])
del _row
