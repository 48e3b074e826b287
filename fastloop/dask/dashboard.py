"""A fastloop page on the dask dashboard: every process's event loop, over time.

The preload adds two routes to the scheduler's HTTP server, the Tornado
application that serves dask's own pages and ``/metrics``:

* ``/fastloop``: a page that redraws every second, one panel per process
  (the scheduler and each worker): loop lag, the GIL wait of a waking
  thread (auto mode's ticks) and at the loop's polls, blocked episodes and
  where the latest one was stuck, ``write_to_fd`` p99, the switch interval
  auto mode holds and why, and the share of wake-ups coalesced (counts per
  interval, percentiles and shares over the last ``WINDOW_S``);
* ``/fastloop.json``: the same figures, for a script.

It costs a worker nothing it does not already count: each worker adds its
cumulative figures (``figures()``, ~0.2 ms) to the heartbeat it sends
anyway (``Worker.metrics``), and the scheduler turns consecutive
heartbeats into per-interval figures, sampling at its system monitor's
interval and keeping ``HISTORY`` samples a process.  No JavaScript
library: the page is one HTML file with inline SVG.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from tornado import web

import fastloop
from fastloop.telemetry.histogram import Buckets
from fastloop.telemetry.schema_gil import SwitchIntervalStats

#: Samples kept per process: 2 minutes at dask's 500 ms monitor interval.
HISTORY = 240
#: The percentiles cover this much time up to each sample (a single interval
#: of an idle worker holds too few timed calls for a p99).
WINDOW_S = 60.0
#: The key of the worker's figures in its heartbeat metrics.
METRIC = "fastloop"


def figures(server: object = None) -> dict[str, Any]:
    """This process's cumulative figures, as a heartbeat carries them
    (``Worker.metrics`` calls each metric with the worker: ``server``)."""
    from fastloop.observers import watchdog

    stats = fastloop.stats()
    shown = stats.to_dict()
    return {
        "time": time.time(),
        "installed": sorted(stats.installed),
        "watching": stats.watchdog.watching,
        "lag": shown["watchdog"]["lag_histogram"],
        "episodes": stats.watchdog.episodes,
        "blocked_ns": stats.watchdog.blocked_ns,
        "stuck": watchdog.last_stuck(),
        "gil_ticks": shown["switchinterval"]["waits"],
        "gil_polls": shown["gil"]["poll"]["histogram"],
        "writes": shown["write_to_fd"]["histogram"],
        "switch_active": "switchinterval" in stats.installed,
        "interval_us": stats.switchinterval.interval_us,
        "engaged": stats.switchinterval.engaged,
        "reason": str(SwitchIntervalStats.interval.show(stats.switchinterval)),
        "wakeups_requested": stats.wakeup.requested,
        "wakeups_written": stats.wakeup.written,
    }


def _p99_ms(before: list[list[int]], now: list[list[int]]) -> float | None:
    """The p99 of the samples between two cumulative histograms, in ms."""
    between = Buckets.from_pairs(now) - Buckets.from_pairs(before)
    if any(count < 0 for count in between.counts):  # reset_stats() between
        between = Buckets.from_pairs(now)
    if not between.total:
        return None
    return between.percentile(0.99, 2**62) / 1e6


def interval(
    before: dict[str, Any], now: dict[str, Any], window: dict[str, Any]
) -> dict[str, Any]:
    """What happened between two heartbeats' figures of one process: counts
    since ``before``; percentiles and shares since ``window`` (``WINDOW_S``
    earlier)."""
    requested = now["wakeups_requested"] - window["wakeups_requested"]
    written = now["wakeups_written"] - window["wakeups_written"]
    return {
        "time": now["time"],
        "lag_p99_ms": _p99_ms(window["lag"], now["lag"]) if now["watching"] else None,
        "episodes": max(now["episodes"] - before["episodes"], 0),
        "blocked_ms": max(now["blocked_ns"] - before["blocked_ns"], 0) / 1e6,
        "gil_wait_p99_ms": _p99_ms(window["gil_ticks"], now["gil_ticks"]),
        "gil_poll_p99_ms": _p99_ms(window["gil_polls"], now["gil_polls"]),
        "write_p99_ms": _p99_ms(window["writes"], now["writes"]),
        "interval_us": now["interval_us"] if now["switch_active"] else None,
        "engaged": now["engaged"],
        "coalesced": 1 - written / requested if requested > 0 else None,
    }


class Processes:
    """The scheduler's history of every process's figures (``HISTORY`` each)."""

    def __init__(self) -> None:
        self.kinds: dict[str, str] = {}
        self.samples: dict[str, deque[dict[str, Any]]] = {}
        #: Each process's figures of the last ``WINDOW_S``, oldest first: the
        #: last is the latest heartbeat's.
        self.recent: dict[str, deque[dict[str, Any]]] = {}

    def add(self, name: str, kind: str, now: dict[str, Any] | None) -> None:
        """One process's figures; a heartbeat seen before adds nothing."""
        recent = self.recent.setdefault(name, deque())
        if now is None or (recent and recent[-1]["time"] == now["time"]):
            return
        self.kinds[name] = kind
        if recent:
            while len(recent) > 1 and recent[1]["time"] <= now["time"] - WINDOW_S:
                recent.popleft()
            history = self.samples.setdefault(name, deque(maxlen=HISTORY))
            history.append(interval(recent[-1], now, recent[0]))
        recent.append(now)

    def forget_all_but(self, names: set[str]) -> None:
        for gone in set(self.recent) - names:
            for table in (self.kinds, self.samples, self.recent):
                table.pop(gone, None)

    def to_dict(self) -> dict[str, Any]:
        latest = {name: recent[-1] for name, recent in self.recent.items() if recent}
        return {
            name: {
                "kind": self.kinds[name],
                "installed": last["installed"],
                "stuck": last["stuck"],
                "reason": last["reason"],
                "samples": list(self.samples.get(name, ())),
            }
            for name, last in sorted(
                latest.items(), key=lambda item: (item[0] != "scheduler", item[0])
            )
        }


