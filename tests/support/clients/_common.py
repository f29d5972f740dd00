"""Shared plumbing for the client scripts.

Each script is a tiny "agent": it sends exactly one case's request with a
real SDK whose base URL comes from the environment, and prints ONE JSON line
on stdout describing what the SDK observed (text, tool calls, stop reason,
usage, exception, event count).

Timing goes beside that line: every HTTP attempt is timed by a transport
wrapper (request start, response head, and each raw body read with its
length), and each SDK event gets a receive time. All stamps are
``time.monotonic_ns()`` (CLOCK_MONOTONIC, shared by all processes on the
machine, so a test can compare them with the upstream's write times).

* ``--timing-file PATH``: timing is written there as JSON and stdout carries
  only the deterministic observation. Use this under ``wiretape record`` /
  ``replay``: the printed line is then part of the agent's outcome and must
  be the same in both.
* without it, the observation carries a ``timing`` key.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any


def parse_request_file(path: str | os.PathLike) -> tuple[bytes, list[tuple[str, str]], bytes]:
    """(request line, headers, body) of a raw ``request.http`` file."""
    raw = Path(path).read_bytes()
    end = raw.index(b"\r\n\r\n")
    lines = raw[:end].split(b"\r\n")
    headers = []
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        headers.append((k.decode("latin-1"), v.strip().decode("latin-1")))
    rest = raw[end + 4 :]
    n = next((int(v) for k, v in headers if k.lower() == "content-length"), len(rest))
    return lines[0], headers, rest[:n]


def request_json(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON body of a request file, keys in their original order."""
    return json.loads(parse_request_file(path)[2])


class Timing:
    """Collects attempt and event timestamps."""

    def __init__(self) -> None:
        self.t0_ns = time.monotonic_ns()
        self.attempts: list[dict[str, Any]] = []
        self.events_ns: list[int] = []
        self.event_labels: list[str] = []

    def event(self, label: str = "") -> None:
        self.events_ns.append(time.monotonic_ns())
        self.event_labels.append(label)

    def as_dict(self) -> dict[str, Any]:
        t0 = self.attempts[0]["t_start_ns"] if self.attempts else self.t0_ns
        return {
            "t0_ns": t0,
            "events_ns": self.events_ns,
            "events_ms": [round((t - t0) / 1e6, 3) for t in self.events_ns],
            "event_labels": self.event_labels,
            "attempts": self.attempts,
        }


