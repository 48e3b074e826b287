"""An idle Tornado application: an HTTP server and the periodic work such an
application keeps, with nothing requested (``bench/idle_apps.py`` runs it).

    python bench/samples/idle_tornado_app.py PORT_FILE

The periodic work: a cache refreshed every 100 ms, metrics gathered every
second, a clean-up every 15 s.  The port goes to ``PORT_FILE`` once the
server listens.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from tornado import ioloop, web


class Hello(web.RequestHandler):
    def get(self) -> None:
        self.write("hello")


async def main(port_file: Path) -> None:
    app = web.Application([("/", Hello)])
    server = app.listen(0, "127.0.0.1")
    (sock,) = {s.getsockname()[1] for s in server._sockets.values()}
    cache: dict[str, float] = {}
    metrics: list[float] = []

    def refresh() -> None:
        cache["now"] = time.time()

    def gather() -> None:
        metrics.append(time.process_time())

    def clean_up() -> None:
        del metrics[:-100]

    for callback, every_ms in ((refresh, 100), (gather, 1000), (clean_up, 15000)):
        ioloop.PeriodicCallback(callback, every_ms).start()
    port_file.write_text(str(sock))
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
