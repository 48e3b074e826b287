"""The differential soak's load generator: a seeded script of ordinary and hostile clients.

    python bench/soak_client.py --port PORT --seed S --count N [--pause-scale F]

asyncio streams only (no Tornado, so the patches under test are not in the
client), to 127.0.0.1, at most ``CONCURRENCY`` connections at once.  The
script (which scenarios, in which order, each with its own random draws)
depends on ``--seed`` and ``--count`` alone, so every arm of bench/soak.py
runs the same one.  Prints JSON on stdout: scenario -> outcome -> count.

A scenario is an async function ``(host, port, rng) -> outcome``, an outcome
a short label that is the same whenever the server behaves the same; add
one with ``@scenario(name)`` and give it a weight in ``MIX``.  Whatever a
scenario raises becomes its outcome too (``outcome()``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import json
import random
import socket
import string
import struct
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable

HOST = "127.0.0.1"
CONCURRENCY = 200
#: Bound of any one connect, read or write (s).
OP_TIMEOUT = 10.0
#: Bound of a whole run, fixed and per scenario (s), ten times a calm
#: machine's pace: what is left then is cancelled, "unfinished".
RUN_TIMEOUT = (60.0, 0.01)
MID_RESPONSE_BYTES = 100 << 10
SLOW_FIRST_BYTES = 64 << 10
#: The kernel's receive buffer, fixed: with the server's small send buffer,
#: far less than /stream's body fits between them, so a client that stops
#: reading mid-response always finds the server still writing.
RECEIVE_BUFFER = 32 << 10
#: slow_reader's pause between its two reads (s), times --pause-scale.
SLOW_PAUSE = (1.0, 4.0)
#: half_close_post's wait between its request and its FIN (s).
HALF_CLOSE_WAIT = (0.004, 0.016)
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

Scenario = Callable[[str, int, random.Random], Awaitable[str]]
SCENARIOS: dict[str, Scenario] = {}

#: How often each scenario comes up in a script, relative to the others.
MIX: dict[str, int] = {
    "json": 8,
    "executor": 6,
    "pipelined_keepalive": 6,
    "half_close_post": 10,
    "rst_mid_response": 3,
    "fin_mid_response": 3,
    "slow_reader": 2,
    "ws_clean": 4,
    "ws_abrupt": 3,
    "ws_rst": 3,
    "ws_bad_frame": 3,
    "malformed_request_line": 1,
    "malformed_version": 1,
    "malformed_header_without_colon": 1,
    "malformed_huge_header": 1,
    "malformed_content_length": 1,
    "malformed_negative_content_length": 1,
    "malformed_length_and_chunked": 1,
    "malformed_chunk_size": 1,
    "malformed_nul_in_header": 1,
    "malformed_bare_lf": 1,
    "malformed_double_content_length": 1,
    "malformed_eof_in_body": 1,
    "malformed_folded_header": 1,
    "malformed_space_in_target": 1,
    "malformed_huge_content_length": 1,
    "malformed_unknown_transfer_encoding": 1,
}

pause_scale = 1.0


class Outcome(Exception):
    """A scenario's outcome, decided before its last step."""


def scenario(name: str) -> Callable[[Scenario], Scenario]:
    def register(function: Scenario) -> Scenario:
        SCENARIOS[name] = function
        return function

    return register


async def outcome(step: Awaitable[str]) -> str:
    """The label of what ``step`` returned, or of how it failed."""
    try:
        return await step
    except Outcome as decided:
        return str(decided)
    except asyncio.IncompleteReadError as eof:
        return "cut-mid-response" if eof.partial else "no-response"
    except (ConnectionResetError, BrokenPipeError):
        return "reset"
    except TimeoutError:
        return "timeout"
    except (asyncio.LimitOverrunError, ValueError):
        return "unparsable-response"
    except OSError as error:
        return f"oserror:{error.errno}"


async def bounded(step: Awaitable[bytes]) -> bytes:
    return await asyncio.wait_for(step, OP_TIMEOUT)


