"""A client for the proxy-edge tests: N streaming requests at once, each on
its own connection (a thread each, started together at a barrier), every
stream read to its end. Prints one line per stream, in stream order: its
number, status, frame count and the sha256 of the body, so the output is
the same however the streams interleaved.

    concurrent_streams.py N FRAMES GAP_MS
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading

import httpx


def main() -> None:
    n, frames, gap = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    base = os.environ["OPENAI_BASE_URL"].rstrip("/")
    barrier = threading.Barrier(n)
    results: dict[int, str] = {}

    def one(i: int) -> None:
        body = json.dumps({"stream": i, "stream_options": {"include_usage": True}})
        with httpx.Client(timeout=60) as client:
            barrier.wait()
            with client.stream("POST", f"{base}/chat/completions?frames={frames}&gap_ms={gap}",
                               content=body, headers={"Content-Type": "application/json"}) as resp:
                data = b"".join(resp.iter_raw())
        results[i] = (f"stream {i}: {resp.status_code} {data.count(b'data: ')} frames "
                      f"{hashlib.sha256(data).hexdigest()}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(n):
        print(results.get(i, f"stream {i}: failed"), flush=True)
    sys.exit(0 if len(results) == n else 1)


if __name__ == "__main__":
    main()
