"""The settings: one table of the ``FASTLOOP_*`` variables, and their parsing.

Each row (``Setting``) names the variable, the ``configure()`` keyword, the
parser and the values it accepts, the default, whether its presence
activates fastloop at start-up, its ``fastloop run`` flag, its ``fastloop
doctor`` line and what a change of it sets in motion (``on_change``, a
``module:function`` that ``fastloop.runtime.bootstrap`` calls with the new
value).  ``settings``, ``configure()``'s checks, start-up, ``fastloop run``
and ``fastloop doctor`` are all made from the rows: a new setting is a row.

A bad value must never stop the host application: parsing returns what it
could understand plus a list of problems, each one line naming the
variable, the bad token and the accepted values.  The caller prints them.
``FASTLOOP`` itself, the patch list, is parsed by ``parse_patches``.

Settings and parsing only: this module imports no other fastloop module
(patched code reads ``settings`` at call time).  Plain classes: this runs
at start-up, where a dataclass costs ~0.4 ms to define (``-X importtime``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

ON = frozenset({"1", "true", "all"})
OFF = frozenset({"0", "false"})


class Problem:
    """A value that could not be used, as the one line printed for it."""

    __slots__ = ("accepted", "bad", "outcome", "value", "variable")

    def __init__(
        self,
        variable: str,
        value: str | None,
        bad: tuple[str, ...],
        accepted: str,
        outcome: str = "",
    ) -> None:
        self.variable = variable
        self.value = value
        self.bad = bad
        self.accepted = accepted
        #: What applies instead, when the caller knows ("installing nothing").
        self.outcome = outcome

    def __str__(self) -> str:
        tokens = ", ".join(repr(t) for t in self.bad)
        where = (
            self.variable if self.value is None else f"{self.variable}={self.value!r}"
        )
        line = f"fastloop: ignoring {tokens} in {where}; accepted: {self.accepted}"
        return f"{line}; {self.outcome}" if self.outcome else line


class SettingError(ValueError):
    """A setting value that cannot be used; ``str()`` is the accepted form."""


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
    ``all``, ``1`` or ``true`` in a list stands for the default set
    (``default``, else every known name), so ``1,poll`` adds the opt-in
    ``poll`` to it; ``0`` or ``false`` in a list is a bad token (off and a
    name at once say nothing).  A problem says what is installed instead,
    which for a value with nothing usable is nothing.
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
        if token in ON:
            chosen.update(known if default is None else default)
        elif token in known:
            chosen.add(token)
        else:
            bad.append(raw.strip() or raw)
    if not bad:
        return frozenset(chosen), []
    outcome = "installing " + (", ".join(sorted(chosen)) if chosen else "nothing")
    return frozenset(chosen), [
        Problem(variable, value or "", tuple(bad), accepted, outcome)
    ]


def patches_from_environ(
    environ: Mapping[str, str],
    known: Sequence[str],
    default: Sequence[str] | None = None,
) -> tuple[frozenset[str] | None, list[Problem]]:
    return parse_patches(environ.get("FASTLOOP"), known, default=default)


# --- parsers: a value from code or from the environment (a string) -----------


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


def positive_ms(what: str, value: object) -> float:
    """A finite number of milliseconds > 0, else ValueError naming ``what``."""
    number = finite_number(value, positive=True)
    if number is None:
        raise ValueError(
            f"fastloop {what}={value!r}: expected a number of milliseconds > 0"
        )
    return number


def _number(
    positive: bool, accepted: str, off: bool = False
) -> Callable[[object], Any]:
    """A number > 0 (``positive``) or >= 0; ``off``: None turns the setting off."""

    def parse(value: object) -> float | None:
        if off and value is None:
            return None
        number = finite_number(value, positive)
        if number is None:
            raise SettingError(accepted)
        return number

    return parse


def _switch(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in {"1", "true"}:
        return True
    if text in {"0", "false", ""}:
        return False
    raise SettingError("1 or 0")


def _output(keywords: bool) -> Callable[[object], str | None]:
    """An exit output's path, checked now (``keywords``: 1/stderr print instead)."""

    def parse(value: object) -> str | None:
        if value is None or value is False:
            return None
        text = str(value).strip()
        if text.lower() in {"", "0", "false"}:
            return None
        if keywords and text.lower() in {"1", "true", "stderr"}:
            return "stderr"
        why = unwritable(text)
        if why:
            words = "1, stderr, or a file path" if keywords else "a file path"
            raise SettingError(f"{words} fastloop can write ({why})")
        return text

    return parse


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