@contextlib.asynccontextmanager
async def connection(
    host: str, port: int
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
    sock.setblocking(False)
    try:
        loop = asyncio.get_running_loop()
        await asyncio.wait_for(loop.sock_connect(sock, (host, port)), OP_TIMEOUT)
        reader, writer = await asyncio.open_connection(sock=sock)
    except BaseException:
        sock.close()
        raise
    try:
        yield reader, writer
    finally:
        writer.close()


async def send(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    await asyncio.wait_for(writer.drain(), OP_TIMEOUT)


def reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST instead of a FIN."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def request(method: str, path: str, headers: str = "", body: bytes = b"") -> bytes:
    if body:
        headers += f"Content-Length: {len(body)}\r\n"
    return f"{method} {path} HTTP/1.1\r\nHost: {HOST}\r\n{headers}\r\n".encode() + body


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    head = (await bounded(reader.readuntil(b"\r\n\r\n"))).decode("latin-1")
    status_line, *lines = head.split("\r\n")
    fields = (line.split(":", 1) for line in lines if ":" in line)
    return int(status_line.split()[1]), {k.lower(): v.strip() for k, v in fields}


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    status, headers = await read_head(reader)
    length = int(headers.get("content-length", 0))
    return status, await bounded(reader.readexactly(length))


async def get(host: str, port: int, path: str) -> str:
    async with connection(host, port) as (reader, writer):
        await send(writer, request("GET", path))
        status, body = await read_response(reader)
    return f"answered:{status}:{len(body)} bytes"


@scenario("json")
async def json_get(host: str, port: int, rng: random.Random) -> str:
    return await get(host, port, "/json")


@scenario("executor")
async def executor_get(host: str, port: int, rng: random.Random) -> str:
    return await get(host, port, "/executor")


@scenario("pipelined_keepalive")
async def pipelined_keepalive(host: str, port: int, rng: random.Random) -> str:
    async with connection(host, port) as (reader, writer):
        await send(writer, request("GET", "/json") * 3)
        answers = [await read_response(reader) for _ in range(3)]
    return "answered:" + ",".join(f"{status}:{len(body)}" for status, body in answers)


@scenario("half_close_post")
async def half_close_post(host: str, port: int, rng: random.Random) -> str:
    body = rng.randbytes(10)
    async with connection(host, port) as (reader, writer):
        await send(writer, request("POST", "/echo", body=body))
        await asyncio.sleep(rng.uniform(*HALF_CLOSE_WAIT))
        writer.write_eof()
        status, echoed = await read_response(reader)
        rest = await bounded(reader.read())
    return f"answered:{status}:" + ("echo" if echoed == body and not rest else "other")


async def mid_response(host: str, port: int, abort: bool) -> str:
    async with connection(host, port) as (reader, writer):
        await send(writer, request("GET", "/stream"))
        status, _ = await read_head(reader)
        await bounded(reader.readexactly(MID_RESPONSE_BYTES))
        if abort:
            reset(writer)
    return f"read {MID_RESPONSE_BYTES} bytes of {status}, then " + (
        "rst" if abort else "close"
    )


@scenario("rst_mid_response")
async def rst_mid_response(host: str, port: int, rng: random.Random) -> str:
    return await mid_response(host, port, abort=True)


@scenario("fin_mid_response")
async def fin_mid_response(host: str, port: int, rng: random.Random) -> str:
    return await mid_response(host, port, abort=False)


@scenario("slow_reader")
async def slow_reader(host: str, port: int, rng: random.Random) -> str:
    pause = rng.uniform(*SLOW_PAUSE) * pause_scale
    async with connection(host, port) as (reader, writer):
        await send(writer, request("GET", "/stream"))
        status, headers = await read_head(reader)
        first = await bounded(reader.readexactly(SLOW_FIRST_BYTES))
        await asyncio.sleep(pause)
        length = int(headers["content-length"]) - len(first)
        rest = await bounded(reader.readexactly(length))
    return f"answered:{status}:{len(first) + len(rest)} bytes"


# The websocket scenarios speak RFC 6455 by hand: client frames masked
# unless a scenario breaks that rule on purpose.


def frame(
    opcode: int, payload: bytes, rng: random.Random, masked: bool = True, rsv: int = 0
) -> bytes:
    """One final frame of less than 64 KiB; ``rsv``: reserved bits to set."""
    mask_bit = 0x80 if masked else 0
    if len(payload) < 126:
        length = bytes([mask_bit | len(payload)])
    else:
        length = bytes([mask_bit | 126]) + struct.pack(">H", len(payload))
    head = bytes([0x80 | rsv | opcode]) + length
    if not masked:
        return head + payload
    key = rng.randbytes(4)
    return head + key + bytes(byte ^ key[i % 4] for i, byte in enumerate(payload))


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """The opcode and payload of the server's next frame (never masked)."""
    first, second = await bounded(reader.readexactly(2))
    length = second & 0x7F
    if length == 126:
        (length,) = struct.unpack(">H", await bounded(reader.readexactly(2)))
    elif length == 127:
        (length,) = struct.unpack(">Q", await bounded(reader.readexactly(8)))
    return first & 0x0F, await bounded(reader.readexactly(length))


async def ws_handshake(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rng: random.Random
) -> None:
    key = base64.b64encode(rng.randbytes(16))
    headers = (
        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key.decode()}\r\nSec-WebSocket-Version: 13\r\n"
    )
    await send(writer, request("GET", "/ws", headers))
    status, fields = await read_head(reader)
    if status != 101:
        raise Outcome(f"handshake:{status}")
    accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest()).decode()
    if fields.get("sec-websocket-accept") != accept:
        raise Outcome("handshake:bad-accept")


