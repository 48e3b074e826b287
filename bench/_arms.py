"""The FASTLOOP settings the whole-application benchmarks pair, in the order they rotate."""

from __future__ import annotations

#: distributed.admin.event-loop, as dask reads it from the environment
UVLOOP = "DASK_DISTRIBUTED__ADMIN__EVENT_LOOP"

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
#: a second time, which shows the noise of the harness itself (an A/A pair),
#: and the default set without its switch interval.
EXTRA: dict[str, dict[str, str]] = {
    "stock again": {},
    "no switchinterval": {"FASTLOOP": "add_callback,wakeup,write_to_fd"},
    "no read_interest": {"FASTLOOP": "add_callback,wakeup,write_to_fd,switchinterval"},
    # distributed's own setting picks its event loop: uvloop, stock and patched
    "uvloop": {UVLOOP: "uvloop"},
    "uvloop+FASTLOOP=1": {UVLOOP: "uvloop", "FASTLOOP": "1"},
}
