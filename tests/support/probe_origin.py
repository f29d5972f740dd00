"""An origin that keeps every request reaching it, and a canary that must
never be reached, both on 127.0.0.1 in the running event loop.

The canary listens on the origin's port with one more digit (origin port
4012, canary 4012d), and on no other: a proxy that glues a request-target
to its upstream URL (``http://127.0.0.1:4012`` + ``7/x``) or lets a
target name a host (``@127.0.0.1:40127/x``) reaches the canary; a proxy
that relays only origin-form targets never does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import h11

__all__ = ["Probe", "Seen", "probe_origin"]


@dataclass(frozen=True)
class Seen:
    """One request as the origin parsed it."""

    method: bytes
    target: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes

    def header(self, name: bytes) -> list[bytes]:
        return [v for k, v in self.headers if k.lower() == name.lower()]


@dataclass
class Probe:
    port: int
    canary_port: int
    seen: list[Seen] = field(default_factory=list)
    canary_hits: int = 0
    #: request heads the origin could not parse (h11's complaint each)
    broken: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def digit(self) -> str:
        """The digit that turns the origin's port into the canary's."""
        return str(self.canary_port % 10)


async def _origin(probe: Probe, reader: asyncio.StreamReader,
                  writer: asyncio.StreamWriter) -> None:
    conn = h11.Connection(h11.SERVER)
    request: h11.Request | None = None
    body = bytearray()
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Request):
                request, body = event, bytearray()
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert request is not None
                probe.seen.append(Seen(bytes(request.method), bytes(request.target),
                                       tuple(request.headers.raw_items()), bytes(body)))
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                             b"Content-Length: 2\r\n\r\n"
                             + (b"" if request.method == b"HEAD" else b"ok"))
                await writer.drain()
                conn.send(h11.Response(status_code=200, headers=[("Content-Length", "2")]))
                if request.method != b"HEAD":
                    conn.send(h11.Data(data=b"ok"))
                conn.send(h11.EndOfMessage())
                conn.start_next_cycle()
            else:
                return
    except h11.RemoteProtocolError as exc:
        probe.broken.append(str(exc))
    except (ConnectionError, h11.LocalProtocolError):
        pass
    finally:
        writer.close()


async def _canary(probe: Probe, reader: asyncio.StreamReader,
                  writer: asyncio.StreamWriter) -> None:
    probe.canary_hits += 1
    writer.close()


@contextlib.asynccontextmanager
async def probe_origin() -> AsyncIterator[Probe]:
    """The origin and its canary, listening until the block ends."""
    probe = Probe(0, 0)
    for _ in range(200):
        canary = await asyncio.start_server(lambda r, w: _canary(probe, r, w), "127.0.0.1", 0)
        canary_port = canary.sockets[0].getsockname()[1]
        if canary_port // 10 >= 1024:
            try:
                origin = await asyncio.start_server(lambda r, w: _origin(probe, r, w),
                                                    "127.0.0.1", canary_port // 10)
            except OSError:
                pass
            else:
                break
        canary.close()
        await canary.wait_closed()
    else:
        raise RuntimeError("no free pair of ports for an origin and its canary")
    probe.port, probe.canary_port = canary_port // 10, canary_port
    try:
        yield probe
    finally:
        for server in (origin, canary):
            server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), 1.0)