def _slow_write_line(value: str | None) -> str:
    # Off unless asked for: a busy machine makes any write look slow.
    try:
        threshold = float(SLOW_WRITE_MS.parse(value or 0))
    except SettingError:
        return f"{value} (invalid)"
    shown = "(unset)" if value is None else value
    if not threshold:
        return f"{shown}: slow-write log off (the default)"
    return (
        f"{shown}: warn about write_to_fd calls slower than {threshold:g} ms "
        "(every call is timed for it)"
    )


#: FASTLOOP_WRITE_TIMING's values: time a sample of write_to_fd calls, or all.
WRITE_TIMINGS = ("sampled", "every")


def _write_timing(value: object) -> str:
    text = str(value).strip().lower()
    if text not in WRITE_TIMINGS:
        raise SettingError(" or ".join(WRITE_TIMINGS))
    return text


def _write_timing_line(value: str | None) -> str:
    try:
        mode = _write_timing(value or "sampled")
    except SettingError:
        return f"{value} (invalid)"
    shown = "(unset)" if value is None else value
    if mode == "every":
        return f"{shown}: every write_to_fd call timed"
    return (
        f"{shown}: 1 in N write_to_fd calls timed, every call counted (the "
        "default); every call timed with FASTLOOP_SLOW_WRITE_MS or FASTLOOP_WRITE_CPU"
    )


#: ``FASTLOOP_SWITCH_INTERVAL_US=auto``: adaptive (the default).
AUTO = "auto"


#: The fixed intervals accepted (us).  CPython stores whole microseconds:
#: below 1 it keeps 0, and far above, the conversion overflows to 0 too.  A
#: loop thread waiting a second for the GIL is past any interval one means.
INTERVAL_RANGE_US = (1.0, 1_000_000.0)
INTERVAL_ACCEPTED = "auto, or a number of microseconds from 1 to 1000000"


def _interval(value: object) -> float | str:
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    number = finite_number(value, positive=True)
    shortest, longest = INTERVAL_RANGE_US
    if number is None or not shortest <= number <= longest:
        raise SettingError(INTERVAL_ACCEPTED)
    return number


def _budget(value: object) -> float:
    number = finite_number(value, positive=False)
    if number is None or number > 0.5:
        raise SettingError("a share of compute throughput from 0 to 0.5 (0.05 is 5%)")
    return number


def _interval_line(value: str | None) -> str:
    try:
        parsed = _interval(value or AUTO)
    except SettingError:
        return f"{value} (invalid)"
    shown = "(unset)" if value is None else value
    if parsed == AUTO:
        return (
            f"{shown}: auto, CPython's interval until threads wait for the GIL, "
            "then shorter within FASTLOOP_SWITCH_BUDGET"
        )
    return f"{shown}: a fixed interval of {parsed:g} us while switchinterval is on"


# --- the table ---------------------------------------------------------------


class RunFlag:
    """A setting's ``fastloop run`` option: ``--NAME VALUE``, or ``const`` alone.

    ``to_environ`` writes the parsed value into the command's environment.
    """

    __slots__ = ("const", "help", "metavar", "option", "to_environ")

    def __init__(
        self,
        option: str,
        metavar: str,
        help: str,
        *,
        const: str | None = None,
        to_environ: Callable[[Any], str] = str,
    ) -> None:
        self.option = option
        self.metavar = metavar
        self.help = help
        self.const = const
        self.to_environ = to_environ


