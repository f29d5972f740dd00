"""One request with a body of SIZE bytes, then a small one, on ONE HTTP/2
connection: httpx with ``http2=True`` and ``http1=False`` (prior knowledge
over plain http), a pool of one connection, a 30 s timeout. Prints one line
per request: its HTTP version, status and the error code of a JSON error
body (``-`` when none); an exception is printed as ``error TYPE``.

    h2_oversized.py SIZE
"""

from __future__ import annotations

import json
import os
import sys

import httpx


def code_of(resp: httpx.Response) -> str:
    try:
        return str(resp.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return "-"


def main(size: int) -> int:
    base = os.environ["OPENAI_BASE_URL"].rstrip("/")
    small = json.dumps({"model": "gpt-4o-mini",
                        "messages": [{"role": "user", "content": "hi"}]}).encode()
    big = json.dumps({"model": "gpt-4o-mini",
                      "messages": [{"role": "user", "content": "x" * size}]}).encode()
    with httpx.Client(http1=False, http2=True, timeout=30,
                      limits=httpx.Limits(max_connections=1)) as client:
        for body in (big, small):
            try:
                resp = client.post(f"{base}/chat/completions", content=body,
                                   headers={"content-type": "application/json"})
            except httpx.HTTPError as exc:
                print(f"error {type(exc).__name__}", flush=True)
                continue
            print(f"{resp.http_version} {resp.status_code} {code_of(resp)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
