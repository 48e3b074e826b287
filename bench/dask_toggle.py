"""Idle dask, finer: one cluster, the patches toggled in every process, paired blocks.

    python bench/dask_toggle.py [--seconds S] [--block N] [--patches NAMES] [--json PATH]

``bench/dask_app.py --scenario idle`` starts a fresh cluster per arm and
round, so its rounds differ by more than a patch costs: which worker hosts
the actor, ports, memory layout (an A/A pair there reads 1.000
[0.956, 1.020] at 19 rounds, ``dask_idle_aa.json``).  Here one cluster,
started under ``FASTLOOP=1``, runs blocks of ``--block`` actor round trips
with the patches installed, then with them uninstalled in the client's
process (which holds the scheduler) and in each worker, in an order that
alternates pair by pair; the wall time and the CPU seconds of all those
processes are paired block by block, for ``--seconds``.  Uninstalled is
stock for every object (issue 19's exact restore), so the pair differs only
in the patches' code.  What a fresh process pays once (start-up, the
import hook) is not measured here: ``dask_app.py`` covers it.

Needs distributed.  The client's process is pinned to CPU 1 and the workers
to CPU 0 once the cluster is up (``_pinning``), as in ``dask_app.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import _results
from dask_app import COMMON, one_run
from fastloop import ab

SCRIPT = (
    COMMON  # the Counter actor, cpu() and pin_threads() of dask_app.py
    + r"""
def toggle(on, patches):
    import fastloop
    (fastloop.install if on else fastloop.uninstall)(patches)
    return sorted(fastloop.installed())

def block(client, actor, calls):
    for _ in range(20):  # the first calls after a toggle make the new state
        actor.incr().result()
    cpu_before = time.process_time() + sum(client.run(cpu).values())
    start = time.perf_counter()
    for _ in range(calls):
        actor.incr().result()
    wall = time.perf_counter() - start
    return wall, time.process_time() + sum(client.run(cpu).values()) - cpu_before

if __name__ == "__main__":
    seconds, calls, patches = float(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        actor = client.submit(Counter, actor=True).result()
        pin_threads({1})  # the load generator
        client.run(pin_threads, {0})  # idle servers take the other core
        for _ in range(200):
            actor.incr().result()
        pairs = {"on": [], "off": []}
        installed = {}
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            order = ("on", "off") if len(pairs["on"]) % 2 == 0 else ("off", "on")
            for arm in order:
                on = arm == "on"
                installed[arm] = [toggle(on, patches), *client.run(toggle, on, patches).values()]
                pairs[arm].append(block(client, actor, calls))
        print(json.dumps({"pairs": pairs, "installed": installed}))
"""
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=float, default=120.0, help="blocks for this long"
    )
    parser.add_argument("--block", type=int, default=200, help="actor calls a block")
    parser.add_argument(
        "--patches",
        help="comma list of the patches to toggle (default: the default set)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    try:
        import distributed
    except ImportError:
        print(
            "bench/dask_toggle.py needs distributed: pip install distributed",
            file=sys.stderr,
        )
        return 2
    patches = args.patches.split(",") if args.patches else None
    print(
        f"about {args.seconds + 10:.0f} s: one cluster, blocks of {args.block} calls",
        file=sys.stderr,
    )
    run = one_run(
        SCRIPT,
        {"FASTLOOP": "1"},
        str(args.seconds),
        str(args.block),
        json.dumps(patches),
        timeout=args.seconds + 600,
    )
    on, off = run["pairs"]["on"], run["pairs"]["off"]
    label = ",".join(patches) if patches else "FASTLOOP=1"
    results = [
        ab.paired(
            [block[i] for block in off],
            [block[i] for block in on],
            name=name,
            a_label="uninstalled",
            b_label=label,
        )
        for i, name in enumerate(
            (
                f"actor round trip ({args.block} calls)",
                f"CPU per {args.block} actor calls",
            )
        )
    ]
    for result in results:
        print(result)
    if args.json:
        _results.save(
            args.json,
            "dask_toggle",
            distributed=distributed.__version__,
            cluster="LocalCluster(n_workers=2, threads_per_worker=1, processes=True)",
            block=args.block,
            seconds=args.seconds,
            toggled=label,
            installed=run["installed"],
            results=[r.to_dict() for r in results],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