class Setting:
    """One row of the table."""

    __slots__ = (
        "accepted",
        "activates",
        "default",
        "doctor",
        "effect",
        "flag",
        "name",
        "on_change",
        "parse",
        "variable",
    )

    def __init__(
        self,
        name: str,
        variable: str,
        parse: Callable[[object], Any],
        accepted: str,
        *,
        effect: str,
        default: Any = None,
        activates: bool = False,
        flag: RunFlag | None = None,
        doctor: Callable[[str | None], str] | None = None,
        on_change: str = "",
    ) -> None:
        self.name = name
        self.variable = variable
        self.parse = parse
        self.accepted = accepted
        #: What it does, as the docs' settings table says it (Markdown; a
        #: ``{name}`` field is filled in there from the code it names).
        self.effect = effect
        self.default = default
        self.activates = activates
        self.flag = flag
        self.doctor = doctor or (lambda raw: "(unset)" if raw is None else raw)
        self.on_change = on_change


SLOW_WRITE_MS = Setting(
    "slow_write_ms",
    "FASTLOOP_SLOW_WRITE_MS",
    _number(False, "a number >= 0 (milliseconds; 0 turns it off)"),
    "a number >= 0 (milliseconds; 0 turns it off)",
    effect=(
        "warn on logger `fastloop` about a slower `write_to_fd` (values under "
        "0.05 act as 0.05); while on, every call is timed"
    ),
    default=0.0,
    flag=RunFlag(
        "--slow-write-ms",
        "N",
        "warn about write_to_fd calls slower than N ms (default: off)",
    ),
    doctor=_slow_write_line,
    on_change="fastloop.patches.write_to_fd:follow_setting",
)

#: Every setting, in the order doctor lists them.
SETTINGS: tuple[Setting, ...] = (
    SLOW_WRITE_MS,
    #: write_to_fd: time 1 call in N (sampled) or every call; slow_write_ms
    #: and write_cpu time every call whatever this says.
    Setting(
        "write_timing",
        "FASTLOOP_WRITE_TIMING",
        _write_timing,
        " or ".join(WRITE_TIMINGS),
        effect=(
            "`write_to_fd` durations of 1 call in {sample_every}, chosen at random, "
            "or of every call (what asking costs: "
            "[Results](results.md#small-messages-and-write-timing)); calls and bytes "
            "are counted exactly either way"
        ),
        default="sampled",
        doctor=_write_timing_line,
        on_change="fastloop.patches.write_to_fd:follow_setting",
    ),
    Setting(
        "write_cpu",
        "FASTLOOP_WRITE_CPU",
        _switch,
        "1 or 0",
        effect=(
            "also time thread CPU per write (every call is timed then); report wall "
            "minus CPU as stalled"
        ),
        default=False,
        on_change="fastloop.patches.write_to_fd:follow_setting",
    ),
    Setting(
        "report",
        "FASTLOOP_REPORT",
        _output(keywords=True),
        "1, stderr, or a file path fastloop can write",
        effect=(
            "at exit and on SIGTERM, print `fastloop.report()`, or write `stats()` as"
            " JSON; the report starts with the patches active in that process"
        ),
        activates=True,
        flag=RunFlag(
            "--report",
            "PATH",
            "at exit (and on SIGTERM) print the report, or write stats JSON to "
            "PATH ({pid} in it: one file per process)",
            const="stderr",
        ),
        on_change="fastloop.runtime.bootstrap:arm_exit_report",
    ),
    Setting(
        "block_ms",
        "FASTLOOP_BLOCK_MS",
        _number(True, "a number > 0 (milliseconds)", off=True),
        "a number > 0 (milliseconds)",
        effect=(
            "run the blocked-loop watchdog with this threshold (works without "
            "`FASTLOOP`)"
        ),
        activates=True,
        flag=RunFlag(
            "--block-ms", "N", "log the stack of any IOLoop blocked longer than N ms"
        ),
        on_change="fastloop.observers.watchdog:follow_setting",
    ),
    #: poll: skip zero-timeout polls younger than this after a real one (0,
    #: the default: every poll is real, only without releasing the GIL; the
    #: docs/gil.md says why).
    Setting(
        "poll_us",
        "FASTLOOP_POLL_US",
        _number(False, "a number >= 0 (microseconds)"),
        "a number >= 0 (microseconds)",
        effect=(
            "`poll`: skip zero-timeout polls younger than this after a real one "
            "(changes when I/O is seen: read [The GIL](gil.md) first); read when a "
            "loop is created"
        ),
        default=0.0,
    ),
    #: switchinterval: adaptive (auto), or a fixed interval while installed.
    Setting(
        "switch_interval_us",
        "FASTLOOP_SWITCH_INTERVAL_US",
        _interval,
        INTERVAL_ACCEPTED,
        effect=(
            "`switchinterval`: auto keeps CPython's interval until threads wait for "
            "the GIL beside a running loop, then holds the shortest interval within "
            "the budget; a number holds that interval while installed, as "
            "`sys.setswitchinterval` would"
        ),
        default=AUTO,
        doctor=_interval_line,
        on_change="fastloop.patches.switchinterval:follow_setting",
    ),
    #: switchinterval, auto: the share of compute throughput its hand-overs
    #: may cost (bench/gil_*.py; docs/gil.md says why 5%).
    Setting(
        "switch_budget",
        "FASTLOOP_SWITCH_BUDGET",
        _budget,
        "a share of compute throughput from 0 to 0.5 (0.05 is 5%)",
        effect=(
            "`switchinterval`, auto: the share of compute threads' throughput its "
            "hand-overs may cost (read [The GIL](gil.md))"
        ),
        default=0.05,
    ),
    Setting(
        "gil_probe_ms",
        "FASTLOOP_GIL_PROBE_MS",
        _number(True, "a number > 0 (milliseconds)", off=True),
        "a number > 0 (milliseconds)",
        effect=(
            "run the GIL contention probe thread with this period (`stats().gil.probe`)"
        ),
        on_change="fastloop.observers.gil:follow_setting",
    ),
    Setting(
        "profile",
        "FASTLOOP_PROFILE",
        _output(keywords=False),
        "a file path fastloop can write",
        effect=(
            "profile the loop threads, write collapsed stacks (speedscope JSON for "
            "`*.speedscope.json`) at exit and on SIGTERM; processes it starts write "
            "`NAME.<pid>.EXT`"
        ),
        activates=True,
        flag=RunFlag(
            "--profile",
            "FILE",
            "sample the loop threads every 10 ms; write collapsed stacks "
            "(speedscope JSON if FILE ends in .speedscope.json) at exit and on "
            "SIGTERM; child processes write FILE.<pid>",
            to_environ=os.path.realpath,  # the command may change directory
        ),
        on_change="fastloop.observers.profiler:follow_setting",
    ),
)