async def ws_echoes(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rng: random.Random
) -> None:
    """A burst of text frames, then their echoes, in order."""
    texts = [
        "".join(rng.choices(string.ascii_letters, k=rng.randint(1, 300)))
        for _ in range(rng.randint(5, 20))
    ]
    await send(writer, b"".join(frame(0x1, t.encode(), rng) for t in texts))
    for text in texts:
        if await read_frame(reader) != (0x1, text.encode()):
            raise Outcome("wrong-echo")


async def ws_session(host: str, port: int, rng: random.Random, end: str) -> str:
    async with connection(host, port) as (reader, writer):
        await ws_handshake(reader, writer, rng)
        await ws_echoes(reader, writer, rng)
        if end == "rst":
            reset(writer)
        elif end == "close-frame":
            await send(writer, frame(0x8, struct.pack(">H", 1000), rng))
            opcode, payload = await read_frame(reader)
            code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else None
            eof = await bounded(reader.read())
            end = f"close-frame, answered {opcode:#x} {code}" + (
                ", eof" if not eof else ", data"
            )
    return f"echoed, then {end}"


@scenario("ws_clean")
async def ws_clean(host: str, port: int, rng: random.Random) -> str:
    return await ws_session(host, port, rng, "close-frame")


@scenario("ws_abrupt")
async def ws_abrupt(host: str, port: int, rng: random.Random) -> str:
    return await ws_session(host, port, rng, "close")


@scenario("ws_rst")
async def ws_rst(host: str, port: int, rng: random.Random) -> str:
    return await ws_session(host, port, rng, "rst")


async def next_frame(reader: asyncio.StreamReader) -> str:
    opcode, _ = await read_frame(reader)
    return f"frame {opcode:#x}"


@scenario("ws_bad_frame")
async def ws_bad_frame(host: str, port: int, rng: random.Random) -> str:
    """An unmasked frame, a reserved opcode or a reserved bit: how the server ends it."""
    kind = rng.choice(["unmasked", "opcode 0x3", "rsv2"])
    bad = {
        "unmasked": frame(0x1, b"unmasked", rng, masked=False),
        "opcode 0x3": frame(0x3, b"reserved", rng),
        "rsv2": frame(0x1, b"reserved", rng, rsv=0x20),
    }[kind]
    async with connection(host, port) as (reader, writer):
        await ws_handshake(reader, writer, rng)
        await send(writer, bad)
        return f"{kind}: {await outcome(next_frame(reader))}"


