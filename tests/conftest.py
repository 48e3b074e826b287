from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from tornado.ioloop import IOLoop

import fastloop
from fastloop.patches.add_callback import CallbackBatch
from tests_support import site_directories

T = TypeVar("T")


def pytest_configure(config: pytest.Config) -> None:
    """The tests exercise the installed wheel, never the checkout (fail under CI)."""
    where = Path(fastloop.__file__).resolve()
    if any(directory in where.parents for directory in site_directories()):
        return
    message = (
        f"fastloop was imported from {where.parent}, not from this "
        "interpreter's site-packages: install it (`pip install '.[test]'`) and "
        "run the `pytest` script, not `python -m pytest`, which puts the "
        "checkout first on sys.path"
    )
    if os.environ.get("CI"):
        raise pytest.UsageError(message)
    config.issue_config_time_warning(pytest.PytestConfigWarning(message), 2)


@pytest.fixture(autouse=True, scope="session")
def _cwd_outside_the_checkout(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[None]:
    """Subprocesses start outside the checkout.

    ``python -c`` and ``python -m`` put their cwd first on ``sys.path``: in
    the checkout, its ``fastloop/`` would shadow the installed wheel (and
    files a child writes to a relative path would land in the checkout).
    """
    saved = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("cwd"))
    try:
        yield
    finally:
        os.chdir(saved)


@pytest.fixture(autouse=True)
def _no_patches_leak() -> Iterator[None]:
    """Every test starts and ends with stock Tornado."""
    fastloop.uninstall()
    yield
    fastloop.uninstall()


@contextlib.contextmanager
def current_loop() -> Iterator[tuple[asyncio.AbstractEventLoop, IOLoop]]:
    """A fresh asyncio loop set as current, with its IOLoop; closed afterwards."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        yield loop, IOLoop.current()
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def differential(scenario: Callable[[], T], patches: list[str]) -> tuple[T, T]:
    """Run ``scenario`` under stock and then patched Tornado; return both results."""
    fastloop.uninstall()
    stock = scenario()
    with fastloop.patched(patches) as active:
        assert set(patches) <= active, f"patches did not apply: {fastloop.available()}"
        patched = scenario()
    return stock, patched


def batches_queued(loop: asyncio.AbstractEventLoop) -> int:
    """How many fastloop batches sit in the loop's ready queue (0 under stock)."""
    ready = getattr(loop, "_ready", ())
    return sum(type(handle) is CallbackBatch for handle in ready)


_ADDRESS = re.compile(r"0x[0-9a-f]+")


def normalise(text: str) -> str:
    """Drop object addresses, which differ between two runs of one scenario."""
    return _ADDRESS.sub("0x?", text)


class Records(logging.Handler):
    """Collect (logger, level, message, exception type) from chosen loggers."""

    def __init__(self, *names: str) -> None:
        super().__init__(logging.DEBUG)
        self.names = names
        self.rows: list[tuple[str, str, str, str | None]] = []

    def emit(self, record: logging.LogRecord) -> None:
        exc = (
            record.exc_info[0].__name__
            if record.exc_info and record.exc_info[0]
            else None
        )
        self.rows.append(
            (record.name, record.levelname, normalise(record.getMessage()), exc)
        )

    def __enter__(self) -> Records:
        for name in self.names:
            logging.getLogger(name).addHandler(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        for name in self.names:
            logging.getLogger(name).removeHandler(self)
