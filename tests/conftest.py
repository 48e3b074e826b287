from __future__ import annotations

import os
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

import fastloop
from tests_support import site_directories


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


@pytest.fixture(autouse=True)
def _no_settings_leak() -> Iterator[None]:
    """A test that changes settings (a preload in this process, say) undoes it."""
    from fastloop import config
    from fastloop.runtime import bootstrap

    saved = {row.name: getattr(config.settings, row.name) for row in config.SETTINGS}
    sources = dict(config.sources)
    yield
    changed = {n: v for n, v in saved.items() if getattr(config.settings, n) != v}
    if changed:  # the saved values are parsed already: set them as they were
        bootstrap.apply(changed, dict.fromkeys(changed, "test teardown"))
    config.sources.clear()
    config.sources.update(sources)


@pytest.fixture(scope="session")
def tls() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) TLS contexts trusting one throwaway authority."""
    trustme = pytest.importorskip("trustme")
    authority = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("localhost").configure_cert(server_context)
    client_context = ssl.create_default_context()
    authority.configure_trust(client_context)
    return server_context, client_context
