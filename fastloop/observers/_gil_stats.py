"""Snapshots of the GIL waits (``stats().gil``), and what to do about them."""

from __future__ import annotations

from dataclasses import dataclass, field

from fastloop._histogram import Percentiles, percentile


@dataclass(frozen=True)
class GilWaits(Percentiles):
    """Waits for the GIL from one source."""

    samples: int
    total_ns: int
    max_ns: int
    elapsed_ns: int
    """Probe only: the time the samples cover (0 for polls)."""
    histogram: tuple[tuple[int, int], ...] = field(default=())
    """(upper bound in ns, samples) per non-empty log2 bucket."""

    def percentile_ns(self, fraction: float) -> int:
        return percentile(self.histogram, self.samples, self.max_ns, fraction)

    @property
    def fraction(self) -> float:
        """Share of the probed time spent waiting (probe only; 0.0 for polls)."""
        return self.total_ns / self.elapsed_ns if self.elapsed_ns else 0.0


@dataclass(frozen=True)
class GilStats:
    """How long threads waited for the GIL (``fastloop.stats().gil``)."""

    probing: bool
    """Whether a contention probe thread runs now."""
    poll: GilWaits
    """Loop threads, measured at real zero-timeout polls (``poll`` patch)."""
    probe: GilWaits
    """Any thread, measured by the probe's oversleep (``gil_probe_ms``)."""


#: A loop that waits this long for the GIL at one in ten sampled polls (or a
#: probe that waits this long at one wake-up in ten) is contended.
CONTENDED_P90_NS = 1_000_000
#: ... or a probe that waits this share of the time.
CONTENDED_FRACTION = 0.05


def advice(stats: GilStats, switchinterval_active: bool) -> str | None:
    """What to do about a contended GIL, if the waits show one."""
    if switchinterval_active:
        return None
    poll, probe = stats.poll, stats.probe
    if poll.samples >= 10 and poll.p90_ns >= CONTENDED_P90_NS:
        seen = f"p90 {poll.p90_ns / 1e6:.1f} ms at sampled polls of the loop"
    elif probe.samples >= 10 and (
        probe.p90_ns >= CONTENDED_P90_NS or probe.fraction >= CONTENDED_FRACTION
    ):
        seen = f"{probe.fraction:.0%} of the time, p90 {probe.p90_ns / 1e6:.1f} ms"
    else:
        return None
    return (
        f"threads wait for the GIL ({seen}): FASTLOOP=all,switchinterval "
        "bounds each wait by a shorter switch interval (README, 'The GIL')"
    )
