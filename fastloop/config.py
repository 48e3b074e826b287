"""The settings (``FASTLOOP*`` variables, ``fastloop.configure()``) and their parsing.

A bad value must never stop the host application: parsing returns what it
could understand plus a list of problems, each one line naming the
variable, the bad token and the accepted values.  The caller prints them.

Settings and parsing only: this module imports no other fastloop module
(patched code reads ``settings`` at call time).  What a change of setting
sets in motion (the watchdog, the GIL probe, the exit report) is
``fastloop._bootstrap``'s.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

ON = frozenset({"1", "true", "all"})
OFF = frozenset({"0", "false"})


class Problem(NamedTuple):  # not a dataclass: ~0.4 ms less (-X importtime)
    variable: str
    value: str
    bad: tuple[str, ...]
    accepted: str

    def __str__(self) -> str:
        tokens = ", ".join(repr(t) for t in self.bad)
        return (
            f"fastloop: ignoring {tokens} in {self.variable}={self.value!r}; "
            f"accepted: {self.accepted}"
        )


def parse_patches(
    value: str | None,
    known: Sequence[str],
    variable: str = "FASTLOOP",
    default: Sequence[str] | None = None,
) -> tuple[frozenset[str] | None, list[Problem]]:
    """Parse ``FASTLOOP``: the patch names to install, ``None`` for the default set.

    Returns an empty set when nothing is to be installed.  Keywords and
    names are case-insensitive and surrounding blanks are ignored; empty
    items of a comma list (``"add_callback,"``) are harmless and skipped.
    ``all`` in a list stands for the default set (``default``, else every
    known name), so ``all,switchinterval`` adds an opt-in patch to it.
    """
    accepted = f"1, true, all, 0, false, empty, or a comma list of {', '.join(known)}"
    text = (value or "").strip().lower()
    if text in ON:
        return None, []
    if text in OFF or text == "":
        return frozenset(), []
    chosen: set[str] = set()
    bad: list[str] = []
    for raw in text.split(","):
        token = raw.strip()
        if not token:
            continue
        if token == "all":
            chosen.update(known if default is None else default)
        elif token in known:
            chosen.add(token)
        else:
            bad.append(raw.strip() or raw)
    problems = [Problem(variable, value or "", tuple(bad), accepted)] if bad else []
    return frozenset(chosen), problems


def patches_from_environ(
    environ: Mapping[str, str],
    known: Sequence[str],
    default: Sequence[str] | None = None,
) -> tuple[frozenset[str] | None, list[Problem]]:
    return parse_patches(environ.get("FASTLOOP"), known, default=default)


# --- settings shared with fastloop.configure() --------------------------------


#: Why these defaults: the README's "GIL" section, from bench/switchinterval.py.
DEFAULT_POLL_US = 0.0
DEFAULT_SWITCH_INTERVAL_US = 200.0


@dataclass
class Settings:
    """What the ``FASTLOOP_*`` variables and ``fastloop.configure()`` set.

    Patched code reads these at call time, so a change applies at once.
    """

    slow_write_ms: float = 0.0  # 0: no slow-write log (the default)
    write_cpu: bool = False
    report: str | None = None  # None: no exit report; "stderr"; or a JSON path
    block_ms: float | None = None  # the process-wide watchdog's threshold; None: off
    #: poll: skip zero-timeout polls younger than this after a real one
    #: (0, the default: every poll is real, only without releasing the GIL).
    poll_us: float = DEFAULT_POLL_US
    #: switchinterval: the interpreter switch interval set while installed.
    switch_interval_us: float = DEFAULT_SWITCH_INTERVAL_US
    gil_probe_ms: float | None = None  # the GIL contention probe's period; None: off
    #: slow_write_ms in ns, kept in step by __setattr__: read after long writes.
    slow_write_ns: int = field(default=0, init=False, repr=False)
    #: poll_us in ns, kept in step by __setattr__: read on every skipped poll.
    poll_ns: int = field(default=int(DEFAULT_POLL_US * 1000), init=False, repr=False)

    def __setattr__(self, name: str, value: object) -> None:
        super().__setattr__(name, value)
        if name == "slow_write_ms":
            super().__setattr__("slow_write_ns", int(float(value) * 1_000_000))  # type: ignore[arg-type]
        elif name == "poll_us":
            super().__setattr__("poll_ns", int(float(value) * 1_000))  # type: ignore[arg-type]


settings = Settings()

SETTING_VARIABLES = {
    "slow_write_ms": "FASTLOOP_SLOW_WRITE_MS",
    "write_cpu": "FASTLOOP_WRITE_CPU",
    "report": "FASTLOOP_REPORT",
    "block_ms": "FASTLOOP_BLOCK_MS",
    "poll_us": "FASTLOOP_POLL_US",
    "switch_interval_us": "FASTLOOP_SWITCH_INTERVAL_US",
    "gil_probe_ms": "FASTLOOP_GIL_PROBE_MS",
}


class SettingError(ValueError):
    """A setting value that cannot be used; ``str()`` is the accepted form."""


def parse_setting(name: str, value: object) -> object:
    """Validate one setting from code or from the environment (strings)."""
    if name == "slow_write_ms":
        return _checked(value, False, "a number >= 0 (milliseconds; 0 turns it off)")
    if name == "write_cpu":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in {"1", "true"}:
            return True
        if text in {"0", "false", ""}:
            return False
        raise SettingError("1 or 0")
    if name == "report":
        if value is None or value is False:
            return None
        text = str(value).strip()
        if text.lower() in {"", "0", "false"}:
            return None
        if text.lower() in {"1", "true", "stderr"}:
            return "stderr"
        why = unwritable(text)
        if why:
            raise SettingError(f"1, stderr, or a file path fastloop can write ({why})")
        return text
    if name == "poll_us":
        return _checked(value, False, "a number >= 0 (microseconds)")
    if name == "switch_interval_us":
        return _checked(value, True, "a number > 0 (microseconds)")
    if name in ("block_ms", "gil_probe_ms"):
        if value is None:
            return None
        return _checked(value, True, "a number > 0 (milliseconds)")
    raise SettingError(f"one of {', '.join(SETTING_VARIABLES)}")


def finite_number(value: object, positive: bool) -> float | None:
    """``value`` as a finite number > 0 (``positive``) or >= 0; else None.

    The one check behind every number fastloop accepts: settings, the
    observers' arguments and the command line's options.
    """
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if not (number > 0 if positive else number >= 0) or number == float("inf"):
        return None  # NaN fails both comparisons
    return number


def _checked(value: object, positive: bool, accepted: str) -> float:
    number = finite_number(value, positive)
    if number is None:
        raise SettingError(accepted)
    return number


def positive_ms(what: str, value: object) -> float:
    """A finite number of milliseconds > 0, else ValueError naming ``what``."""
    number = finite_number(value, positive=True)
    if number is None:
        raise ValueError(
            f"fastloop {what}={value!r}: expected a number of milliseconds > 0"
        )
    return number


def unwritable(path: str) -> str | None:
    """Why an exit output could not be written to ``path``; None if it can.

    Checked at start-up: learning it at exit, after hours of running, is too
    late.  ``{pid}`` in the name stands for each process's id.  (os.path,
    not pathlib: this runs at start-up, and pathlib costs ~0.6 ms to import.)
    """
    target = path.replace("{pid}", str(os.getpid()))
    directory = os.path.dirname(target) or "."
    if not os.path.isdir(directory):
        return f"directory {directory} does not exist"
    if os.path.isdir(target):
        return f"{target} is a directory"
    checked = target if os.path.exists(target) else directory
    if not os.access(checked, os.W_OK):
        return f"{checked} is not writable"
    return None


def profile_problem(environ: Mapping[str, str]) -> Problem | None:
    """A problem line when ``FASTLOOP_PROFILE`` names a file that cannot be written."""
    value = environ.get("FASTLOOP_PROFILE")
    why = unwritable(value) if value else None
    if value is None or why is None:
        return None
    return Problem(
        "FASTLOOP_PROFILE", value, (value,), f"a file path fastloop can write ({why})"
    )


def settings_from_environ(
    environ: Mapping[str, str],
) -> tuple[dict[str, object], list[Problem]]:
    """The settings the environment asks for, and a problem line per bad one."""
    chosen: dict[str, object] = {}
    problems: list[Problem] = []
    for name, variable in SETTING_VARIABLES.items():
        if variable not in environ:
            continue
        raw = environ[variable]
        try:
            chosen[name] = parse_setting(name, raw)
        except SettingError as accepted:
            problems.append(
                Problem(variable, raw, (raw.strip() or raw,), str(accepted))
            )
    return chosen, problems
