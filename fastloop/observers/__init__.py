"""What watches the loops from outside, changing nothing they do.

The blocked-loop watchdog (``watchdog``), the sampling profiler
(``profiler``) and the GIL probe (``gil``), with the daemon thread they
share (``_ticker``) and their discovery of the process's loops and threads
(``ioloops``).  What they measure goes to the stats pipeline
(``fastloop.telemetry.live``).  This package imports nothing: each
observer loads when it is asked for.
"""
