"""Sampling profiler of the event-loop threads: where does the loop spend its time?

A daemon thread reads ``sys._current_frames()`` every ``interval_ms`` and
keeps, for each thread that runs an IOLoop (or the one loop it was given),
a count per distinct stack.  Counts, not samples: memory is bounded by the
number of distinct stacks (capped) however long it runs.  A thread waiting
in its selector is counted as ``(idle)``, apart from work.  Frames are
labelled ``function (file:first line)`` so that samples at different lines
of one function merge, as in flamegraph.pl's output.

Output: collapsed stacks (``thread:NAME;frame;frame COUNT`` per line, the
format of flamegraph.pl and speedscope's importer) or speedscope JSON, one
sampled profile per thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from collections import Counter
from pathlib import Path
from types import CodeType, FrameType, TracebackType
from typing import Any

from fastloop import config
from fastloop.config import positive_ms
from fastloop.observers import ioloops
from fastloop.observers._ticker import Ticker
from fastloop.runtime import exit_outputs, fork, waits

IDLE = "(idle)"
#: Samples of stacks first seen once this many are known go to one bucket.
MAX_STACKS = 20_000
OTHER = "(other stacks)"
MAX_DEPTH = 256

# When is a loop thread idle?  asyncio's loop waits in selectors.py, called
# by its own _run_once (a callback in subprocess.run waits in selectors.py
# too, and that is work).  A loop written in C (uvloop) waits with no frame
# of its own: the innermost frame is then the Python frame that entered the
# loop, which the probe callback learns (a callback's caller frame is that
# one, C frames being invisible).  Under uvloop a callback that is itself a
# C function (loop.call_soon(time.sleep, 1)) has no frame either, and counts
# as idle.  A patch that stands in for the selector's ``select`` (``poll``'s
# gate, which waits in C) marks its function (``fastloop.runtime.waits``):
# the same wait.


def _in_selector(code: CodeType) -> bool:
    return code.co_filename.replace("\\", "/").endswith("/selectors.py")


def _is_idle(frame: FrameType, in_selector: bool, entry: CodeType | None) -> bool:
    if frame.f_code is entry:
        return True
    caller = frame.f_back
    in_gate = waits.waits(frame.f_code)
    return (
        (in_selector or in_gate)
        and caller is not None
        and caller.f_code.co_name == "_run_once"
    )


def _short_path(filename: str) -> str:
    """Path relative to the longest sys.path entry holding it: 'asyncio/events.py'."""
    best = ""
    for entry in sys.path:
        if entry and filename.startswith(entry) and len(entry) > len(best):
            best = entry
    return filename[len(best) :].lstrip("/\\") if best else filename


class Profile:
    """Samples loop threads until stopped: a context manager, or start()/stop()."""

    def __init__(self, interval_ms: float = 10.0, loop: Any = None) -> None:
        self.interval_ms = positive_ms("profile interval_ms", interval_ms)
        self._only = None if loop is None else ioloops.asyncio_loop_of(loop)
        self._counts: Counter[tuple[str, ...]] = Counter()
        self._labels: dict[CodeType, tuple[str, bool]] = {}
        #: id(loop) -> (loop, thread ident, the frame code that entered the
        #: loop), learnt from a callback: loops written in C (uvloop)
        self._threads: dict[int, tuple[Any, int, CodeType | None]] = {}
        self._lock = threading.Lock()
        self._ticker: Ticker | None = None
        self.samples = 0
        fork.in_child(self.reset_after_fork)

    def reset_after_fork(self) -> None:
        # The sampling thread did not survive the fork, and may have held the lock.
        self._lock = threading.Lock()

    # --- control ----------------------------------------------------------

    def start(self) -> Profile:
        if self._ticker is not None:
            raise RuntimeError("this profile was already started")
        period_s = self.interval_ms / 1000
        self._ticker = Ticker("fastloop-profiler", period_s, self._sample)
        self._ticker.start()
        return self

    def stop(self) -> Profile:
        """Stop sampling; returns once the thread has ended (idempotent)."""
        if self._ticker is not None:
            self._ticker.stop()
        return self

    @property
    def running(self) -> bool:
        return self._ticker is not None and self._ticker.running

    def __enter__(self) -> Profile:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- sampling ---------------------------------------------------------

    def _loop_threads(self) -> dict[int, tuple[str, CodeType | None]]:
        """Thread ident -> (name, entry frame code if the loop is written in C)."""
        loops = [self._only] if self._only is not None else ioloops.tornado_loops()
        found: dict[int, CodeType | None] = {}
        for loop in loops:
            if not ioloops.is_running(loop):
                continue
            ident = ioloops.running_thread(loop)
            if ident is not None:
                found[ident] = None
                continue
            learnt = self._threads.get(id(loop))
            if learnt is not None and learnt[0] is loop:
                found[learnt[1]] = learnt[2]
            else:
                self._ask_thread(loop)
        present = {id(loop) for loop in loops}
        for key in [key for key in self._threads if key not in present]:
            del self._threads[key]  # closed loops: forget them
        names = ioloops.thread_names()
        return {
            ident: (ioloops.thread_name(ident, names), entry)
            for ident, entry in found.items()
        }

    def _ask_thread(self, loop: Any) -> None:
        def tell() -> None:
            try:
                entry: CodeType | None = sys._getframe(1).f_code
            except ValueError:  # the loop was entered from C alone
                entry = None
            self._threads[id(loop)] = (loop, threading.get_ident(), entry)

        with contextlib.suppress(RuntimeError):  # closed since we looked
            loop.call_soon_threadsafe(tell)

    def _sample(self) -> bool:
        threads = self._loop_threads()
        if not threads:
            return True
        frames = sys._current_frames()
        stacks = []
        for ident, (name, entry) in threads.items():
            frame = frames.get(ident)
            if frame is not None:
                stacks.append(self._stack(name, frame, entry))
        del frames
        self._record(stacks)
        return True

    def _record(self, stacks: list[tuple[str, ...]]) -> None:
        with self._lock:
            for stack in stacks:
                if stack not in self._counts and len(self._counts) >= MAX_STACKS:
                    stack = (stack[0], OTHER)
                self._counts[stack] += 1
                self.samples += 1

    def _stack(
        self, thread_name: str, frame: FrameType | None, entry: CodeType | None = None
    ) -> tuple[str, ...]:
        root = f"thread:{thread_name}".replace(";", ",")
        labels: list[str] = []
        innermost = True
        while frame is not None and len(labels) < MAX_DEPTH:
            label, in_selector = self._label(frame.f_code)
            if innermost and _is_idle(frame, in_selector, entry):
                return (root, IDLE)
            innermost = False
            labels.append(label)
            frame = frame.f_back
        labels.append(root)
        labels.reverse()
        return tuple(labels)

    def _label(self, code: CodeType) -> tuple[str, bool]:
        """``function (file:first line)``, and whether it is selectors.py's."""
        known = self._labels.get(code)
        if known is None:
            path = _short_path(code.co_filename).replace("\\", "/")
            name = getattr(code, "co_qualname", code.co_name)
            label = f"{name} ({path}:{code.co_firstlineno})".replace(";", ",")
            known = (label, _in_selector(code))
            if len(self._labels) < MAX_STACKS:
                self._labels[code] = known
        return known

    # --- results ----------------------------------------------------------

    def stacks(self) -> dict[tuple[str, ...], int]:
        """Sample count per distinct stack, outermost frame (the thread) first."""
        with self._lock:
            return dict(self._counts)

    def collapsed(self) -> str:
        """flamegraph.pl's input: one ``frame;frame;frame count`` line per stack."""
        lines = [f"{';'.join(stack)} {count}" for stack, count in self.stacks().items()]
        return "\n".join(sorted(lines)) + ("\n" if lines else "")

    def speedscope(self, name: str = "fastloop profile") -> dict[str, Any]:
        """speedscope's file format: one sampled profile per loop thread."""
        frames: list[dict[str, Any]] = []
        index: dict[str, int] = {}
        by_thread: dict[str, list[tuple[list[int], int]]] = {}
        for stack, count in sorted(self.stacks().items()):
            indices = []
            for label in stack[1:]:
                if label not in index:
                    index[label] = len(frames)
                    frames.append(_speedscope_frame(label))
                indices.append(index[label])
            by_thread.setdefault(stack[0], []).append((indices, count))
        profiles = []
        for thread, samples in by_thread.items():
            weights = [count * self.interval_ms for _, count in samples]
            profiles.append(
                {
                    "type": "sampled",
                    "name": thread,
                    "unit": "milliseconds",
                    "startValue": 0,
                    "endValue": sum(weights),
                    "samples": [indices for indices, _ in samples],
                    "weights": weights,
                }
            )
        from fastloop import __version__

        return {
            "$schema": "https://www.speedscope.app/file-format-schema.json",
            "shared": {"frames": frames},
            "profiles": profiles,
            "name": name,
            "activeProfileIndex": 0,
            "exporter": f"fastloop {__version__}",
        }

    def write(self, path: str | Path) -> Path:
        """speedscope JSON if the name ends in ``.speedscope.json``, else collapsed."""
        path = Path(path)
        if path.name.endswith(".speedscope.json"):
            path.write_text(
                json.dumps(self.speedscope(path.name)) + "\n", encoding="utf-8"
            )
        else:
            path.write_text(self.collapsed(), encoding="utf-8")
        return path

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return (
            f"<fastloop.Profile interval_ms={self.interval_ms:g} {state}, "
            f"{self.samples} samples, {len(self._counts)} stacks>"
        )


