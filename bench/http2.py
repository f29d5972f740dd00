"""What HTTP/2 from the agent costs next to HTTP/1.1, through ``wiretape
serve --record``, in one run.

The bench's raw HTTP/1.1 upstream (its own process) answers every request
with one small JSON body. One ``wiretape serve --record`` process forwards
to it. Three paths, with the same client library (httpx, async):

- ``direct``: HTTP/1.1 to the upstream (the baseline);
- ``h1``: HTTP/1.1 keep-alive through wiretape;
- ``h2``: HTTP/2 prior knowledge through wiretape (one connection).

Part 1 sends small exchanges one at a time, the paths interleaved round by
round; a figure is added time (the path's quantile minus direct's). Part 2
sends batches of 8 concurrent requests (``h1``: up to 8 connections;
``h2``: 8 streams on one connection) and times each batch whole. The h2
figures include httpx's own HTTP/2 client work, which the h1 ones do not.

    .venv/bin/python bench/http2.py            # --rounds N (default 300)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import httpx
from common import pct, upstream, wiretape

BODY = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})
ANSWER = json.dumps({"id": "chatcmpl-1", "object": "chat.completion",
                     "choices": [{"index": 0, "message": {"role": "assistant",
                                                          "content": "Hello."}}]}).encode()


async def one(client: httpx.AsyncClient, url: str) -> float:
    t0 = time.perf_counter()
    resp = await client.post(url, content=BODY, headers={"content-type": "application/json"})
    resp.raise_for_status()
    return time.perf_counter() - t0


async def batch(client: httpx.AsyncClient, url: str) -> float:
    t0 = time.perf_counter()
    await asyncio.gather(*(one(client, url) for _ in range(8)))
    return time.perf_counter() - t0


async def measure(direct: str, proxied: str, rounds: int) -> dict[str, dict[str, float]]:
    clients = {
        "direct": (httpx.AsyncClient(limits=httpx.Limits(max_connections=8)), direct),
        "h1": (httpx.AsyncClient(limits=httpx.Limits(max_connections=8)), proxied),
        "h2": (httpx.AsyncClient(http1=False, http2=True,
                                 limits=httpx.Limits(max_connections=1)), proxied),
    }
    small: dict[str, list[float]] = {name: [] for name in clients}
    batches: dict[str, list[float]] = {name: [] for name in clients}
    names = list(clients)
    for client, url in clients.values():  # warm: connections made, code loaded
        await batch(client, url + "/v1/chat/completions")
    for r in range(rounds):
        order = names[r % 3:] + names[:r % 3]
        for name in order:
            client, url = clients[name]
            small[name].append(await one(client, url + "/v1/chat/completions"))
        if r % 5 == 0:
            for name in order:
                client, url = clients[name]
                batches[name].append(await batch(client, url + "/v1/chat/completions"))
    for client, _ in clients.values():
        await client.aclose()
    base50, base99 = pct(small["direct"], 50), pct(small["direct"], 99)
    out: dict[str, dict[str, float]] = {}
    for name in ("h1", "h2"):
        out[name] = {
            "added_p50_ms": (pct(small[name], 50) - base50) * 1e3,
            "added_p99_ms": (pct(small[name], 99) - base99) * 1e3,
            "batch8_p50_ms": pct(batches[name], 50) * 1e3,
            "batch8_over_direct": pct(batches[name], 50) / pct(batches["direct"], 50),
        }
    out["direct"] = {"p50_ms": base50 * 1e3, "batch8_p50_ms": pct(batches["direct"], 50) * 1e3}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    with upstream(ANSWER) as direct, tempfile.TemporaryDirectory() as tmp:
        proc = wiretape(["serve", "--record", "--upstream", direct + "/v1",
                         "-o", str(Path(tmp) / "bench.wtape")])
        try:
            figures = asyncio.run(measure(direct, proc.url, args.rounds))
        finally:
            proc.stop()
    h1, h2 = figures["h1"], figures["h2"]
    figures["ratio"] = {"added_p50_h2_over_h1": h2["added_p50_ms"] / h1["added_p50_ms"],
                        "batch8_h2_over_h1": h2["batch8_p50_ms"] / h1["batch8_p50_ms"]}
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
