"""The arms the benchmarks pair, each what a user could pick, in the order they rotate.

Three families: the whole-application benchmarks' ``FASTLOOP`` settings
(``ARMS``, ``EXTRA``); the GIL benchmarks' stock, uvloop, every fixed
interval and auto (``gil_arms``); and the ``write_to_fd`` patch alone as an
in-process arm for the echo probes (``write_to_fd_arm``).
"""

from __future__ import annotations

from collections.abc import Callable

import fastloop
from fastloop.patches import RECORDS, write_to_fd
from fastloop.patches.write_to_fd import SAMPLE_EVERY

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


# The GIL benchmarks.  A fixed interval is what a user could write instead
# of fastloop, one line of ``sys.setswitchinterval(x)``: here
# ``FASTLOOP=switchinterval`` with ``FASTLOOP_SWITCH_INTERVAL_US=x``, which
# does exactly that and nothing else.  ``auto`` is ``FASTLOOP=1``, the
# default set, whose switch interval is auto.

#: The fixed intervals every GIL benchmark runs, longest first (us).
FIXED_US = (3000, 2000, 1000, 500, 200, 100, 50)


def gil_arms(uvloop_env: dict[str, str] | None) -> dict[str, dict[str, str]]:
    """Arm name -> the environment it adds (``uvloop_env``: how to ask for uvloop)."""
    chosen: dict[str, dict[str, str]] = {"stock": {}}
    if uvloop_env is not None:
        chosen["uvloop"] = dict(uvloop_env)
    for interval in FIXED_US:
        chosen[f"{interval} us"] = {
            "FASTLOOP": "switchinterval",
            "FASTLOOP_SWITCH_INTERVAL_US": str(interval),
        }
    chosen["auto"] = {"FASTLOOP": "1"}
    return chosen


def without_fastloop(environ: dict[str, str]) -> dict[str, str]:
    """The environment with every ``FASTLOOP*`` variable taken out."""
    return {k: v for k, v in environ.items() if not k.startswith("FASTLOOP")}


# The echo probes.


def write_to_fd_arm(
    workload: Callable[[], float], timing: str, every: int = SAMPLE_EVERY
) -> Callable[[], float]:
    """``workload`` under the patch in ``timing`` mode; an ``every`` other
    than the default tries another sampling gap (10**12: no call timed after
    a stream's first).  The patch reads the gap when it installs."""

    def arm() -> float:
        fastloop.configure(write_timing=timing)
        write_to_fd.SAMPLE_EVERY = every
        try:
            with fastloop.patched(["write_to_fd"]):
                return workload()
        finally:
            fastloop.configure(write_timing="sampled")
            write_to_fd.SAMPLE_EVERY = SAMPLE_EVERY

    return arm
