"""The arms of the GIL benchmarks: stock, uvloop, every fixed interval, and auto.

A fixed interval is what a user could write instead of fastloop, one line of
``sys.setswitchinterval(x)``: here ``FASTLOOP=switchinterval`` with
``FASTLOOP_SWITCH_INTERVAL_US=x``, which does exactly that and nothing else.
``auto`` is ``FASTLOOP=1``, the default set, whose switch interval is auto.
"""

from __future__ import annotations

#: The fixed intervals every GIL benchmark runs, longest first (us).
FIXED_US = (3000, 2000, 1000, 500, 200, 100, 50)


def arms(uvloop_env: dict[str, str] | None) -> dict[str, dict[str, str]]:
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
