"""The dask benchmarks' load generator on a core of its own.

A dask benchmark's client is the load generator, and LocalCluster runs the
scheduler in the client's process: pinned from the start, the nanny would
spawn its workers on the same core (children inherit the affinity).  So the
script pins every thread of its process once the cluster is up; threads
made later inherit it.  Spliced into the benchmarks' scripts as source.
"""

PIN_THREADS = r'''
import os

def pin_threads(cpus):
    """Every thread of this process on ``cpus``: the client, its loop, the scheduler."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # the thread ended meanwhile
            pass
'''