def _speedscope_frame(label: str) -> dict[str, Any]:
    frame: dict[str, Any] = {"name": label}
    where = label.rpartition(" (")[2].rstrip(")")
    file, _, line = where.rpartition(":")
    if file and line.isdigit():
        frame["file"], frame["line"] = file, int(line)
    return frame


def profile(interval_ms: float = 10.0, loop: Any = None) -> Profile:
    """A profiler of the loop threads (every IOLoop's, or ``loop``'s).

    Use as ``with fastloop.profile() as p: ...`` then ``p.write(path)``, or
    ``p = fastloop.profile().start()`` ... ``p.stop()``.
    """
    return Profile(interval_ms, loop)


# --- FASTLOOP_PROFILE / configure(profile=) (fastloop run --profile FILE) ----

_process_profile: Profile | None = None
_armed = False


def follow_setting(target: str | None) -> None:
    """Profile this process from now on, written at exit to the ``profile`` setting.

    The setting's path is read at exit (None then: nothing is written), and
    None stops the profile.  Processes this one starts inherit
    ``FASTLOOP_PROFILE``: while it names this same file it is rewritten, so
    that they write ``NAME.<pid>.EXT`` beside it instead of overwriting it.
    A child made by ``os.fork`` starts a profile of its own the same way
    (the parent's samples stay the parent's).  Written at interpreter exit,
    and on SIGTERM when the application has no handler of its own.
    """
    global _process_profile, _armed
    if target is None:
        if _process_profile is not None:
            _process_profile.stop()
        _process_profile = None
        return
    if os.environ.get("FASTLOOP_PROFILE") == target:
        os.environ["FASTLOOP_PROFILE"] = str(_per_process(Path(target)))
    if _process_profile is None:
        _process_profile = Profile().start()
    if not _armed:
        _armed = True
        exit_outputs.register(_write_process_profile)
        fork.in_child(_restart_in_child)


def _write_process_profile() -> None:
    running, target = _process_profile, config.settings.profile
    if running is None or target is None:
        return
    running.stop()
    path = Path(target.replace("{pid}", str(os.getpid())))
    try:
        running.write(path)
    except Exception as exc:  # at exit: one line, never a traceback
        print(f"fastloop: could not write {path}: {exc!r}", file=sys.stderr)


def _restart_in_child() -> None:
    global _process_profile
    target = config.settings.profile
    if _process_profile is None or target is None:
        return
    config.settings.profile = str(_per_process(Path(target)))
    _process_profile = Profile().start()


def _per_process(path: Path) -> Path:
    if "{pid}" in path.name:
        return path
    name = path.name
    for suffix in (".speedscope.json", ".collapsed", ".txt"):
        if name.endswith(suffix):
            return path.with_name(f"{name[: -len(suffix)]}.{{pid}}{suffix}")
    return path.with_name(f"{name}.{{pid}}")