def sample(scheduler: Any, processes: Processes) -> None:
    """The scheduler's own figures, and each worker's from its last heartbeat."""
    processes.add("scheduler", "Scheduler", figures())
    workers = dict(scheduler.workers)
    for address, state in workers.items():
        processes.add(address, "Worker", (state.metrics or {}).get(METRIC))
    processes.forget_all_but({"scheduler", *workers})


def add_to_worker(worker: Any) -> None:
    """Send this worker's figures with each heartbeat."""
    worker.metrics[METRIC] = figures


def add_to_scheduler(scheduler: Any) -> str | None:
    """Serve the page on the scheduler's HTTP server; returns its path, or
    None for a scheduler without the HTTP application fastloop knows."""
    import dask.config
    import dask.utils
    from tornado.ioloop import PeriodicCallback

    application = getattr(scheduler, "http_application", None)
    if application is None:
        return None
    prefix = _prefix(application)
    processes = Processes()
    every = dask.config.get("distributed.admin.system-monitor.interval", "500ms")
    every_ms = dask.utils.parse_timedelta(every, default="ms") * 1e3
    watch = PeriodicCallback(lambda: sample(scheduler, processes), every_ms)
    scheduler.periodic_callbacks["fastloop-dashboard"] = watch

    def data() -> dict[str, Any]:
        return {"interval_s": every_ms / 1e3, "processes": processes.to_dict()}

    application.add_handlers(
        r".*",
        [
            (f"{prefix}fastloop", _Page),
            (f"{prefix}fastloop.json", _Data, {"data": data}),
        ],
    )
    return f"{prefix}fastloop"


def _prefix(application: Any) -> str:
    """The dashboard's URL prefix (``--dashboard-prefix``), read off dask's
    ``health`` route, which every dask HTTP server has."""
    for rule in getattr(getattr(application, "wildcard_router", None), "rules", ()):
        pattern = getattr(getattr(rule, "matcher", None), "regex", None)
        text = getattr(pattern, "pattern", "")
        if text.endswith("health$"):
            return text[: -len("health$")] or "/"
    return "/"