def timing_transport(mod: Any, timing: Timing, *, exact_body: bytes | None = None,
                     **transport_kwargs: Any) -> Any:
    """A transport for ``mod`` (``httpx`` or an httpx-compatible fork) that
    wraps the default one and timestamps each raw body read. It changes no
    byte of the response.

    ``exact_body``: the case's recorded request body. SDKs serialise their
    parameters in their own key order, which differs between SDK versions;
    to send the case's exact bytes, the body the SDK built is replaced by
    ``exact_body`` -- only after checking that both parse to the same JSON
    value (so the request means exactly what the SDK meant to send).
    Everything else (headers, retries, response handling) stays the SDK's.
    """

    class TimedStream(mod.SyncByteStream):
        """Reads the raw body in a thread as soon as bytes arrive, stamping
        each read, and hands the same chunks (and the same exception, at the
        same point) to the SDK. Arrival times are thus not delayed by the
        SDK's own processing of earlier events."""

        def __init__(self, inner: Any, attempt: dict[str, Any]) -> None:
            self._inner = inner
            self._attempt = attempt
            self._reads = attempt["reads"]
            self._queue: queue.Queue = queue.Queue()
            self._closed = False
            self._thread = threading.Thread(target=self._pump, daemon=True)
            self._thread.start()

        def _pump(self) -> None:
            digest = hashlib.sha256()
            n = 0
            final: tuple[str, Any] = ("end", None)
            try:
                for chunk in self._inner:
                    self._reads.append([time.monotonic_ns(), len(chunk)])
                    digest.update(chunk)
                    n += len(chunk)
                    self._queue.put(("data", chunk))
                    if self._closed:
                        break
            except BaseException as e:
                self._attempt["raw_error"] = f"{type(e).__name__}: {e}"
                final = ("error", e)
            self._attempt["raw_sha256"] = digest.hexdigest()
            self._attempt["raw_len"] = n
            self._attempt["t_end_ns"] = time.monotonic_ns()
            self._queue.put(final)

        def __iter__(self):
            while True:
                kind, value = self._queue.get()
                if kind == "data":
                    yield value
                elif kind == "error":
                    raise value
                else:
                    return

        def close(self) -> None:
            self._closed = True
            self._thread.join(0.5)
            self._inner.close()

    class TimedTransport(mod.BaseTransport):
        def __init__(self) -> None:
            self._inner = mod.HTTPTransport(**transport_kwargs)

        def handle_request(self, request: Any) -> Any:
            body = request.read()
            sdk_sha = hashlib.sha256(body).hexdigest()
            if exact_body is not None and body != exact_body:
                if json.loads(body) != json.loads(exact_body):
                    raise SystemExit(
                        "client: the SDK built a request body that differs in meaning from the "
                        f"case's request body:\n{body[:2000]!r}\n{exact_body[:2000]!r}")
                request.headers["Content-Length"] = str(len(exact_body))
                request.stream = mod.ByteStream(exact_body)
                request._content = exact_body
                body = exact_body
            attempt: dict[str, Any] = {
                "t_start_ns": time.monotonic_ns(),
                "method": request.method,
                "url": str(request.url),
                "body_len": len(body),
                "body_sha256": hashlib.sha256(body).hexdigest(),
                "sdk_body_sha256": sdk_sha,
                "headers": [[k.decode("latin-1"), v.decode("latin-1")]
                            for k, v in request.headers.raw],
                "reads": [],
            }
            timing.attempts.append(attempt)
            try:
                resp = self._inner.handle_request(request)
            except Exception as e:
                attempt["error"] = f"{type(e).__name__}: {e}"
                raise
            attempt["t_headers_ns"] = time.monotonic_ns()
            attempt["status"] = resp.status_code
            reason = resp.extensions.get("reason_phrase", b"")
            attempt["reason"] = reason.decode("latin-1") if isinstance(reason, bytes) else reason
            attempt["response_headers"] = [[k.decode("latin-1"), v.decode("latin-1")]
                                           for k, v in resp.headers.raw]
            resp.stream = TimedStream(resp.stream, attempt)
            return resp

        def close(self) -> None:
            self._inner.close()

    return TimedTransport()


def exception_info(e: BaseException | None) -> dict[str, str] | None:
    if e is None:
        return None
    t = type(e)
    info = {"type": t.__name__, "module": t.__module__.split(".")[0], "message": str(e)}
    status = getattr(e, "status_code", None)
    if status is not None:
        info["status_code"] = status
    return info


def base_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("case", help="case directory (holds request.http)")
    p.add_argument("--request", default="request.http",
                   help="request file inside the case directory (default request.http)")
    p.add_argument("--timing-file", help="write timing JSON here instead of into stdout")
    p.add_argument("--body", choices=("exact", "sdk"), default="exact",
                   help="exact: send the request file's body bytes (the SDK's body must mean "
                        "the same JSON); sdk: send the SDK's own serialisation")
    return p


def exact_body(args: argparse.Namespace) -> bytes | None:
    """The case's body bytes to send, or None to send the SDK's own."""
    if args.body == "sdk":
        return None
    return parse_request_file(os.path.join(args.case, args.request))[2]


def emit(observation: dict[str, Any], timing: Timing, timing_file: str | None) -> None:
    """Print the one JSON line; write timing aside if asked."""
    data = timing.as_dict()
    observation = {"wiretape_client": observation.pop("client"), **observation}
    observation["attempts"] = len(timing.attempts)
    if timing_file:
        Path(timing_file).write_text(json.dumps(data))
    else:
        observation["timing"] = data
    sys.stdout.write(json.dumps(observation, ensure_ascii=False, sort_keys=True) + "\n")
    sys.stdout.flush()


def jsonable(value: Any) -> Any:
    """A pydantic model / object as plain JSON data."""
    if value is None:
        return None
    dump = getattr(value, "model_dump", None)
    if dump is not None:
        return dump(mode="json", exclude_unset=True)
    return value
