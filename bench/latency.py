"""Latency wiretape adds, measured against a direct connection in the same run.

Three paths to one raw upstream on 127.0.0.1, with one keep-alive httpx
client each:

  direct   client -> upstream
  record   client -> wiretape recording proxy -> upstream
  replay   client -> wiretape replay proxy (no upstream)

Small non-streamed exchanges: median round trip per path, and the ratio to
direct. Streams: the upstream writes FRAMES chunks GAP_MS apart, each
carrying its send time; the client notes when each arrives. The per-frame
added delay is arrival - send, direct subtracted. Prints a table.

Usage: python bench/latency.py [--requests N] [--frames N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from wiretape.model import RunInfo
from wiretape.playback.decide import Policy
from wiretape.proxy.record import Recorder
from wiretape.proxy.replay import Replayer
from wiretape.proxy.server import Listeners
from wiretape.store.runfile import RunFile

SMALL = b'{"id":"x","object":"chat.completion","choices":[{"message":{"content":"ok"}}]}'


async def upstream_handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A raw HTTP/1.1 upstream: POST /small answers at once; POST /stream
    sends n chunks gap ms apart, each holding its monotonic send time (ns)."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            body = await reader.readexactly(length)
            if head.startswith(b"POST /v1/stream"):
                n, gap = (int(x) for x in body.split(b","))
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
                await writer.drain()
                for _ in range(n):
                    await asyncio.sleep(gap / 1000)
                    data = b"data: %d\n\n" % time.monotonic_ns()
                    writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(SMALL), SMALL))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


class Loop:
    """An event loop on a background thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()


def timed(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t) / 1e6)
    return out


def stream_delays(client: httpx.Client, url: str, frames: int, gap_ms: int) -> list[float]:
    delays = []
    with client.stream("POST", url + "/v1/stream", content=b"%d,%d" % (frames, gap_ms)) as resp:
        for chunk in resp.iter_raw():
            now = time.monotonic_ns()
            for line in chunk.split(b"\n"):
                if line.startswith(b"data: "):
                    delays.append((now - int(line[6:])) / 1e6)
    return delays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--gap-ms", type=int, default=5)
    args = parser.parse_args()
    bg = Loop()
    tmp = Path(tempfile.mkdtemp(prefix="wiretape-bench-"))

    async def start_upstream() -> int:
        server = await asyncio.start_server(upstream_handler, "127.0.0.1", 0)
        return int(server.sockets[0].getsockname()[1])

    up_port = bg.run(start_upstream())
    upstream = f"http://127.0.0.1:{up_port}/v1"
    run = RunFile.create(tmp / "bench.wtape", RunInfo("run_000000000000", "bench", (), "", (), (), 0))

    async def start_record() -> tuple[int, Recorder, Listeners]:
        recorder = Recorder(run)
        listeners = Listeners()
        port = await listeners.listen(0, lambda cid: recorder.handler("openai", upstream, cid))
        return port, recorder, listeners

    rec_port, recorder, rec_listeners = bg.run(start_record())
    paths = {"direct": f"http://127.0.0.1:{up_port}", "record": f"http://127.0.0.1:{rec_port}"}
    clients = {name: httpx.Client(timeout=30) for name in ("direct", "record", "replay")}
    small: dict[str, list[float]] = {}
    delays: dict[str, list[float]] = {}
    for name in ("direct", "record"):
        post = lambda name=name: clients[name].post(paths[name] + "/v1/small", content=b"{}")  # noqa: E731
        timed(post, 20)  # warm-up
        small[name] = timed(post, args.requests)
        delays[name] = stream_delays(clients[name], paths[name], args.frames, args.gap_ms)
    bg.run(recorder.aclose())

    run.prepare_for_writes()
    replay_listeners = Listeners()

    async def start_replay() -> int:
        replayer = Replayer(run, run.exchanges(), Policy())
        run.start_replay(replayer.replay_id, "strict", {})
        return await replay_listeners.listen(0, lambda cid: replayer.handler("openai", cid))

    paths["replay"] = f"http://127.0.0.1:{bg.run(start_replay())}"
    post = lambda: clients["replay"].post(paths["replay"] + "/v1/small", content=b"{}")  # noqa: E731
    small["replay"] = timed(post, args.requests)
    for client in clients.values():
        client.close()
    bg.run(rec_listeners.close(0.1))
    bg.run(replay_listeners.close(0.1))
    bg.stop()

    base = statistics.median(small["direct"])
    print(f"small non-streamed exchanges ({args.requests} each, keep-alive), median round trip:")
    for name in ("direct", "record", "replay"):
        med = statistics.median(small[name])
        print(f"  {name:7s} {med:7.3f} ms   x{med / base:5.2f} of direct   (+{med - base:.3f} ms)")
    d_direct = statistics.median(delays["direct"])
    d_record = statistics.median(delays["record"])
    print(f"stream of {args.frames} frames {args.gap_ms} ms apart, median send-to-arrival per frame:")
    print(f"  direct  {d_direct:7.3f} ms")
    print(f"  record  {d_record:7.3f} ms   (+{d_record - d_direct:.3f} ms per frame, "
          f"x{d_record / d_direct:.2f}; p95 {statistics.quantiles(delays['record'], n=20)[-1]:.3f} ms)")
    print(f"run file: {run.exchange_count()} exchanges, {run.stored_bytes()} bytes of stored bodies")
    run.close()


if __name__ == "__main__":
    main()
