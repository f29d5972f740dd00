"""The recorder's upstream client alone: a small JSON exchange sent with
``wiretape.proxy.upstream`` and with httpx's transport (as the recorder
used it before: a request built with ``httpx.URL`` and ``httpx.Request``
per exchange, ``AsyncHTTPTransport`` with raw streaming), measured in one
run against the bench upstream (its own process, ``common.upstream``).

Exchanges alternate between the two clients (the order flipping each
round), each on its own keep-alive connection, so a noisy machine slows
both alike. Prints each client's p50 and p99 (µs per exchange: request
sent, response read whole, connection given back) and the ratio.

    .venv/bin/python bench/upstream_client.py            # --rounds N (default 3000)
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

import httpx
from common import SMALL_REQUEST, pct, upstream

from wiretape.model import Request
from wiretape.proxy import upstream as client
from wiretape.proxy.hop import upstream_request_headers

HEADERS = ((b"Host", b"127.0.0.1"), (b"Accept", b"application/json"),
           (b"Content-Type", b"application/json"),
           (b"Content-Length", b"%d" % len(SMALL_REQUEST)),
           (b"User-Agent", b"OpenAI/Python 1.108.0"), (b"X-Stainless-Lang", b"python"),
           (b"Authorization", b"Bearer sk-proj-benchbenchbenchbenchbench0123456789"))
REQUEST = Request(b"POST", b"/v1/small", HEADERS, SMALL_REQUEST)


async def main(url: str, rounds: int) -> None:
    host = url.removeprefix("http://")
    ours = client.new_client()
    theirs = httpx.AsyncHTTPTransport(
        trust_env=False, limits=httpx.Limits(max_connections=200, max_keepalive_connections=50))

    async def wiretape_client() -> None:
        response = await ours.send(client.build_request(url, host, REQUEST))
        async for _ in response.aiter_raw():
            pass
        await response.aclose()

    async def httpx_transport() -> None:
        root = httpx.URL(url)
        headers = upstream_request_headers(REQUEST.headers, host.encode(), len(REQUEST.body))
        request = httpx.Request("POST", root.copy_with(raw_path=REQUEST.target),
                                headers=list(headers), content=REQUEST.body)
        request.extensions["timeout"] = httpx.Timeout(30.0, read=900.0).as_dict()
        response = await theirs.handle_async_request(request)
        async for _ in response.aiter_raw():
            pass
        await response.aclose()

    paths: dict[str, Callable[[], Awaitable[None]]] = {
        "httpx transport": httpx_transport, "wiretape client": wiretape_client}
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(100):  # connections open, code paths warm
        for send in paths.values():
            await send()
    for i in range(rounds):
        for name in (list(paths) if i % 2 else list(reversed(paths))):
            start = time.perf_counter_ns()
            await paths[name]()
            times[name].append((time.perf_counter_ns() - start) / 1e3)
    await ours.aclose()
    await theirs.aclose()
    for name, values in times.items():
        print(f"{name:16}  p50 {statistics.median(values):8.0f} µs   "
              f"p99 {pct(values, 99):8.0f} µs")
    before, after = (statistics.median(times[n]) for n in paths)
    print(f"wiretape client / httpx transport, p50: {after / before:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3000, help="exchanges per client")
    args = parser.parse_args()
    with upstream() as base:
        asyncio.run(main(base, args.rounds))
