"""Parsing of the ``FASTLOOP*`` environment variables.

A bad value must never stop the host application: parsing returns what it
could understand plus a list of problems, each one line naming the
variable, the bad token and the accepted values.  The caller prints them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

ON = frozenset({"1", "true", "all"})
OFF = frozenset({"0", "false"})


class Problem(NamedTuple):  # not a dataclass: ~0.4 ms less at start-up
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
    value: str | None, known: Sequence[str], variable: str = "FASTLOOP"
) -> tuple[frozenset[str] | None, list[Problem]]:
    """Parse ``FASTLOOP``: the patch names to install, ``None`` for the default set.

    Returns an empty set when nothing is to be installed.  Keywords and
    names are case-insensitive and surrounding blanks are ignored; empty
    items of a comma list (``"add_callback,"``) are harmless and skipped.
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
            chosen.update(known)
        elif token in known:
            chosen.add(token)
        else:
            bad.append(raw.strip() or raw)
    problems = [Problem(variable, value or "", tuple(bad), accepted)] if bad else []
    return frozenset(chosen), problems


def patches_from_environ(
    environ: Mapping[str, str], known: Sequence[str]
) -> tuple[frozenset[str] | None, list[Problem]]:
    return parse_patches(environ.get("FASTLOOP"), known)


# --- settings shared with fastloop.configure() --------------------------------


@dataclass
class Settings:
    """What the ``FASTLOOP_*`` variables and ``fastloop.configure()`` set.

    Patched code reads these at call time, so a change applies at once.
    """

    slow_write_ms: float = 0.0  # 0: no slow-write log (the default)
    write_cpu: bool = False
    report: str | None = None  # None: no exit report; "stderr"; or a JSON path
    block_ms: float | None = None  # the process-wide watchdog's threshold; None: off
    #: slow_write_ms in ns, kept in step by __setattr__: read after long writes.
    slow_write_ns: int = field(default=0, init=False, repr=False)

    def __setattr__(self, name: str, value: object) -> None:
        super().__setattr__(name, value)
        if name == "slow_write_ms":
            super().__setattr__("slow_write_ns", int(float(value) * 1_000_000))  # type: ignore[arg-type]


settings = Settings()

SETTING_VARIABLES = {
    "slow_write_ms": "FASTLOOP_SLOW_WRITE_MS",
    "write_cpu": "FASTLOOP_WRITE_CPU",
    "report": "FASTLOOP_REPORT",
    "block_ms": "FASTLOOP_BLOCK_MS",
}


class SettingError(ValueError):
    """A setting value that cannot be used; ``str()`` is the accepted form."""


def parse_setting(name: str, value: object) -> object:
    """Validate one setting from code or from the environment (strings)."""
    if name == "slow_write_ms":
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise SettingError("a number >= 0 (milliseconds; 0 turns it off)") from None
        if not number >= 0 or number == float("inf"):
            raise SettingError("a number >= 0 (milliseconds; 0 turns it off)")
        return number
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
        return text
    if name == "block_ms":
        if value is None:
            return None
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise SettingError("a number > 0 (milliseconds)") from None
        if not 0 < number < float("inf"):
            raise SettingError("a number > 0 (milliseconds)")
        return number
    raise SettingError(f"one of {', '.join(SETTING_VARIABLES)}")


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


def configure(**changes: object) -> None:
    """Change settings at run time; same names and values as the variables.

    Raises ``ValueError`` naming the setting and what it accepts; nothing is
    changed unless every value is valid.
    """
    parsed: dict[str, object] = {}
    for name, value in changes.items():
        if name not in SETTING_VARIABLES:
            valid = ", ".join(SETTING_VARIABLES)
            raise ValueError(f"unknown fastloop setting {name!r}; valid: {valid}")
        try:
            parsed[name] = parse_setting(name, value)
        except SettingError as accepted:
            raise ValueError(
                f"fastloop setting {name}={value!r}: expected {accepted}"
            ) from None
    for name, value in parsed.items():
        setattr(settings, name, value)
    apply_side_effects("block_ms" in parsed)


def apply_side_effects(block_ms_changed: bool = True) -> None:
    """Arm the exit report, and start or stop the process-wide watchdog."""
    if settings.report is not None:
        from fastloop import _stats

        _stats.arm_exit_report()
    if block_ms_changed:
        from fastloop import watchdog

        watchdog.follow_setting(settings.block_ms)
