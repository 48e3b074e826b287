"""The dask preload for dask's command line, where it takes arguments.

    dask worker tcp://scheduler:8786 --preload fastloop.dask.cli --block-ms 50

dask's command line hands arguments after a preload only to a preload whose
``dask_setup`` is a click command, and allows one such preload per
process; ``fastloop.dask`` stays a plain hook so that it never takes that
place from another preload.  Both do the same (``fastloop.dask.setup``).
"""

from __future__ import annotations

import click

from fastloop.dask import setup


# One catch-all argument: the options are fastloop's to check, so that a bad
# one is one log line (``settings.choose``) instead of a preload that fails.
@click.command(context_settings={"ignore_unknown_options": True}, add_help_option=False)
@click.argument("arguments", nargs=-1, type=click.UNPROCESSED)
def dask_setup(server: object, arguments: tuple[str, ...]) -> None:
    """dask's preload hook, with the arguments given after the preload."""
    setup(server, arguments)


# dask's command line checks the arguments with a bare click.Context, which
# reads this attribute rather than context_settings.
dask_setup.ignore_unknown_options = True
