"""A post-import hook: call back right after a watched module's code ran.

Ours rather than wrapt's: importing wrapt 2.5 costs 11-12 ms even after
``import tornado.web`` (``python -X importtime -c "import tornado.web,
wrapt"``; 10 ms of it is importlib.metadata, which ``wrapt.importer``
imports at its top), twice the whole start-up budget of ``FASTLOOP=1``;
fastloop no longer depends on wrapt for that reason.
"""

from __future__ import annotations

import sys

# Loaded as ``asyncio`` is (``fastloop.runtime.bootstrap``): no ``typing``,
# which asyncio does not import on every version; mypy reads it as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any


class PostImportFinder:
    """Runs the requested patches of a target module right after its code ran.

    Finds the real spec with the finders behind it and wraps the loader for
    that one import.  The patches run while the target's parent package may
    still be importing (``asyncio.selector_events`` inside ``import
    asyncio``): a ``check()`` must not use the parent's other names.  The
    module's ``__loader__`` is the real one again before any patch runs.
    Fires on every import of a target (a reload too): the registry skips
    what is applied already.  Kept apart from the registry: it knows
    nothing of patches, only which modules to watch and whom to call.
    """

    def __init__(self, on_import: Callable[[ModuleType], None]) -> None:
        self.targets: set[str] = set()
        self._on_import = on_import

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: object = None
    ) -> ModuleSpec | None:
        if fullname not in self.targets:
            return None
        return spec_calling_back(self, fullname, path, target, self._on_import)


def spec_calling_back(
    finder: object,
    fullname: str,
    path: Sequence[str] | None,
    target: object,
    on_import: Callable[[ModuleType], None],
) -> ModuleSpec | None:
    """``spec_behind``'s spec, its loader calling ``on_import`` once the code ran."""
    spec = spec_behind(finder, fullname, path, target)
    if spec is not None and hasattr(spec.loader, "exec_module"):
        spec.loader = _HookedLoader(spec.loader, on_import)  # type: ignore[assignment]
    return spec


def spec_behind(
    finder: object, fullname: str, path: Sequence[str] | None, target: object
) -> ModuleSpec | None:
    """The spec the finders on ``sys.meta_path`` other than ``finder`` give."""
    for other in list(sys.meta_path):
        find = getattr(other, "find_spec", None)
        if other is finder or find is None:
            continue
        spec: ModuleSpec | None = find(fullname, path, target)
        if spec is not None:
            return spec
    return None


class _HookedLoader:
    """The real loader, plus the requested patches once the module's code ran."""

    def __init__(self, loader: Any, on_import: Callable[[ModuleType], None]) -> None:
        self.loader = loader
        self.on_import = on_import

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self.loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        try:
            self.on_import(module)
        except Exception as exc:  # the application's import must go on
            import logging

            logging.getLogger("fastloop").warning(
                "fastloop: hook after importing %s failed: %r", module.__name__, exc
            )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)
