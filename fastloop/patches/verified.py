"""The code each patch was verified on: fingerprints (``fingerprints``) of
the functions patches replace or rely on, each with the releases the test
suite passed on with that code.

``VERIFIED`` is generated: in a cell of the support matrix,
``python -m fastloop.patches.fingerprints --into fastloop/patches/verified.py``
adds that environment's fingerprints, and ``nox`` does it in each cell
before the suite runs there.  Commit the table only after the suite passed:
a fingerprint here is the claim that it did.
"""

#: The support matrix: each CPython minor version with the Tornado minor
#: versions the suite runs on it (``noxfile.py``'s cells are made from it).
#: Tornado supports 3.12 from 6.4: before, its TLS streams call
#: ``ssl.match_hostname``, which 3.12 removed.
#: A cell's fingerprints are added here after its suite passes, and
#: ``tests/test_fingerprints.py`` fails in a cell whose code is not here yet.
SUPPORTED: dict[str, tuple[str, ...]] = {
    "3.11": ("6.2", "6.3", "6.4", "6.5", "6.6"),
    "3.12": ("6.4", "6.5", "6.6"),
    "3.13": ("6.4", "6.5", "6.6"),
    "3.14": ("6.6",),
    "3.15": ("6.6",),
}

VERIFIED: dict[str, dict[str, tuple[str, ...]]] = {
    "asyncio.base_events:BaseEventLoop._call_soon": {
        "ed463969": (
            "CPython 3.11.7",
            "CPython 3.12.1",
            "CPython 3.13.0",
            "CPython 3.14.10",
            "CPython 3.15.2",
        ),
    },
    "asyncio.base_events:BaseEventLoop._run_once": {
        "3432dc11": (
            "CPython 3.11.7",
            "CPython 3.12.1",
        ),
        "a983cc98": (
            "CPython 3.13.0",
            "CPython 3.14.10",
        ),
        "d1f6c748": (
            "CPython 3.15.2",
        ),
    },
    "asyncio.base_events:BaseEventLoop.call_soon": {
        "f322d073": (
            "CPython 3.11.7",
            "CPython 3.12.1",
            "CPython 3.13.0",
            "CPython 3.14.10",
            "CPython 3.15.2",
        ),
    },
    "asyncio.base_events:BaseEventLoop.call_soon_threadsafe": {
        "ae7a3d08": (
            "CPython 3.11.7",
            "CPython 3.12.1",
            "CPython 3.13.0",
        ),
        "8c78632b": (
            "CPython 3.14.10",
            "CPython 3.15.2",
        ),
    },
    "asyncio.events:Handle.__init__": {
        "32a2cc5b": (
            "CPython 3.11.7",
            "CPython 3.12.1",
            "CPython 3.13.0",
            "CPython 3.14.10",
            "CPython 3.15.2",
        ),
    },
    "asyncio.events:Handle._run": {
        "70ee8655": (
            "CPython 3.11.7",
            "CPython 3.12.1",
        ),
        "498f92fa": (
            "CPython 3.13.0",
            "CPython 3.14.10",
            "CPython 3.15.2",
        ),
    },
    "asyncio.selector_events:BaseSelectorEventLoop.__init__": {
        "db1bacf4": (
            "CPython 3.11.7",
            "CPython 3.12.1",
            "CPython 3.13.0",
            "CPython 3.14.10",
            "CPython 3.15.2",
        ),
    },
    "asyncio.selector_events:BaseSelectorEventLoop._add_reader": {
        "878dabcf": (
            "CPython 3.11.7",
            "CPython 3.12.1",
        ),
        "20516006": (
            "CPython 3.13.0",
            "CPython 3.14.10",
        ),
        "3f881bb8": (
            "CPython 3.15.2",
        ),
    },
    "asyncio.selector_events:BaseSelectorEventLoop._make_self_pipe": {
        "b627f970": (
            "CPython 3.11.7",
            "CPython 3.12.1",
            "CPython 3.13.0",
            "CPython 3.14.10",
            "CPython 3.15.2",
        ),
    },
    "asyncio.selector_events:BaseSelectorEventLoop._process_events": {
        "718a287a": (
            "CPython 3.11.7",
            "CPython 3.12.1",
            "CPython 3.13.0",
            "CPython 3.14.10",
            "CPython 3.15.2",
        ),
    },
    "asyncio.selector_events:BaseSelectorEventLoop._process_self_data": {
        "1cf7eae3": (
            "CPython 3.11.7",
            "CPython 3.12.1",
            "CPython 3.13.0",
            "CPython 3.14.10",
            "CPython 3.15.2",
        ),
    },
    "asyncio.selector_events:BaseSelectorEventLoop._read_from_self": {
        "0acf02d4": (
            "CPython 3.11.7",
            "CPython 3.12.1",
            "CPython 3.13.0",
            "CPython 3.14.10",
            "CPython 3.15.2",
        ),
    },
    "asyncio.selector_events:BaseSelectorEventLoop._remove_reader": {
        "6a471362": (
            "CPython 3.11.7",
            "CPython 3.12.1",
        ),
        "67e36e5b": (
            "CPython 3.13.0",
            "CPython 3.14.10",
            "CPython 3.15.2",
        ),
    },
    "asyncio.selector_events:BaseSelectorEventLoop._write_to_self": {
        "b128212d": (
            "CPython 3.11.7",
            "CPython 3.12.1",
            "CPython 3.13.0",
            "CPython 3.14.10",
            "CPython 3.15.2",
        ),
    },
    "asyncio.selector_events:BaseSelectorEventLoop.add_reader": {
        "d0a82df0": (
            "CPython 3.11.7",
            "CPython 3.12.1",
            "CPython 3.13.0",
            "CPython 3.14.10",
            "CPython 3.15.2",
        ),
    },
    "asyncio.selector_events:BaseSelectorEventLoop.remove_reader": {
        "f510e934": (
            "CPython 3.11.7",
            "CPython 3.12.1",
            "CPython 3.13.0",
            "CPython 3.14.10",
            "CPython 3.15.2",
        ),
    },
    "distributed.core:Server.__init__": {
        "ff0c4700": (
            "distributed 2026.8.0",
        ),
    },
    "distributed.core:Server._cycle_ticks": {
        "b682c7fb": (
            "distributed 2026.8.0",
        ),
    },
    "distributed.core:Server._measure_tick": {
        "f60b8c70": (
            "distributed 2026.8.0",
        ),
    },
    "distributed.core:Server.digest_metric": {
        "3f2c336e": (
            "distributed 2026.8.0",
        ),
    },
    "distributed.profile:_watch": {
        "da4424b1": (
            "distributed 2026.8.0",
        ),
    },
    "distributed.profile:watch": {
        "167959e2": (
            "distributed 2026.8.0",
        ),
    },
    "distributed.scheduler:Scheduler._check_no_workers": {
        "c6e6fdf3": (
            "distributed 2026.8.0",
        ),
    },
    "distributed.scheduler:Scheduler.check_idle": {
        "5ace0171": (
            "distributed 2026.8.0",
        ),
    },
    "distributed.scheduler:SchedulerState._transition": {
        "0c5c606c": (
            "distributed 2026.8.0",
        ),
    },
    "distributed.threadpoolexecutor:_worker": {
        "43258bae": (
            "distributed 2026.8.0",
        ),
    },
    "distributed.worker:Worker.actor_execute": {
        "e8eee19e": (
            "distributed 2026.8.0",
        ),
    },
    "distributed.worker:Worker.execute": {
        "c5d1c037": (
            "distributed 2026.8.0",
        ),
    },
    "distributed.worker:Worker.trigger_profile": {
        "40d5a5d3": (
            "distributed 2026.8.0",
        ),
    },
    "distributed.worker:_run_actor": {
        "422a6ebc": (
            "distributed 2026.8.0",
        ),
    },
    "distributed.worker:_run_task": {
        "7a256fc2": (
            "distributed 2026.8.0",
        ),
    },
    "distributed.worker_memory:WorkerMemoryManager.__init__": {
        "f70c9634": (
            "distributed 2026.8.0",
        ),
    },
    "distributed.worker_memory:WorkerMemoryManager._maybe_pause_or_unpause": {
        "419e05d1": (
            "distributed 2026.8.0",
        ),
    },
    "distributed.worker_memory:WorkerMemoryManager._maybe_spill": {
        "91cf07d7": (
            "distributed 2026.8.0",
        ),
    },
    "distributed.worker_memory:WorkerMemoryManager.memory_monitor": {
        "e130959e": (
            "distributed 2026.8.0",
        ),
    },
    "selectors:EpollSelector.close": {
        "183ab8fb": (
            "CPython 3.11.7",
            "CPython 3.12.1",
            "CPython 3.13.0",
            "CPython 3.14.10",
            "CPython 3.15.2",
        ),
    },
    "selectors:EpollSelector.select": {
        "6a2c9dc9": (
            "CPython 3.11.7",
            "CPython 3.12.1",
        ),
        "7509239e": (
            "CPython 3.13.0",
            "CPython 3.14.10",
            "CPython 3.15.2",
        ),
    },
    "threading:Thread.start": {
        "e133f516": (
            "CPython 3.11.7",
            "CPython 3.12.1",
        ),
        "0e9b8499": (
            "CPython 3.13.0",
        ),
        "c0656f79": (
            "CPython 3.14.10",
            "CPython 3.15.2",
        ),
    },
    "tornado.ioloop:IOLoop._discard_future_result": {
        "b05428f9": (
            "Tornado 6.2",
            "Tornado 6.3.3",
            "Tornado 6.4.2",
            "Tornado 6.5.10",
            "Tornado 6.6.1",
        ),
    },
    "tornado.ioloop:IOLoop._run_callback": {
        "fb04b170": (
            "Tornado 6.2",
            "Tornado 6.3.3",
            "Tornado 6.4.2",
            "Tornado 6.5.10",
            "Tornado 6.6.1",
        ),
    },
    "tornado.ioloop:IOLoop.initialize": {
        "eafa0c53": (
            "Tornado 6.2",
        ),
        "492cb66c": (
            "Tornado 6.3.3",
            "Tornado 6.4.2",
            "Tornado 6.5.10",
            "Tornado 6.6.1",
        ),
    },
    "tornado.iostream:BaseIOStream._handle_write": {
        "ab127958": (
            "Tornado 6.2",
            "Tornado 6.3.3",
            "Tornado 6.4.2",
        ),
        "a26b1581": (
            "Tornado 6.5.10",
        ),
        "9f25fe60": (
            "Tornado 6.6.1",
        ),
    },
    "tornado.iostream:BaseIOStream._read_to_buffer": {
        "601533e0": (
            "Tornado 6.2",
            "Tornado 6.3.3",
            "Tornado 6.4.2",
        ),
        "0e1672fd": (
            "Tornado 6.5.10",
        ),
        "67113117": (
            "Tornado 6.6.1",
        ),
    },
    "tornado.iostream:BaseIOStream.write": {
        "46081b32": (
            "Tornado 6.2",
            "Tornado 6.3.3",
            "Tornado 6.4.2",
            "Tornado 6.5.10",
        ),
        "a9db8549": (
            "Tornado 6.6.1",
        ),
    },
    "tornado.iostream:IOStream.read_from_fd": {
        "748315ff": (
            "Tornado 6.2",
            "Tornado 6.3.3",
            "Tornado 6.4.2",
            "Tornado 6.5.10",
        ),
        "521f8ca6": (
            "Tornado 6.6.1",
        ),
    },
    "tornado.iostream:IOStream.write_to_fd": {
        "63a3878d": (
            "Tornado 6.2",
            "Tornado 6.3.3",
            "Tornado 6.4.2",
            "Tornado 6.5.10",
            "Tornado 6.6.1",
        ),
    },
    "tornado.iostream:PipeIOStream.read_from_fd": {
        "0653c196": (
            "Tornado 6.2",
            "Tornado 6.3.3",
            "Tornado 6.4.2",
        ),
        "2f80028c": (
            "Tornado 6.5.10",
        ),
        "41058136": (
            "Tornado 6.6.1",
        ),
    },
    "tornado.iostream:PipeIOStream.write_to_fd": {
        "52beb757": (
            "Tornado 6.2",
            "Tornado 6.3.3",
            "Tornado 6.4.2",
            "Tornado 6.5.10",
            "Tornado 6.6.1",
        ),
    },
    "tornado.iostream:SSLIOStream.read_from_fd": {
        "042507d0": (
            "Tornado 6.2",
            "Tornado 6.3.3",
            "Tornado 6.4.2",
            "Tornado 6.5.10",
        ),
        "e83e9312": (
            "Tornado 6.6.1",
        ),
    },
    "tornado.iostream:SSLIOStream.write_to_fd": {
        "1a4fabba": (
            "Tornado 6.2",
            "Tornado 6.3.3",
            "Tornado 6.4.2",
            "Tornado 6.5.10",
            "Tornado 6.6.1",
        ),
    },
    "tornado.platform.asyncio:BaseAsyncIOLoop._handle_events": {
        "97c1b40d": (
            "Tornado 6.2",
            "Tornado 6.3.3",
            "Tornado 6.4.2",
            "Tornado 6.5.10",
            "Tornado 6.6.1",
        ),
    },
    "tornado.platform.asyncio:BaseAsyncIOLoop.add_callback": {
        "04d1d379": (
            "Tornado 6.2",
            "Tornado 6.3.3",
            "Tornado 6.4.2",
            "Tornado 6.5.10",
            "Tornado 6.6.1",
        ),
    },
    "tornado.platform.asyncio:BaseAsyncIOLoop.add_handler": {
        "d7ea2ebd": (
            "Tornado 6.2",
            "Tornado 6.3.3",
            "Tornado 6.4.2",
            "Tornado 6.5.10",
        ),
        "96eeadad": (
            "Tornado 6.6.1",
        ),
    },
    "tornado.platform.asyncio:BaseAsyncIOLoop.remove_handler": {
        "6962cd46": (
            "Tornado 6.2",
            "Tornado 6.3.3",
            "Tornado 6.4.2",
            "Tornado 6.5.10",
        ),
        "19857475": (
            "Tornado 6.6.1",
        ),
    },
    "tornado.platform.asyncio:BaseAsyncIOLoop.update_handler": {
        "958da298": (
            "Tornado 6.2",
            "Tornado 6.3.3",
            "Tornado 6.4.2",
            "Tornado 6.5.10",
        ),
        "d0160ba5": (
            "Tornado 6.6.1",
        ),
    },
}
