"""Helpers the tests share: the installed wheel, differential runs, loops, logs."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import logging
import os
import re
import site
import socket
import subprocess
import sys
import sysconfig
import textwrap
import threading
import time
import urllib.request
from asyncio import base_events, events
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest
from tornado.ioloop import IOLoop
from tornado.iostream import IOStream, SSLIOStream
from tornado.tcpserver import TCPServer

import fastloop

T = TypeVar("T")


def site_directories() -> set[Path]:
    """This interpreter's site-packages directories (the venv's, under a venv)."""
    paths = sysconfig.get_paths()
    found = {*site.getsitepackages(), paths["purelib"], paths["platlib"]}
    if site.ENABLE_USER_SITE:
        found.add(site.getusersitepackages())
    return {Path(directory).resolve() for directory in found}


def installed_pth() -> Path | None:
    """The fastloop.pth that pip put in site-packages, if any."""
    for directory in site_directories():
        candidate = directory / "fastloop.pth"
        if candidate.exists():
            return candidate
    return None


def require_installed_pth() -> Path:
    """Skip locally, fail under CI, when fastloop was not installed from a wheel."""
    found = installed_pth()
    if found is None:
        message = "fastloop.pth is not in site-packages: install with `pip install .`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


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
    from fastloop.patches.add_callback import CallbackBatch

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
        # Another test's logging config may have disabled a logger or raised
        # its level (distributed's sets "tornado" to CRITICAL).
        self.saved = []
        for name in self.names:
            logger = logging.getLogger(name)
            self.saved.append((logger, logger.disabled, logger.level))
            logger.disabled = False
            if logger.getEffectiveLevel() > logging.WARNING:
                logger.setLevel(logging.WARNING)
            logger.addHandler(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        for logger, disabled, level in self.saved:
            logger.removeHandler(self)
            logger.disabled = disabled
            logger.setLevel(level)


def declared_metrics(section: Any) -> list[str]:
    """The Prometheus metric names a schema section (and its parts) declares,
    each once (the series of a labelled metric share its name)."""
    from fastloop.telemetry.fields import Part

    names: list[str] = []
    for field in section.fields:
        if isinstance(field, Part):
            names += declared_metrics(field.section)
        elif isinstance(field.metric, str):
            names.append(field.metric)
    return list(dict.fromkeys(names))


class ThreadSafeHandle314(asyncio.Handle):
    """Stands in for CPython 3.14's ``events._ThreadSafeHandle`` (gh-128340):
    a Handle whose cancel and run are serialised by an RLock.  Counts its
    instances, so a test can tell that the 3.14 path ran."""

    __slots__ = ("_lock",)
    made = 0

    def __init__(self, callback: Any, args: Any, loop: Any, context: Any = None):
        super().__init__(callback, args, loop, context)
        self._lock = threading.RLock()
        type(self).made += 1

    def cancel(self) -> None:
        with self._lock:
            super().cancel()

    def _run(self) -> None:
        with self._lock:
            if not self._cancelled:
                super()._run()


def call_soon_threadsafe_314(self: Any, callback: Any, *args: Any, context=None):
    """``BaseEventLoop.call_soon_threadsafe`` as CPython 3.14 shapes it: the
    handle is built and appended to ``_ready`` here, not by ``_call_soon``,
    and only then is the loop woken."""
    self._check_closed()
    if self._debug:
        self._check_callback(callback, "call_soon_threadsafe")
    handle = events._ThreadSafeHandle(callback, args, self, context)
    self._ready.append(handle)
    if handle._source_traceback:
        del handle._source_traceback[-1]
    self._write_to_self()
    return handle


def simulate_python_314(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give this interpreter's asyncio 3.14's ``call_soon_threadsafe``, as
    verified code (the tests that use it are its verification here)."""
    monkeypatch.setattr(events, "_ThreadSafeHandle", ThreadSafeHandle314, raising=False)
    monkeypatch.setattr(
        base_events.BaseEventLoop, "call_soon_threadsafe", call_soon_threadsafe_314
    )
    trust(monkeypatch, "asyncio.base_events:BaseEventLoop.call_soon_threadsafe")