class _Page(web.RequestHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.write(PAGE)


class _Data(web.RequestHandler):
    def initialize(self, data: Callable[[], dict[str, Any]]) -> None:
        self.data = data

    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.write(json.dumps(self.data()))


#: The page: a table of the latest figures and a sparkline of each over the
#: history, per process; it fetches ``fastloop.json`` every second.
PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>fastloop: event loops</title>
<style>
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif;
       margin: 1.2em; color: #222; }
h1 { font-size: 1.3em; margin: 0 0 0.2em 0; }
p.note { color: #666; margin: 0 0 1em 0; font-size: 0.9em; }
section.process { border: 1px solid #ddd; border-radius: 4px; padding: 0.6em 0.9em;
                  margin: 0 0 0.8em 0; }
section.process h2 { font-size: 1em; margin: 0 0 0.4em 0; }
table { border-collapse: collapse; }
td { padding: 0.15em 0.8em 0.15em 0; vertical-align: middle; font-size: 0.9em; }
td.value { font-variant-numeric: tabular-nums; text-align: right; min-width: 6em; }
td.label { color: #555; }
svg.spark { display: block; }
.reason, .stuck { color: #555; font-size: 0.85em; }
</style>
</head>
<body>
<h1>fastloop: the event loops of this cluster</h1>
<p class="note">Per process: counts over the last interval between two of its
heartbeats (worker) or monitor readings (scheduler), percentiles over the
last minute; the line is each figure's history. Loop lag needs the watchdog
(<code>fastloop.block-ms</code>); the GIL wait at polls needs the
<code>poll</code> patch.
<a href="status">Back to the dask dashboard</a></p>
<div id="processes">loading...</div>
<script>
"use strict";
const FIGURES = [
  ["lag_p99_ms", "loop lag p99, last minute", "ms"],
  ["gil_wait_p99_ms", "GIL wait p99 (waking thread), last minute", "ms"],
  ["gil_poll_p99_ms", "GIL wait p99 at polls, last minute", "ms"],
  ["write_p99_ms", "write_to_fd p99, last minute", "ms"],
  ["episodes", "blocked episodes", ""],
  ["blocked_ms", "time blocked", "ms"],
  ["interval_us", "switch interval", "us"],
  ["coalesced", "wake-ups coalesced, last minute", "%"],
];

function shown(value, unit) {
  if (value === null || value === undefined) return "-";
  if (unit === "%") return (100 * value).toFixed(0) + " %";
  if (unit === "") return String(value);
  return (value < 10 ? value.toFixed(2) : value.toFixed(0)) + " " + unit;
}

function spark(values) {
  const width = 160, height = 22;
  const numbers = values.filter(v => v !== null && v !== undefined);
  const top = Math.max(...numbers, 1e-9);
  const step = values.length > 1 ? width / (values.length - 1) : width;
  const points = values.map((v, i) =>
    v === null || v === undefined ? null :
    (i * step).toFixed(1) + "," + (height - 4 - (v / top) * (height - 8)).toFixed(1)
  ).filter(p => p !== null).join(" ");
  return '<svg class="spark" width="' + width + '" height="' + height + '">' +
    '<polyline fill="none" stroke="#2a7ab0" stroke-width="1.3" points="' +
    points + '"/></svg>';
}

function escaped(text) {
  const holder = document.createElement("span");
  holder.textContent = text;
  return holder.innerHTML.replace(/"/g, "&quot;");
}

function draw(data) {
  const panels = [];
  for (const [name, process] of Object.entries(data.processes)) {
    const samples = process.samples;
    const latest = samples.length ? samples[samples.length - 1] : {};
    let rows = "";
    for (const [key, label, unit] of FIGURES) {
      rows += '<tr><td class="label">' + label + '</td><td class="value" ' +
        'data-figure="' + key + '">' + shown(latest[key], unit) + "</td><td>" +
        spark(samples.map(s => s[key])) + "</td></tr>";
    }
    panels.push(
      '<section class="process" data-process="' + escaped(name) + '">' +
      "<h2>" + escaped(process.kind) + " " + escaped(name) + "</h2>" +
      "<table>" + rows + "</table>" +
      '<div class="reason" data-figure="reason">' + escaped(process.reason) + "</div>" +
      '<div class="stuck" data-figure="stuck">' + (process.stuck ?
        "latest blocked episode stuck in " + escaped(process.stuck) : "") + "</div>" +
      '<div class="reason">patches: ' +
      escaped(process.installed.join(", ") || "none") + "</div></section>");
  }
  document.getElementById("processes").innerHTML = panels.join("") || "no process yet";
}

async function refresh() {
  try {
    const response = await fetch("fastloop.json", {cache: "no-store"});
    draw(await response.json());
  } catch (error) {
    document.getElementById("processes").textContent = "no data: " + error;
  }
}
refresh();
setInterval(refresh, 1000);
</script>
</body>
</html>
"""
