"""Patch records and the only code that swaps attributes on foreign modules.

Each patch is a plain record: which module arms it, a ``check()`` that
feature-detects the exact internals it replaces, and an ``apply()`` that
*describes* the swaps (owner, attribute, replacement) without performing
them.  The registry performs every swap, keeps the originals, and restores
them by identity, so a patch can never half-apply and ``uninstall()`` hands
back the very function objects that were there before.

Patches whose target module is not imported yet are armed with a wrapt
post-import hook, so ``install()`` before ``import tornado`` works.  wrapt
hooks cannot be unregistered, so one hook per target module is registered
once and consults the requested set when it fires.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import wrapt

log = logging.getLogger("fastloop")

_MISSING = object()


@dataclass(frozen=True)
class Swap:
    """Replace ``owner.<attribute>`` with ``replacement`` while the patch is on."""

    owner: Any
    attribute: str
    replacement: Any


@dataclass(frozen=True)
class Patch:
    """A patch record.

    ``check(module)`` returns None when the internals it replaces look exactly
    as expected, else a one-line reason.  ``apply(module)`` returns the swaps;
    it must not mutate anything itself.  ``remove()`` runs after the originals
    are back, for patches that must hand over state (it must not raise).
    """

    name: str
    target: str
    summary: str
    check: Callable[[ModuleType], str | None]
    apply: Callable[[ModuleType], list[Swap]]
    remove: Callable[[], None] | None = None


@dataclass
class _Applied:
    patch: Patch
    swaps: list[Swap]
    originals: list[Any]


_lock = threading.RLock()
_patches: dict[str, Patch] = {}
_default: list[str] = []
_requested: set[str] = set()
_explicit: set[str] = set()
_applied: dict[str, _Applied] = {}
_declined: dict[str, str] = {}
_hooked: set[str] = set()
#: (patch, loop class) -> why the patch keeps stock behaviour on such loops.
_loop_declines: dict[tuple[str, str], str] = {}


def register(patch: Patch, *, default: bool = True) -> None:
    """Make a patch known by name (done once, by ``fastloop.patches``)."""
    with _lock:
        _patches[patch.name] = patch
        if default and patch.name not in _default:
            _default.append(patch.name)


def known() -> tuple[str, ...]:
    """All patch names, default set first, in registration order."""
    return tuple(_patches)


def _resolve(patches: Iterable[str] | str | None) -> list[str]:
    if patches is None:
        return list(_default)
    names = [patches] if isinstance(patches, str) else list(patches)
    unknown = [n for n in names if n not in _patches]
    if unknown:
        valid = ", ".join(_patches)
        raise ValueError(f"unknown fastloop patch {unknown!r}; valid names: {valid}")
    return names


def install(patches: Iterable[str] | str | None = None) -> frozenset[str]:
    """Install patches (default: all), now or when their module is imported.

    Idempotent and thread-safe.  Returns the names that are active or armed
    (waiting for their target module's import); a declined patch is logged
    once on logger ``fastloop`` and left out, and the others still apply.
    """
    names = _resolve(patches)
    with _lock:
        for name in names:
            _requested.add(name)
            if patches is not None:
                _explicit.add(name)
            _declined.pop(name, None)
        for target in sorted({_patches[n].target for n in names}):
            if target in _hooked:
                module = sys.modules.get(target)
                if module is not None:
                    _apply_requested(module)
            else:
                _hooked.add(target)
                # Fires at once if the module is already imported.
                wrapt.register_post_import_hook(_apply_requested, target)
        return frozenset(n for n in names if n in _requested)


def uninstall(patches: Iterable[str] | str | None = None) -> None:
    """Restore the exact original objects (default: every installed patch)."""
    names = list(_patches) if patches is None else _resolve(patches)
    with _lock:
        for name in names:
            _requested.discard(name)
            _explicit.discard(name)
            applied = _applied.pop(name, None)
            if applied is not None:
                _restore(applied)


def installed() -> frozenset[str]:
    """Names of the patches active right now."""
    with _lock:
        return frozenset(_applied)


def available() -> dict[str, str | None]:
    """For each patch: None if it can apply in this process, else why not.

    Imports each patch's target module (Tornado, asyncio) to look.
    """
    verdicts: dict[str, str | None] = {}
    for name, patch in _patches.items():
        try:
            module = importlib.import_module(patch.target)
        except Exception as exc:  # any failure to import is a reason, not a crash
            verdicts[name] = f"cannot import {patch.target}: {exc}"
            continue
        if name in _applied:
            verdicts[name] = None
            continue
        verdicts[name] = _safe_check(patch, module)
    return verdicts


@contextlib.contextmanager
def patched(patches: Iterable[str] | str | None = None) -> Iterator[frozenset[str]]:
    """Install for the duration of a ``with`` block, then restore the prior state.

    Only what the block added is removed: patches active before stay active.
    """
    with _lock:
        before_requested = set(_requested)
        before_explicit = set(_explicit)
        active = install(patches)
    try:
        yield active
    finally:
        with _lock:
            added = _requested - before_requested
            if added:
                uninstall(added)
            _explicit.clear()
            _explicit.update(before_explicit & _requested)


def _safe_check(patch: Patch, module: ModuleType) -> str | None:
    try:
        return patch.check(module)
    except Exception as exc:  # a crashing check means the internals are unknown
        return f"check failed: {exc!r}"


def _apply_requested(module: ModuleType) -> None:
    """Post-import hook: apply every requested patch that targets ``module``."""
    with _lock:
        for name, patch in _patches.items():
            if patch.target != module.__name__:
                continue
            if name not in _requested or name in _applied or name in _declined:
                continue
            reason = _safe_check(patch, module)
            if reason is None:
                try:
                    _perform(patch, patch.apply(module))
                except Exception as exc:  # never break the host application
                    reason = f"apply failed: {exc!r}"
            if reason is not None:
                _decline(name, reason)


def declined_on_loop(name: str, loop: object, reason: str) -> None:
    """A patch keeps stock behaviour on this kind of loop: say why, once per class."""
    kind = f"{type(loop).__module__}.{type(loop).__qualname__}"
    with _lock:
        if (name, kind) in _loop_declines:
            return
        _loop_declines[(name, kind)] = reason
    log.info(
        "fastloop: patch %r keeps stock behaviour on %s loops: %s", name, kind, reason
    )


def loop_declines() -> dict[tuple[str, str], str]:
    """Every (patch, loop class) declined so far, with its reason."""
    with _lock:
        return dict(_loop_declines)


def _decline(name: str, reason: str) -> None:
    _declined[name] = reason
    _requested.discard(name)
    # A patch the user named is worth a warning; one from the default set
    # that does not fit this process (uvloop, proactor) is only information.
    level = logging.WARNING if name in _explicit else logging.INFO
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
    except BaseException:
        _restore(_Applied(patch, done, originals[: len(done)]))
        raise
    _applied[patch.name] = _Applied(patch, swaps, originals)


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
    if applied.patch.remove is not None:
        applied.patch.remove()
