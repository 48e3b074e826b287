"""The FASTLOOP settings the whole-application benchmarks pair, in the order they rotate."""

from __future__ import annotations

from fastloop.patches import RECORDS

#: distributed.admin.event-loop, as dask reads it from the environment
UVLOOP = "DASK_DISTRIBUTED__ADMIN__EVENT_LOOP"
#: The loop bench/http_app.py's server runs (``uvloop`` or asyncio's)
SERVER_LOOP = "BENCH_EVENT_LOOP"
#: uvloop, for every whole-application benchmark
ON_UVLOOP = {UVLOOP: "uvloop", SERVER_LOOP: "uvloop"}
#: distributed.client.direct-to-workers: actor calls skip the scheduler's proxy
DIRECT = "DASK_DISTRIBUTED__CLIENT__DIRECT_TO_WORKERS"
DEFAULT_SET = [name for name, _, _, on in RECORDS if on]

#: Arms per scenario, each the environment it adds to the stock one: every
#: patch against stock where nothing contends (no regression), and where a
#: thread computes in Python, the default set (auto switch interval) beside
#: the fixed interval a user could pick instead and the opt-in ``poll``.
ARMS: dict[str, dict[str, dict[str, str]]] = {
    "idle": {
        "stock": {},
        "FASTLOOP=1": {"FASTLOOP": "1"},
        "FASTLOOP=all,poll": {"FASTLOOP": "all,poll"},
    },
    "busy": {
        "stock": {},
        "FASTLOOP=1": {"FASTLOOP": "1"},
        "FASTLOOP=1, fixed 200 us": {
            "FASTLOOP": "1",
            "FASTLOOP_SWITCH_INTERVAL_US": "200",
        },
        "FASTLOOP=all,poll": {"FASTLOOP": "all,poll"},
    },
}

#: Arms any scenario may ask for by name (``bench/dask_app.py --arms``): stock
#: a second time, which shows the noise of the harness itself (an A/A pair);
#: the default set without each of its patches; the settings a user could
#: pick instead of (or beside) fastloop: uvloop as distributed's event loop,
#: and clients that call actors' workers directly.
EXTRA: dict[str, dict[str, str]] = {
    "stock again": {},
    **{
        f"no {left_out}": {
            "FASTLOOP": ",".join(name for name in DEFAULT_SET if name != left_out)
        }
        for left_out in DEFAULT_SET
    },
    "uvloop": ON_UVLOOP,
    "uvloop+FASTLOOP=1": {**ON_UVLOOP, "FASTLOOP": "1"},
    "direct_to_workers": {DIRECT: "True"},
    "direct_to_workers+FASTLOOP=1": {DIRECT: "True", "FASTLOOP": "1"},
    "direct_to_workers+uvloop+FASTLOOP=1": {
        DIRECT: "True",
        **ON_UVLOOP,
        "FASTLOOP": "1",
    },
}
