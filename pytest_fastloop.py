"""fastloop's pytest plugin: ``--fastloop[=PATCHES]`` and the ``fastloop_ab`` fixture.

    pytest --fastloop                     # the whole session under fastloop
    pytest --fastloop=add_callback,wakeup
    pytest -m "not fastloop_ab"           # skip the A/B tests in a quick run

    def test_my_workload(fastloop_ab):
        result = fastloop_ab(one_round, rounds=21)   # fastloop.ab, interleaved
        result.assert_not_slower(0.02)

pytest loads this module (entry point ``pytest11``) in every session of an
environment where fastloop is installed, so until ``--fastloop`` is given
or the fixture used it imports nothing of fastloop and changes nothing: it
is a top-level module because importing any ``fastloop.*`` module imports
the package (and at-fork hooks).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from fastloop.ab import Result

#: The fixture's default cap on adaptive rounds, as a multiple of ``rounds``.
MAX_ROUNDS_FACTOR = 4


@dataclass(frozen=True)
class _Session:
    """What ``--fastloop`` installed."""

    requested: frozenset[str] | None  # None: the default set
    active: frozenset[str]
    exported: str  # the FASTLOOP value subprocesses see


_SESSION: pytest.StashKey[_Session] = pytest.StashKey()
_RESULTS: pytest.StashKey[list[tuple[str, Result]]] = pytest.StashKey()  # test id


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fastloop")
    group.addoption(
        "--fastloop",
        nargs="?",
        const="1",
        default=None,
        metavar="PATCHES",
        help="run the session with fastloop installed (the default patches, or a "
        "comma list as FASTLOOP takes) and FASTLOOP exported to subprocesses",
    )
    group.addoption(
        "--fastloop-ab-json",
        default=None,
        metavar="PATH",
        help="write the results of the fastloop_ab fixture to PATH as JSON",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "fastloop_ab: an A/B test of stock against patched Tornado (set on every "
        "test that uses the fastloop_ab fixture); -m 'not fastloop_ab' skips them",
    )
    value = config.getoption("fastloop")
    if value is not None:
        _install(config, value)


def _install(config: pytest.Config, value: str) -> None:
    from fastloop import patched
    from fastloop.config import parse_patches
    from fastloop.patches import registry

    requested, problems = parse_patches(value, registry.known(), "--fastloop")
    if problems:
        bad = ", ".join(repr(token) for problem in problems for token in problem.bad)
        raise pytest.UsageError(
            f"--fastloop: {bad} is not a patch (accepted: {problems[0].accepted}); "
            "write --fastloop=PATCHES, or put test paths before --fastloop"
        )
    stack = contextlib.ExitStack()
    config.add_cleanup(stack.close)
    active = stack.enter_context(patched(requested))
    exported = "1" if requested is None else ",".join(sorted(requested)) or "0"
    previous = os.environ.get("FASTLOOP")
    os.environ["FASTLOOP"] = exported
    stack.callback(_restore_environ, previous)
    config.stash[_SESSION] = _Session(requested, active, exported)


def _restore_environ(previous: str | None) -> None:
    if previous is None:
        os.environ.pop("FASTLOOP", None)
    else:
        os.environ["FASTLOOP"] = previous


def pytest_report_header(config: pytest.Config) -> str | None:
    session = config.stash.get(_SESSION, None)
    if session is None:
        return None
    from fastloop import available
    from fastloop.patches.registry import NOT_IMPORTED

    verdicts = available()
    waiting = sorted(
        name for name in session.active if (verdicts[name] or "").endswith(NOT_IMPORTED)
    )
    active = sorted(set(session.active) - set(waiting))
    line = (
        f"fastloop: {', '.join(active) or 'no patch'} installed "
        f"in-process, FASTLOOP={session.exported} for subprocesses"
    )
    if waiting:
        line += f"; {', '.join(waiting)} when their package is imported"
    declined = [
        f"{name} ({reason})"
        for name, reason in verdicts.items()
        if reason
        and name not in waiting
        and (session.requested is None or name in session.requested)
    ]
    return line + (f"; not applicable: {', '.join(declined)}" if declined else "")


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "fastloop_ab" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.fastloop_ab)


class ABRunner:
    """The ``fastloop_ab`` fixture: A/B one workload and record the result."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request

    def __call__(
        self,
        one_round: Callable[[], float],
        rounds: int = 21,
        *,
        patches: Iterable[str] | None = None,
        max_rounds: int | None = None,
        name: str | None = None,
        warmup: int = 1,
    ) -> Result:
        """Stock and patched rounds of ``one_round`` (which returns the seconds
        it measured), interleaved, ``rounds`` at first, then more while the
        interval is noisy, up to ``max_rounds`` (default ``4 * rounds``).

        ``patches`` defaults to what ``--fastloop=PATCHES`` chose, else the
        default set; ``name`` (default: the test id) labels the summary row.
        """
        from fastloop import ab

        config = self._request.config
        session = config.stash.get(_SESSION, None)
        if patches is None and session is not None:
            patches = session.requested
        result = ab.patched_vs_stock(
            one_round,
            patches,
            rounds=rounds,
            warmup=warmup,
            name=name or self._request.node.nodeid,
            max_rounds=MAX_ROUNDS_FACTOR * rounds if max_rounds is None else max_rounds,
        )
        config.stash.setdefault(_RESULTS, []).append(
            (self._request.node.nodeid, result)
        )
        print(result)
        return result


@pytest.fixture
def fastloop_ab(request: pytest.FixtureRequest) -> ABRunner:
    """``result = fastloop_ab(one_round, rounds=21)``: see ``ABRunner``."""
    return ABRunner(request)


def summary_lines(results: Iterable[tuple[str, Result]]) -> list[str]:
    """The terminal summary table, one row per A/B run."""
    rows = [("workload", "patched/stock", "95% interval", "rounds", "noisy")]
    rows += [
        (
            r.name,
            f"{r.ratio:.3f}",
            f"[{r.low:.3f}, {r.high:.3f}]",
            str(len(r.ratios)),
            "noisy" if r.noisy else "",
        )
        for _, r in results
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    results = config.stash.get(_RESULTS, None)
    if results:
        terminalreporter.write_sep(
            "-", "fastloop A/B: patched/stock time, median of per-round ratios"
        )
        for line in summary_lines(results):
            terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("fastloop_ab_json")
    if path:
        results = session.config.stash.get(_RESULTS, [])
        with open(path, "w", encoding="utf-8") as handle:
            rows = [{"test": test, **r.to_dict()} for test, r in results]
            json.dump({"results": rows}, handle, indent=1)
            handle.write("\n")
