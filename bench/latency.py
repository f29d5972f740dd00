"""Latency wiretape adds, measured against a direct connection in the same run.

Three paths to one raw upstream on 127.0.0.1 (its own process), with one
keep-alive httpx client each; wiretape runs as ``wiretape serve`` in its own
process, as an agent would meet it:

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
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

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


def serve_upstream(port_file: str) -> None:
    """Run the raw upstream until killed; write its port to ``port_file``."""

    async def run() -> None:
        server = await asyncio.start_server(upstream_handler, "127.0.0.1", 0)
        Path(port_file).write_text(str(server.sockets[0].getsockname()[1]))
        await server.serve_forever()

    asyncio.run(run())


def start(argv: list[str]) -> tuple[subprocess.Popen[str], str]:
    """Start a ``wiretape serve`` process; return it and the URL it printed."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if ": " not in line:
        raise SystemExit(
            f"wiretape did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}"
        )
    return proc, line.split(": ", 1)[1].strip().removesuffix("/v1")


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    return err.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--gap-ms", type=int, default=5)
    parser.add_argument("--upstream-only", metavar="PORT_FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.upstream_only:
        serve_upstream(args.upstream_only)
        return
    tmp = Path(tempfile.mkdtemp(prefix="wiretape-bench-"))
    port_file = tmp / "port"
    up = subprocess.Popen([sys.executable, __file__, "--upstream-only", str(port_file)])
    while not port_file.exists() or not port_file.read_text():
        time.sleep(0.02)
    direct = f"http://127.0.0.1:{port_file.read_text()}"
    wiretape = [sys.executable, "-m", "wiretape"]
    run = tmp / "bench.wtape"
    rec, rec_url = start(
        [*wiretape, "serve", "--record", "--upstream", direct + "/v1", "-o", str(run)]
    )
    paths = {"direct": direct, "record": rec_url}
    small: dict[str, list[float]] = {}
    delays: dict[str, list[float]] = {}
    for name in ("direct", "record"):
        with httpx.Client(timeout=30) as client:
            def post(client: httpx.Client = client, base: str = paths[name]) -> httpx.Response:
                return client.post(base + "/v1/small", content=b"{}")

            timed(post, 20)  # warm-up
            small[name] = timed(post, args.requests)
            delays[name] = stream_delays(client, paths[name], args.frames, args.gap_ms)
    summary = stop(rec)
    up.terminate()
    rep, paths["replay"] = start([*wiretape, "serve", "--replay", str(run), "--diagnostic"])
    with httpx.Client(timeout=30) as client:
        def post(client: httpx.Client = client, base: str = paths["replay"]) -> httpx.Response:
            return client.post(base + "/v1/small", content=b"{}")

        small["replay"] = timed(post, args.requests)
    stop(rep)

    base = statistics.median(small["direct"])
    print(f"small non-streamed exchanges ({args.requests} each, keep-alive), median round trip:")
    for name in ("direct", "record", "replay"):
        med = statistics.median(small[name])
        print(f"  {name:7s} {med:7.3f} ms   x{med / base:5.2f} of direct   (+{med - base:.3f} ms)")
    d_direct = statistics.median(delays["direct"])
    d_record = statistics.median(delays["record"])
    p95 = statistics.quantiles(delays["record"], n=20)[-1]
    print(
        f"stream of {args.frames} frames {args.gap_ms} ms apart, median send-to-arrival per frame:"
    )
    print(f"  direct  {d_direct:7.3f} ms")
    print(f"  record  {d_record:7.3f} ms   (+{d_record - d_direct:.3f} ms per frame, "
          f"x{d_record / d_direct:.2f}; p95 {p95:.3f} ms)")
    print(summary.splitlines()[-1] if summary else "")


if __name__ == "__main__":
    main()
