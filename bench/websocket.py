"""What wiretape adds to a WebSocket session's round trips, against a direct
connection.

An echo WebSocket server (the ``websockets`` library's, in a process of its
own) answers every text message with the same bytes. A client (one
``websockets`` connection, compression off) sends MESSAGES JSON messages of
about SIZE bytes, one at a time, each waiting for its echo:

  direct   client -> echo server, ROUNDS times
  record   client -> ``wiretape serve --record`` -> echo server, once
  replay   client -> ``wiretape serve --replay`` (no echo server), ROUNDS
           times, a fresh ``serve`` each round (a replay serves its tape once)

The added time of message ``i`` on a path is its round trip minus the median
of message ``i``'s direct round trips. Prints p50 and p99 of the added time
(ms) for record and replay, their ratio to direct's own p50, and the
replays' message counts (every message must be exact).

Usage: python bench/websocket.py [--messages N] [--size BYTES] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import pct, wiretape


def serve_echo(port_file: Path) -> None:
    from websockets.asyncio.server import ServerConnection, serve

    async def echo(ws: ServerConnection) -> None:
        async for message in ws:
            await ws.send(message)

    async def run() -> None:
        async with serve(echo, "127.0.0.1", 0, compression=None, max_size=None) as server:
            port_file.write_text(str(server.sockets[0].getsockname()[1]))
            await server.serve_forever()

    asyncio.run(run())


def messages(n: int, size: int) -> list[str]:
    pad = "x" * max(0, size - 60)
    return [json.dumps({"type": "response.create", "seq": i, "input": pad}) for i in range(n)]


async def session(url: str, sent: list[str]) -> list[float]:
    """Round trips (s) of each message, in order."""
    from websockets.asyncio.client import connect

    out = []
    async with connect(url, compression=None, max_size=None) as ws:
        for text in sent:
            t0 = time.perf_counter()
            await ws.send(text)
            echo = await ws.recv()
            out.append(time.perf_counter() - t0)
            assert echo == text
    return out


def run_session(url: str, sent: list[str]) -> list[float]:
    return asyncio.run(session(url.replace("http://", "ws://", 1) + "/v1/responses", sent))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sent = messages(args.messages, args.size)
    with tempfile.TemporaryDirectory(prefix="wiretape-bench-ws-") as tmp:
        port_file = Path(tmp) / "port"
        echo = subprocess.Popen([sys.executable, __file__, "--echo", str(port_file)],
                                stdin=subprocess.DEVNULL)
        try:
            while not port_file.exists() or not port_file.read_text():
                time.sleep(0.02)
            direct_url = f"http://127.0.0.1:{port_file.read_text()}"
            direct = [run_session(direct_url, sent) for _ in range(args.rounds)]
            run = Path(tmp) / "ws.wtape"
            rec = wiretape(["serve", "--record", "--upstream", direct_url + "/v1", "-o",
                            str(run)])
            recorded = run_session(rec.url, sent)
            assert rec.stop() == 0, rec.err
        finally:
            echo.terminate()
            echo.wait()
        replayed, counts = [], []
        for _ in range(args.rounds):
            rep = wiretape(["serve", "--replay", str(run), "--json"])
            replayed.append(run_session(rep.url, sent))
            rep.stop()
            verdict = json.loads(rep.out[rep.out.index("{"):])
            counts.append(verdict.get("messages"))
    base = [statistics.median(r[i] for r in direct) for i in range(len(sent))]
    direct_p50 = pct(base, 50) * 1e3

    def added(rounds: list[list[float]]) -> list[float]:
        return [(r[i] - base[i]) * 1e3 for r in rounds for i in range(len(sent))]

    print(f"{len(sent)} messages of {args.size} B, one at a time; {args.rounds} rounds")
    print(f"direct: p50 round trip {direct_p50:.3f} ms")
    for name, rounds in (("record", [recorded]), ("replay", replayed)):
        a = added(rounds)
        print(f"{name}: added p50 {pct(a, 50):.3f} ms, p99 {pct(a, 99):.3f} ms "
              f"({(direct_p50 + pct(a, 50)) / direct_p50:.2f}x direct's p50)")
    print(f"replay messages: {counts}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--echo":
        serve_echo(Path(sys.argv[2]))
    else:
        main()