def trust(monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    """Add ``target``'s code as it is now to the verified table, for the test."""
    from fastloop.patches import fingerprints
    from fastloop.patches.verified import VERIFIED

    found = fingerprints.fingerprint(fingerprints.resolve(target))
    assert found is not None, target
    known = {**VERIFIED.get(target, {}), found: ("a test",)}
    monkeypatch.setitem(VERIFIED, target, known)


def default_set(*, dask: bool = False) -> list[str]:
    """The default set, sorted as tests compare it: read from the registry,
    never spelled out, so a new default patch changes no test but its own.

    Without ``dask``: the patches a process that never imports distributed
    applies (those of ``ON_IMPORT_ONLY`` packages wait for their import)."""
    from fastloop.patches import ON_IMPORT_ONLY, registry

    return sorted(
        name
        for name in registry.default_set()
        if dask or registry.target(name).partition(".")[0] not in ON_IMPORT_ONLY
    )


#: The same scenario under stock and under the patch, as two test cases.
STOCK_AND_PATCHED = pytest.mark.parametrize(
    "patched", [False, True], ids=["stock", "patched"]
)
#: Long enough for any event a scenario waits on; it waits on events, not time.
PATIENCE_S = 30


async def until(condition: Callable[[], object], what: str) -> None:
    """Wait, on the running loop, until ``condition()`` holds (or fail)."""
    for _ in range(PATIENCE_S * 100):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


def dask_patches() -> set[str]:
    """The default set's patches of distributed: armed until it is imported."""
    return set(default_set(dask=True)) - set(default_set())


def dask_installed() -> bool:
    return importlib.util.find_spec("distributed") is not None


async def stream_pair(server_ssl=None, client_ssl=None):
    """A connected (client, server) IOStream pair on loopback."""
    accepted = asyncio.get_running_loop().create_future()

    class Server(TCPServer):
        async def handle_stream(self, stream, address):
            accepted.set_result(stream)

    server = Server(ssl_options=server_ssl)
    sock, port = bind_unused()
    server.add_sockets([sock])
    if client_ssl is None:
        client = IOStream(socket.socket())
        await client.connect(("127.0.0.1", port))
    else:
        client = SSLIOStream(socket.socket(), ssl_options=client_ssl)
        await client.connect(("127.0.0.1", port), server_hostname="localhost")
    return client, await accepted, server


def bind_unused():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    return sock, sock.getsockname()[1]


# --- dask clusters: what their processes run, and their HTTP servers ----------


def spin(seconds: float) -> int:
    """A task that holds the GIL in pure Python for ``seconds``."""
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    return n


def worker_http_port(dask_worker: Any) -> int:
    return int(dask_worker.http_server.port)


def scheduler_http_port(dask_scheduler: Any) -> int:
    return int(dask_scheduler.http_server.port)


def metrics_text(port: int) -> str:
    """A dask server's ``/metrics``, as served."""
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=60) as response:
        return str(response.read().decode())


def bench_module(name: str) -> Any:
    """A module of the checkout's bench/, importable once the tree is there."""
    bench = Path(__file__).resolve().parents[1] / "bench"
    if not bench.exists():
        pytest.skip("needs the source tree")
    if str(bench) not in sys.path:
        sys.path.insert(0, str(bench))
    return importlib.import_module(name)


def run_python(
    code: str,
    *flags: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``python FLAGS -c CODE`` (dedented) in this environment less every
    ``FASTLOOP*`` variable, plus ``env``; output captured as text."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOOP")}
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, *flags, "-c", textwrap.dedent(code)],
        env=environ,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def doctor_row(out: str, name: str) -> str:
    """What ``fastloop doctor``'s text says of patch ``name``, after its name."""
    found = re.search(rf"^  {re.escape(name)} +(\S.*)$", out, re.MULTILINE)
    assert found, f"no doctor row for {name}:\n{out}"
    return found.group(1)
