"""A client on plain httpx: one streamed chat completion read with
``iter_raw``, each piece as it came off the connection. The base URL comes
from OPENAI_BASE_URL. Prints the pieces (latin-1 text) and their count as one
JSON line; with ``--timing`` also each piece's arrival in seconds after the
first byte of the response (for the no-buffering test; the bytes of stdout
then vary run to run)."""

from __future__ import annotations

import json
import os
import sys
import time

import httpx


def main() -> None:
    timing = "--timing" in sys.argv[1:]
    body = {
        "model": "gpt-4o-mini",
        "stream": True,
        "messages": [{"role": "user", "content": "Count to five, slowly."}],
    }
    url = os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions"
    headers = {"authorization": f"Bearer {os.environ.get('OPENAI_API_KEY', '')}"}
    frames: list[str] = []
    arrivals: list[float] = []
    with (
        httpx.Client(timeout=30, trust_env=False) as client,
        client.stream("POST", url, json=body, headers=headers) as response,
    ):
        started = time.monotonic()
        for piece in response.iter_raw():
            arrivals.append(time.monotonic() - started)
            frames.append(piece.decode("latin-1"))
        observed = {
            "client": "httpx",
            "status": response.status_code,
            "content_type": response.headers.get("content-type"),
            "frames": frames,
            "count": len(frames),
        }
    if timing:
        observed["arrivals"] = arrivals
    print(json.dumps(observed, sort_keys=True))


if __name__ == "__main__":
    main()
