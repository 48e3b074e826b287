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
runs the requested patches right after the module's code.  It is ours
rather than wrapt's because importing wrapt 2 costs ~15 ms at start-up
(it imports importlib.metadata and asyncio), which every process started
under ``FASTLOOP=1`` would pay.  A patch's own module is imported only
when its target is (``register_lazy``): ``import tornado.web`` never loads
the ``add_callback`` patch, whose target it does not import.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any, NamedTuple

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


_lock = threading.RLock()
_patches: dict[str, Patch | _Lazy] = {}
_default: list[str] = []
_requested: set[str] = set()
_explicit: set[str] = set()
_applied: dict[str, _Applied] = {}
_declined: dict[str, str] = {}
#: (patch, loop class) -> why the patch keeps stock behaviour on such loops.
_loop_declines: dict[tuple[str, str], str] = {}


def register(patch: Patch | _Lazy, *, default: bool = True) -> None:
    """Make a patch known by name (``fastloop.patches.RECORDS``, at import)."""
    with _lock:
        _patches[patch.name] = patch
        if default and patch.name not in _default:
            _default.append(patch.name)


def unregister(name: str) -> None:
    """Forget a patch registered at run time (uninstalled first, if it is on)."""
    with _lock:
        uninstall([name])
        _patches.pop(name, None)
        _declined.pop(name, None)
        if name in _default:
            _default.remove(name)


def register_lazy(name: str, target: str, module: str, *, default: bool = True) -> None:
    """Know a patch by name now; import ``module`` (its ``PATCH``) with ``target``."""
    register(_Lazy(name, target, module), default=default)


def _record(name: str) -> Patch:
    """The patch record, its module imported on first need."""
    entry = _patches[name]
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
    _patches[name] = record
    return record


class _PostImportFinder:
    """Runs the requested patches of a target module right after its code ran.

    Finds the real spec with the finders behind it and wraps the loader for
    that one import.  The patches run while the target's parent package may
    still be importing (``asyncio.selector_events`` inside ``import
    asyncio``): a ``check()`` must not use the parent's other names.  The
    module's ``__loader__`` is the real one again before any patch runs.
    Fires on every import of a target (a reload too): the registry skips
    what is applied already.
    """

    def __init__(self) -> None:
        self.targets: set[str] = set()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: object = None
    ) -> ModuleSpec | None:
        if fullname not in self.targets:
            return None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec: ModuleSpec | None = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _HookedLoader(spec.loader)  # type: ignore[assignment]
        return spec


class _HookedLoader:
    """The real loader, plus the requested patches once the module's code ran."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self.loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        try:
            _apply_requested(module)
        except Exception as exc:  # the application's import must go on
            log.warning("fastloop: patches on %s not applied: %r", module.__name__, exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


_finder = _PostImportFinder()


def known() -> tuple[str, ...]:
    """All patch names, in registration order."""
    return tuple(_patches)


def default_set() -> tuple[str, ...]:
    """The names ``install()`` applies when given none."""
    return tuple(_default)


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
            module = sys.modules.get(target)
            if module is not None:
                _apply_requested(module)
            elif target not in _finder.targets:
                _finder.targets.add(target)
                if _finder not in sys.meta_path:
                    sys.meta_path.insert(0, _finder)
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


def effect_of(name: str) -> Effect | None:
    """The live effect of an applied patch, for settings that follow it."""
    with _lock:
        applied = _applied.get(name)
        return applied.effect if applied is not None else None


def available() -> dict[str, str | None]:
    """For each patch: None if it can apply in this process, else why not.

    Imports each patch's target module (Tornado, asyncio) to look.
    """
    verdicts: dict[str, str | None] = {}
    for name, entry in list(_patches.items()):
        try:
            module = importlib.import_module(entry.target)
        except Exception as exc:  # any failure to import is a reason, not a crash
            verdicts[name] = f"cannot import {entry.target}: {exc}"
            continue
        if name in _applied:
            verdicts[name] = None
            continue
        verdicts[name] = _safe_check(name, module)
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
    with _lock:
        for name, entry in list(_patches.items()):
            if entry.target != module.__name__:
                continue
            if name not in _requested or name in _applied or name in _declined:
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
        effect = patch.effect() if patch.effect is not None else None
    except BaseException:
        _restore(_Applied(patch, done, originals[: len(done)]))
        raise
    _applied[patch.name] = _Applied(patch, swaps, originals, effect)


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
    target = _patches[name].target
    try:
        module = importlib.import_module(target)
    except Exception as exc:  # any failure to import is a reason, not a crash
        return f"cannot import {target}: {exc}"
    return _safe_check(name, module)


for _row in RECORDS:
    register_lazy(*_row[:3], default=_row[3])
del _row