BY_NAME = {row.name: row for row in SETTINGS}

#: The variables whose presence activates fastloop at start-up.  The
#: ``fastloop.pth`` line spells them out itself, because it must import
#: nothing while they are unset; a test keeps it in step with this.
ACTIVATING = ("FASTLOOP", *(row.variable for row in SETTINGS if row.activates))


class Settings:
    """What the ``FASTLOOP_*`` variables and ``fastloop.configure()`` set, by name.

    Patched code reads these at call time, so a change applies at once.
    """

    def __init__(self) -> None:
        for row in SETTINGS:
            setattr(self, row.name, row.default)

    # The rows' names, for the type checker (instances hold them as attributes).
    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"no fastloop setting {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        shown = ", ".join(f"{row.name}={getattr(self, row.name)!r}" for row in SETTINGS)
        return f"Settings({shown})"


settings = Settings()

#: Where each setting's value came from, for those a source set: its
#: variable, ``fastloop.configure()``, or in a dask server the preload's
#: argument or dask's config (``fastloop.dask.settings``).  Doctor and the
#: preload's log line show it.
sources: dict[str, str] = {}


def parse_setting(name: str, value: object) -> object:
    """Validate one setting from code or from the environment (strings)."""
    row = BY_NAME.get(name)
    if row is None:
        raise SettingError(f"one of {', '.join(BY_NAME)}")
    return row.parse(value)


def settings_from_environ(
    environ: Mapping[str, str],
) -> tuple[dict[str, object], list[Problem]]:
    """The settings the environment asks for, and a problem line per bad one."""
    chosen: dict[str, object] = {}
    problems: list[Problem] = []
    for row in SETTINGS:
        if row.variable not in environ:
            continue
        raw = environ[row.variable]
        try:
            chosen[row.name] = row.parse(raw)
        except SettingError as accepted:
            problems.append(
                Problem(row.variable, raw, (raw.strip() or raw,), str(accepted))
            )
    return chosen, problems
