"""N streaming chat requests at once on ONE HTTP/2 connection: httpx with
``http2=True`` and ``http1=False`` (prior knowledge over plain http), a
pool of one connection, every stream read to its end. Prints one line per
stream, in stream order: its number, HTTP version, status, SSE event count
and the sha256 of the body, so the output is the same however the streams
interleaved.

    h2_concurrent.py N
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys

import httpx


async def main(n: int) -> int:
    base = os.environ["OPENAI_BASE_URL"].rstrip("/")
    key = os.environ.get("OPENAI_API_KEY", "")
    async with httpx.AsyncClient(http1=False, http2=True, timeout=60,
                                 limits=httpx.Limits(max_connections=1)) as client:

        async def one(i: int) -> str:
            body = json.dumps({"model": "gpt-4o-mini", "stream": True,
                               "messages": [{"role": "user", "content": f"stream {i}"}]})
            async with client.stream("POST", f"{base}/chat/completions", content=body, headers={
                    "content-type": "application/json", "authorization": f"Bearer {key}"}) as resp:
                data = b"".join([chunk async for chunk in resp.aiter_raw()])
            return (f"stream {i}: {resp.http_version} {resp.status_code} "
                    f"{data.count(b'data: ')} events {hashlib.sha256(data).hexdigest()}")

        lines = await asyncio.gather(*(one(i) for i in range(n)))
    for line in lines:
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(int(sys.argv[1]))))
