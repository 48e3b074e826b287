"""``fastloop.report()``: a readable table of ``stats()``."""

from __future__ import annotations

from fastloop._snapshot import Snapshot
from fastloop._stats import stats
from fastloop.observers._gil_stats import advice


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f} ms" if ns >= 1_000_000 else f"{ns / 1e3:.1f} us"


def report(snapshot: Snapshot | None = None) -> str:
    """A readable table of ``stats()``."""
    s = snapshot or stats()
    w, a, k = s.write_to_fd, s.add_callback, s.wakeup
    lines = ["fastloop report", ""]
    if s.installed:
        lines.append(f"patches active     {', '.join(s.installed)}")
    else:
        lines.append(
            "patches active     none: no patch is installed in this process "
            "(set FASTLOOP=1 or call fastloop.install()), so no patch counter "
            "can move"
        )
    lines.append("")
    mark = len(lines)
    lines.append("write_to_fd (every tornado.iostream stream)")
    lines.append(f"  calls            {w.calls:>14,}")
    lines.append(f"  bytes offered    {w.bytes_offered:>14,}")
    lines.append(f"  bytes written    {w.bytes_written:>14,}")
    lines.append(f"  would block      {w.would_block:>14,}")
    lines.append(f"  errors           {w.errors:>14,}")
    if w.calls:
        lines.append(
            f"  time per call    p50 <= {_ms(w.p50_ns)}, p90 <= {_ms(w.p90_ns)}, "
            f"p99 <= {_ms(w.p99_ns)}, max {_ms(w.max_ns)}"
        )
        lines.append(f"  total time       {_ms(w.total_ns)}")
    lines.append(f"  slow calls       {w.slow:>14,}")
    if w.cpu_calls:
        share = w.stalled_ns / max(w.stalled_ns + w.cpu_ns, 1)
        lines.append(
            f"  stalled          {_ms(w.stalled_ns)} of wall time ({share:.0%}), "
            f"CPU {_ms(w.cpu_ns)}"
        )
    _unless_installed(lines, mark, "write_to_fd", s, w.calls)
    lines.append("")
    mark = len(lines)
    lines.append("add_callback on the loop thread")
    lines.append(f"  callbacks run    {a.onloop_callbacks:>14,}")
    lines.append(f"  batches run      {a.onloop_batches:>14,}")
    if a.onloop_batches:
        per_batch = a.onloop_callbacks / a.onloop_batches
        lines.append(f"  per batch        {per_batch:>14.1f}")
    _unless_installed(lines, mark, "add_callback", s, a.onloop_batches)
    lines.append("")
    mark = len(lines)
    lines.append("add_callback from other threads")
    lines.append(f"  callbacks queued {a.remote_callbacks:>14,}")
    lines.append(f"  batches run      {a.batches:>14,}")
    if a.batches:
        lines.append(f"  per batch        {a.batched / a.batches:>14.1f}")
    _unless_installed(lines, mark, "add_callback", s, a.remote_callbacks)
    lines.append("")
    mark = len(lines)
    lines.append("self-pipe wake-ups")
    lines.append(f"  requested        {k.requested:>14,}")
    lines.append(f"  written          {k.written:>14,}")
    _unless_installed(lines, mark, "wakeup", s, k.requested)
    lines.extend(_gil_report(s))
    d = s.watchdog
    if d.watching or d.beats:
        lines.append("")
        lines.append(f"blocked-loop watchdog ({'on' if d.watching else 'off'})")
        lines.append(f"  blocked episodes {d.episodes:>14,}")
        if d.episodes:
            lines.append(
                f"  blocked time     {_ms(d.blocked_ns)} in all, "
                f"longest {_ms(d.max_blocked_ns)}"
            )
        if d.beats:
            lines.append(
                f"  loop lag         p50 <= {_ms(d.lag_p50_ns)}, "
                f"p90 <= {_ms(d.lag_p90_ns)}, p99 <= {_ms(d.lag_p99_ns)}, "
                f"max {_ms(d.max_lag_ns)} ({d.beats:,} heartbeats)"
            )
    return "\n".join(lines)


def _gil_report(s: Snapshot) -> list[str]:
    poll, probe = s.gil.poll, s.gil.probe
    if not (s.poll.skipped or poll.samples or probe.samples):
        return []
    lines = ["", "selector polls and the GIL"]
    if s.poll.skipped:
        lines.append(f"  polls skipped    {s.poll.skipped:>14,}")
    if poll.samples:
        lines.append(
            f"  GIL wait at poll p50 <= {_ms(poll.p50_ns)}, p99 <= {_ms(poll.p99_ns)}, "
            f"max {_ms(poll.max_ns)} ({poll.samples:,} sampled polls)"
        )
    if probe.samples:
        lines.append(
            f"  GIL wait (probe) {probe.fraction:>14.1%} of the time, "
            f"p99 <= {_ms(probe.p99_ns)}, max {_ms(probe.max_ns)} "
            f"({probe.samples:,} samples)"
        )
    hint = advice(s.gil, "switchinterval" in s.installed)
    if hint:
        lines.append(f"  advice: {hint}")
    return lines


def _unless_installed(
    lines: list[str], title: int, patch: str, s: Snapshot, counted: int
) -> None:
    """Mark a section whose patch is off: a patch not installed is not an idle zero."""
    if patch in s.installed:
        return
    if counted:
        lines[title] += " (not active now; counted while it was)"
    else:
        del lines[title + 1 :]
        lines.append(f"  {patch} is not active in this process: nothing counted")
