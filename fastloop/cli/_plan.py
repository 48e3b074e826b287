"""What a ``fastloop bench`` run will do, how long that takes, and its progress.

The duration is the plan's: every workload's arms run ``warmup + rounds``
rounds, each a time slice plus its set-up, so the run's length follows from
what it was asked to do, not from how fast an arm happens to be today.
Progress goes to a terminal as one line rewritten in place, and to anything
else (a log file, a pipe) as one finished line per workload.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TextIO


@dataclass(frozen=True)
class Plan:
    """Workloads with how many arms each, rounds per arm, and one round's cost."""

    arms: tuple[tuple[str, int], ...]  # (workload, its arms), in run order
    rounds: int
    warmup: int
    slice_s: float
    setup_s: float  # what a round costs beside its slice (see bench.SETUP_S)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.arms]

    def arm_rounds(self, names: Iterable[str] | None = None) -> int:
        """Rounds of single arms (warm-up included) of ``names``, or of all."""
        chosen = None if names is None else set(names)
        return sum(
            count * (self.rounds + self.warmup)
            for name, count in self.arms
            if chosen is None or name in chosen
        )

    def seconds(self, names: Iterable[str] | None = None) -> float:
        """How long the rounds of ``names`` (or the whole run) take, planned."""
        return self.arm_rounds(names) * (self.slice_s + self.setup_s)

    def describe(self) -> str:
        low = min(count for _, count in self.arms)
        high = max(count for _, count in self.arms)
        arms = str(low) if low == high else f"{low}-{high}"
        total = self.seconds()
        minutes = f" ({total / 60:.1f} min)" if total >= 90 else ""
        return (
            f"fastloop bench: {_plural(len(self.arms), 'workload')} x {arms} arms x "
            f"({self.rounds} rounds + {self.warmup} warm-up) = "
            f"{self.arm_rounds():,} rounds of {self.slice_s:.2f} s "
            f"(+ ~{self.setup_s * 1000:.0f} ms set-up each): "
            f"about {total:.0f} s{minutes} planned"
        )


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


class Progress:
    """Reports a run against its plan: a rewritten line on a TTY, lines elsewhere."""

    def __init__(
        self,
        plan: Plan,
        stream: TextIO,
        *,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.plan = plan
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.clock = clock
        self.started = clock()
        self.done: list[str] = []

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def begin(self) -> None:
        """Say what the run will do and how long it will take, before it starts."""
        self.started = self.clock()
        self._write(self.plan.describe() + "\n")

    def _label(self, name: str) -> str:
        position = self.plan.names.index(name) + 1
        return f"[{position}/{len(self.plan.arms)}] {name}"

    def round(self, name: str, done: int, total: int) -> None:
        """A round of ``name`` is over: only a terminal hears of it."""
        if self.tty:
            self._write(f"\r{self._label(name)}: round {done}/{total}\x1b[K")

    def finished(self, name: str, summary: str) -> None:
        """A workload is over: one line, newline-terminated, wherever it goes."""
        self.done.append(name)
        elapsed = self.clock() - self.started
        planned = self.plan.seconds(self.done)
        rest = [n for n in self.plan.names if n not in self.done]
        # The plan for what is left, scaled by how the plan has held so far.
        left = self.plan.seconds(rest) * (elapsed / planned if planned else 1.0)
        line = (
            f"{self._label(name)}: {summary}; {elapsed:.0f} s elapsed "
            f"({planned:.0f} s planned), about {left:.0f} s left"
        )
        self._write(f"\r{line}\x1b[K\n" if self.tty else line + "\n")
