"""The I/O workload of ``fastloop bench``: a TCP echo between two IOStreams."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Coroutine
from typing import Any

#: ``asyncio.run`` or ``uvloop.run``: what every workload runs its round with.
Runner = Callable[[Coroutine[Any, Any, float]], float]


def _echo(runner: Runner, trips: int, size: int) -> float:
    async def main() -> float:
        from tornado.iostream import IOStream
        from tornado.tcpserver import TCPServer

        accepted: asyncio.Future[IOStream] = asyncio.get_running_loop().create_future()

        class Server(TCPServer):
            async def handle_stream(self, stream: IOStream, address: object) -> None:
                accepted.set_result(stream)

        server = Server()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        sock.setblocking(False)
        server.add_sockets([sock])
        client = IOStream(socket.socket())
        await client.connect(sock.getsockname())
        peer = await accepted
        message = b"m" * size
        start = time.perf_counter()
        for _ in range(trips):
            await client.write(message)
            await peer.write(await peer.read_bytes(size))
            await client.read_bytes(size)
        elapsed = time.perf_counter() - start
        client.close()
        peer.close()
        server.stop()
        return elapsed

    return runner(main())


def echo_64(runner: Runner, n: int) -> float:
    return _echo(runner, n, 64)


def echo_64k(runner: Runner, n: int) -> float:
    return _echo(runner, n, 65536)