#: Malformed requests, each sent in one write, and whether a FIN follows it.
MALFORMED: dict[str, tuple[bytes, bool]] = {
    "request_line": (b"GARBAGE\r\n\r\n", False),
    "version": (b"GET /json HTTP/7.3\r\nHost: h\r\n\r\n", False),
    "header_without_colon": (
        b"GET /json HTTP/1.1\r\nHost: h\r\nNoColon\r\n\r\n",
        False,
    ),
    "huge_header": (
        b"GET /json HTTP/1.1\r\nHost: h\r\nX-Big: " + b"a" * (96 << 10) + b"\r\n\r\n",
        False,
    ),
    "content_length": (
        b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: ten\r\n\r\n0123456789",
        False,
    ),
    "negative_content_length": (
        b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: -5\r\n\r\nabcde",
        False,
    ),
    "length_and_chunked": (
        b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n0\r\n\r\n",
        False,
    ),
    "chunk_size": (
        b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"zz\r\nabcde\r\n0\r\n\r\n",
        False,
    ),
    "nul_in_header": (b"GET /json HTTP/1.1\r\nHost: h\r\nX-A: a\x00b\r\n\r\n", False),
    "bare_lf": (b"GET /json HTTP/1.1\nHost: h\nConnection: close\n\n", False),
    "double_content_length": (
        b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n"
        b"Content-Length: 10\r\n\r\n0123456789",
        False,
    ),
    "eof_in_body": (
        b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n0123456789",
        True,
    ),
    "folded_header": (
        b"GET /json HTTP/1.1\r\nHost: h\r\nX-A: a\r\n  folded\r\n"
        b"Connection: close\r\n\r\n",
        False,
    ),
    "space_in_target": (b"GET /a b c HTTP/1.1\r\nHost: h\r\n\r\n", False),
    "huge_content_length": (
        b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 1000000000000\r\n\r\nab",
        False,
    ),
    "unknown_transfer_encoding": (
        b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\nabcde",
        False,
    ),
}


def malformed(data: bytes, fin: bool) -> Scenario:
    async def send_malformed(host: str, port: int, rng: random.Random) -> str:
        async with connection(host, port) as (reader, writer):
            await send(writer, data)
            if fin:
                writer.write_eof()
            status, _ = await read_head(reader)
        return f"status:{status}"

    return send_malformed


SCENARIOS.update(
    {f"malformed_{name}": malformed(*spec) for name, spec in MALFORMED.items()}
)


def script(seed: int, count: int) -> list[tuple[str, int]]:
    """The run: each scenario in launch order with the seed of its own draws
    (a shorter run's script is the start of a longer one's)."""
    rng = random.Random(seed)
    names, weights = list(MIX), list(MIX.values())
    return [(rng.choices(names, weights)[0], rng.getrandbits(64)) for _ in range(count)]


def run_timeout(count: int) -> float:
    fixed, per_scenario = RUN_TIMEOUT
    return fixed + count * per_scenario


async def run(port: int, plan: list[tuple[str, int]]) -> dict[str, Counter[str]]:
    gate = asyncio.Semaphore(CONCURRENCY)
    results = ["unfinished"] * len(plan)

    async def one(index: int, name: str, seed: int) -> None:
        async with gate:
            step = SCENARIOS[name](HOST, port, random.Random(seed))
            results[index] = await outcome(step)

    tasks = [asyncio.ensure_future(one(i, *entry)) for i, entry in enumerate(plan)]
    _, late = await asyncio.wait(tasks, timeout=run_timeout(len(plan)))
    for task in late:
        task.cancel()
    tallies: dict[str, Counter[str]] = {name: Counter() for name in MIX}
    for (name, _), result in zip(plan, results, strict=True):
        tallies[name][result] += 1
    return tallies


def main() -> None:
    global pause_scale
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument(
        "--pause-scale", type=float, default=1.0, help="shortens slow_reader's pauses"
    )
    args = parser.parse_args()
    pause_scale = args.pause_scale
    started = time.monotonic()
    tallies = asyncio.run(run(args.port, script(args.seed, args.count)))
    json.dump(
        {"outcomes": tallies, "seconds": round(time.monotonic() - started, 1)},
        sys.stdout,
    )


if __name__ == "__main__":
    main()
