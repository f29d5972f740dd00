"""Generic httpx client for a corpus fixture (``fixtures/corpus/<case>``) or
a raw request file (``cases/Bxx/request.http``).

Sends the recorded method, headers and body (``request.json``, or the raw
request file) to ``$ENV_VAR`` + ``--rest`` (the recorded path and query,
percent-encoding kept, after the origin's base path), streams the response
with ``iter_raw`` (no decoding), and prints the status, reason, headers in
order, the sha256 and length of the raw body, and the length of every raw
frame. The process does nothing else while reading, so its read times are
a clean measure of when bytes arrived.

Header adjustments, and why:
* ``Host`` is dropped: it names the recorded provider; httpx writes the
  host it connects to.
* ``Content-Length`` is dropped and recomputed by httpx: some sources
  rewrote the body without fixing the length, and a wrong length would
  desynchronise the connection.
* ``Connection`` / ``Keep-Alive`` / ``Transfer-Encoding`` are hop-by-hop
  framing that httpx manages itself.
* Every other header, ``Accept-Encoding`` included, is sent as recorded, in
  order and case. Nothing is added: no httpx default headers, so a request
  recorded without ``Accept-Encoding`` still goes without it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

import httpx
from _common import Timing, emit, exception_info, parse_request_file, timing_transport

DROP = {"host", "content-length", "connection", "keep-alive", "transfer-encoding"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("source", help="fixture directory (holds request.json), or a raw .http file")
    p.add_argument("--env", default="OPENAI_BASE_URL",
                   help="environment variable that holds the base URL (default OPENAI_BASE_URL)")
    p.add_argument("--rest", required=True,
                   help="path and query to append to the base URL, exactly as to be sent")
    p.add_argument("--timing-file")
    args = p.parse_args()
    src = Path(args.source)
    if src.is_dir():
        req = json.loads((src / "request.json").read_text())
        method = req["method"]
        headers = [(k, v) for k, v in req["headers"] if k.lower() not in DROP]
        body = req["body"].encode("utf-8") if req.get("body") is not None else b""
    else:
        line, raw_headers, body = parse_request_file(src)
        method = line.split(b" ")[0].decode("ascii")
        headers = [(k, v) for k, v in raw_headers if k.lower() not in DROP]
    base = os.environ[args.env].rstrip("/")
    timing = Timing()
    client = httpx.Client(transport=timing_transport(httpx, timing), timeout=60.0)
    obs = {"client": "raw_http", "status": None, "reason": None, "http_version": None,
           "headers": [], "body_sha256": None, "body_len": 0, "frames": [],
           "frames_sha256": None, "n_events": 0}
    exc = None
    h = hashlib.sha256()
    frame_h = hashlib.sha256()
    try:
        url = httpx.URL(base + args.rest)
        request = httpx.Request(method, url, headers=headers, content=body)
        resp = client.send(request, stream=True)
        try:
            obs["status"] = resp.status_code
            obs["reason"] = resp.reason_phrase
            obs["http_version"] = resp.http_version
            obs["headers"] = [[k.decode("latin-1"), v.decode("latin-1")]
                              for k, v in resp.headers.raw]
            for frame in resp.iter_raw():
                timing.event("frame")
                h.update(frame)
                frame_h.update(len(frame).to_bytes(8, "big") + frame)
                obs["frames"].append(len(frame))
                obs["body_len"] += len(frame)
        finally:
            resp.close()
    except Exception as e:
        exc = e
    obs["body_sha256"] = h.hexdigest()
    obs["frames_sha256"] = frame_h.hexdigest()
    obs["n_events"] = len(obs["frames"])
    obs["exception"] = exception_info(exc)
    emit(obs, timing, args.timing_file)


if __name__ == "__main__":
    main()
