"""Latency wiretape adds while recording an agent-shaped conversation, and the
size of the run file it makes, against a direct connection in the same run.

An agent resends its whole conversation each turn: request bodies are JSON
chat requests that grow turn by turn. A raw HTTP/1.1 upstream (its own
process) reads each body and answers a small JSON completion at once; one
keep-alive httpx client per path sends the same sequence of bodies, the two
paths alternating turn by turn so that load on the machine hits both alike:

  direct   client -> upstream
  record   client -> ``wiretape serve --record`` -> upstream

Two sessions: ``--turns`` requests of about ``--size`` bytes each (growing by
``--step`` bytes a turn: the latency figures), then a 50-turn session whose
requests grow from 10 KiB to 1 MiB (the run file's size against the raw
bytes it holds). Prints the median and p90 round trip per path and what
recording adds, then the stored body bytes as a share of the raw bytes.

``--compare-with SRC`` adds a third path, ``record-other``: the same
``wiretape serve --record`` run from another source tree (its ``src``
folder put first on PYTHONPATH), to compare two versions under one load.

Usage: python bench/record_growing.py [--turns N] [--size BYTES] [--step BYTES]
                                      [--compare-with SRC]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from common import Proc, upstream, wiretape

ANSWER = (b'{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,'
          b'"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}]}')

_WORDS = (
    "the", "file", "function", "return", "value", "error", "test", "line", "module", "import",
    "class", "def", "self", "data", "request", "response", "body", "header", "stream", "frame",
    "token", "model", "agent", "tool", "call", "result", "path", "config", "build", "run",
    "check", "status", "output", "input", "print", "list", "dict", "string", "bytes", "number",
    "index", "count", "time", "wait", "done", "open", "close", "read", "write",
)


class Conversation:
    """A chat conversation whose request grows: each turn appends a user
    message and a tool result of pseudo-random prose."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._messages: list[dict[str, str]] = [
            {"role": "system", "content": "You are a coding agent. " * 20}]

    def _text(self, n: int) -> str:
        out: list[str] = []
        size = 0
        while size < n:
            word = self._rng.choice(_WORDS)
            out.append(word)
            size += len(word) + 1
        return " ".join(out)

    def grow(self, step: int) -> None:
        self._messages.append({"role": "user", "content": self._text(step // 4)})
        self._messages.append({"role": "tool", "content": self._text(step - step // 4)})

    def body(self) -> bytes:
        return json.dumps({"model": "gpt-4o", "stream": False,
                           "messages": self._messages}).encode()


def session(paths: dict[str, str], bodies: list[bytes]) -> dict[str, list[float]]:
    """Round trips (ms) per path, the paths alternating turn by turn."""
    times: dict[str, list[float]] = {name: [] for name in paths}
    clients = {name: httpx.Client(timeout=60) for name in paths}
    try:
        for body in bodies:
            for name, base in paths.items():
                t = time.perf_counter_ns()
                resp = clients[name].post(base + "/v1/chat/completions", content=body,
                                          headers={"content-type": "application/json"})
                resp.read()
                times[name].append((time.perf_counter_ns() - t) / 1e6)
                assert resp.status_code == 200, resp.text
    finally:
        for client in clients.values():
            client.close()
    return times


def bodies_growing(start_size: int, step: int, turns: int, seed: int) -> list[bytes]:
    conv = Conversation(seed)
    while len(conv.body()) < start_size:
        conv.grow(min(step * 8, start_size - len(conv.body())) or step)
    out = []
    for _ in range(turns):
        conv.grow(step)
        out.append(conv.body())
    return out


def recorders(record: list[str], out: Path, other: str | None) -> dict[str, Proc]:
    """``wiretape serve --record`` to ``out``, and with ``other``, a second
    one run from the ``src`` folder ``other`` (its own run file beside)."""
    procs = {"record": wiretape([*record, "-o", str(out)])}
    if other is not None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([other, *filter(None, [env.get("PYTHONPATH")])])
        procs["record-other"] = wiretape(
            [*record, "-o", str(out.with_suffix(".other.wtape"))], env=env)
    return procs


def stored_share(run: Path) -> tuple[int, int, int]:
    """(stored body bytes, raw body bytes, file bytes) of a closed run."""
    from wiretape.store.runfile import open_run

    with open_run(run) as rf:
        return rf.stored_bytes(), rf.body_bytes(), run.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--size", type=int, default=300 * 1024)
    parser.add_argument("--step", type=int, default=2048)
    parser.add_argument("--compare-with", metavar="SRC",
                        help="also record with the wiretape package found in SRC")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="wiretape-bench-"))
    with upstream(ANSWER) as direct:
        record = ["serve", "--record", "--upstream", direct + "/v1"]

        # -- latency at about --size bytes
        warm = bodies_growing(4096, 1024, 5, seed=1)
        bodies = bodies_growing(args.size - args.turns * args.step // 2, args.step, args.turns,
                                seed=2)
        procs = recorders(record, tmp / "latency.wtape", args.compare_with)
        paths = {"direct": direct, **{name: proc.url for name, proc in procs.items()}}
        try:
            session(paths, warm)
            times = session(paths, bodies)
        finally:
            for proc in procs.values():
                proc.stop(timeout=60)
        sizes = [len(b) for b in bodies]
        print(f"{args.turns} turns, request bodies {min(sizes) / 1024:.0f}-"
              f"{max(sizes) / 1024:.0f} KiB (growing {args.step} bytes a turn), round trip:")
        base = statistics.median(times["direct"])
        for name in paths:
            med = statistics.median(times[name])
            p90 = statistics.quantiles(times[name], n=10)[-1]
            print(f"  {name:12s} p50 {med:8.3f} ms  p90 {p90:8.3f} ms   (+{med - base:.3f} ms p50)")
        for name in procs:
            added = [r - d for r, d in zip(times[name], times["direct"], strict=True)]
            print(f"  {name} - direct, paired by turn: p50 {statistics.median(added):.3f} ms"
                  f"  p90 {statistics.quantiles(added, n=10)[-1]:.3f} ms")

        # -- the 50-turn session's run file
        growing = [10 * 1024 + i * (1024 * 1024 - 10 * 1024) // 49 for i in range(50)]
        conv, fifty = Conversation(3), []
        for target in growing:
            while len(conv.body()) < target:
                conv.grow(min(8192, target - len(conv.body()) + 64))
            fifty.append(conv.body())
        run = tmp / "fifty.wtape"
        procs = recorders(record, run, args.compare_with)
        try:
            t0 = time.perf_counter()
            session({name: proc.url for name, proc in procs.items()}, fifty)
            sent = time.perf_counter() - t0
        finally:
            for proc in procs.values():
                proc.stop(timeout=60)
        for name, path in (("record", run), ("record-other", run.with_suffix(".other.wtape"))):
            if name not in procs:
                continue
            stored, raw, file_bytes = stored_share(path)
            print(f"50-turn session, {name} (requests 10 KiB -> 1 MiB, "
                  f"{sum(map(len, fifty)) / 2**20:.1f} MiB sent in {sent:.2f} s): stored body "
                  f"bytes {stored} of {raw} raw = {100 * stored / raw:.2f} %; run file "
                  f"{file_bytes} bytes = {100 * file_bytes / raw:.2f} %")


if __name__ == "__main__":
    main()
