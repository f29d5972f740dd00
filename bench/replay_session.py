"""Latency a replay adds to a long agent session, against a direct connection.

A 50-turn agent-shaped session (OpenAI chat requests that resend the whole
conversation, bodies growing from about 10 KiB to about 1 MiB, a bearer key
in ``Authorization``) is sent to a raw HTTP/1.1 upstream (its own process):

  direct   client -> upstream, the session sent ROUNDS times
  record   client -> ``wiretape serve --record`` -> upstream, once
  replay   client -> ``wiretape serve --replay`` (no upstream), ROUNDS times,
           a fresh ``serve`` each round (a replay serves its tape once)

Each request's round trip is timed with one keep-alive httpx client. The
added latency of request ``i`` in a replay round is its round trip minus
the median of request ``i``'s direct round trips. Prints p50 and p99 of the
added latency (ms) over every replayed request, the replay's verdict kinds
(every request must be ``exact``; ``equivalent`` with ``--fresh-ids``), and
the same figures for the largest requests alone. The redaction scan of each
live request (``redact_request``, timed in this process with the
``wiretape`` on ``sys.path``) is shown apart, and the added latency less
it: what the rest of the replay adds.

With ``--without-scan`` the replaying process skips the redaction scan of
live text (the session holds no secret in its bodies, so every decision is
the same): what the rest of the replay adds, measured apart from the
scanner.

Usage: python bench/replay_session.py [--turns N] [--rounds N] [--max-kib N]
                                      [--without-scan]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
from common import pct, upstream, wiretape

ANSWER = (b'{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,'
          b'"message":{"role":"assistant","content":"done"},"finish_reason":"stop"}],'
          b'"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}')
KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2
SESSION_ID = "0190b2a1-1111-7000-8000-000000000001"
LIVE_SESSION_ID = "0190b2a1-9c2e-7000-8000-00000000f00d"


#: ``python -m wiretape`` with a redaction scan that finds nothing (the
#: header rules still apply): the session's bodies hold no secret, so the
#: decisions are the same.
WITHOUT_SCAN = """
import sys
import wiretape.redaction as redaction
redaction.redact_text = lambda data, location, rules=None, facts=None: (data, [])
from wiretape.cli.main import main
sys.argv[0] = "wiretape"
main()
"""


def session(turns: int, min_bytes: int, max_bytes: int, user: str = "") -> list[bytes]:
    """The request bodies of an agent session: each turn resends the whole
    conversation plus a tool call and its (large) result, growing
    geometrically from ``min_bytes`` to ``max_bytes``."""
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are a coding agent. " * 40},
        {"role": "user", "content": "Fix the failing test in the repository."},
    ]
    bodies: list[bytes] = []
    for turn in range(turns):
        target = int(min_bytes * (max_bytes / min_bytes) ** (turn / max(1, turns - 1)))

        def body() -> bytes:
            return json.dumps({"model": "gpt-4o", "user": user or SESSION_ID,
                               "messages": messages, "stream": False,
                               "tools": [{"type": "function", "function": {
                                   "name": "read_file", "parameters": {"type": "object"}}}]},
                              separators=(",", ":")).encode()

        current = len(body())
        if current < target:
            call = f"call_{turn:04d}"
            filler = "".join(f"line {n}: def function_{turn}_{n}(x):\\n    return x + {n}\n"
                             for n in range((target - current) // 48 + 1))
            arguments = json.dumps({"path": f"f{turn}"})
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": call, "type": "function",
                 "function": {"name": "read_file", "arguments": arguments}}]})
            messages.append({"role": "tool", "tool_call_id": call,
                             "content": filler[: max(0, target - current - 200)]})
        bodies.append(body())
    return bodies


def send_session(client: httpx.Client, base: str, bodies: list[bytes]) -> list[float]:
    """Round trip (ms) of each request of the session, in order."""
    out = []
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    for body in bodies:
        t = time.perf_counter_ns()
        response = client.post(base + "/v1/chat/completions", content=body, headers=headers)
        response.read()
        out.append((time.perf_counter_ns() - t) / 1e6)
        if response.status_code != 200:
            raise SystemExit(f"{base}: HTTP {response.status_code}: {response.text[:300]}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-kib", type=int, default=10)
    parser.add_argument("--max-kib", type=int, default=1024)
    parser.add_argument("--without-scan", action="store_true",
                        help="in the replaying process only, redact_text finds nothing: what "
                             "the rest of the replay adds, the redaction scanner apart")
    parser.add_argument("--in-process", action="store_true",
                        help="also time the replayer's own work per request in this process "
                             "(redact, decide, log; the answer written to a null connection)")
    parser.add_argument("--fresh-ids", action="store_true",
                        help="replay another run of the agent: its own session id in every "
                             "request (--allow ids; each decision is equivalent)")
    args = parser.parse_args()
    bodies = session(args.turns, args.min_kib * 1024, args.max_kib * 1024)
    # --fresh-ids: the replayed session is another run of the agent (its own
    # session id in every request): each decision is `equivalent` (ids).
    live = (session(args.turns, args.min_kib * 1024, args.max_kib * 1024, LIVE_SESSION_ID)
            if args.fresh_ids else bodies)
    allow = ["--allow", "ids"] if args.fresh_ids else []
    tmp = Path(tempfile.mkdtemp(prefix="wiretape-bench-"))
    state = {**os.environ, "XDG_STATE_HOME": str(tmp / "state")}
    with upstream(ANSWER) as direct_url:
        run = tmp / "session.wtape"
        direct: list[list[float]] = []
        with httpx.Client(timeout=120) as client:
            send_session(client, direct_url, bodies[:3])  # warm-up
            for _ in range(args.rounds):
                direct.append(send_session(client, direct_url, bodies))
        rec = wiretape(["serve", "--record", "--upstream", direct_url + "/v1", "-o", str(run)],
                       env=state)
        with httpx.Client(timeout=120) as client:
            send_session(client, rec.url, bodies)
        rec.stop()
    replayed: list[list[float]] = []
    kinds: Counter[str] = Counter()
    replaying = [sys.executable, "-c", WITHOUT_SCAN] if args.without_scan else None
    for _ in range(args.rounds):
        rep = wiretape(["serve", "--replay", str(run), "--diagnostic", *allow, "--json"],
                       command=replaying, env=state)
        with httpx.Client(timeout=120) as client:
            replayed.append(send_session(client, rep.url, live))
        rep.stop()
        kinds.update(_kinds(rep.out))
    base = [statistics.median(d[i] for d in direct) for i in range(len(bodies))]
    added = [r[i] - base[i] for r in replayed for i in range(len(bodies))]
    big = [r[i] - base[i] for r in replayed for i in range(len(bodies))
           if len(bodies[i]) >= len(bodies[-1]) // 2]
    scans = scan_times(bodies)
    rest = [r[i] - base[i] - scans[i] for r in replayed for i in range(len(bodies))]
    sizes = [len(b) for b in bodies]
    print(f"session: {len(bodies)} requests, {sizes[0] / 1024:.0f} KiB -> "
          f"{sizes[-1] / 1024:.0f} KiB ({sum(sizes) / 2**20:.1f} MiB in all); "
          f"{args.rounds} rounds")
    print(f"direct round trip  p50 {statistics.median(x for d in direct for x in d):8.3f} ms")
    print(f"replay round trip  p50 {statistics.median(x for r in replayed for x in r):8.3f} ms")
    print(f"replay added       p50 {statistics.median(added):8.3f} ms   "
          f"p99 {pct(added, 99):8.3f} ms   (per request, direct subtracted)")
    print(f"  requests >= {sizes[-1] // 2048} KiB: p50 {statistics.median(big):8.3f} ms   "
          f"p99 {pct(big, 99):8.3f} ms   ({len(big)} requests)")
    if args.without_scan:
        print("(replayed without the redaction scan of live text: --without-scan)")
    print(f"redaction scan of the live request (in this process, same code): "
          f"p50 {statistics.median(scans):8.3f} ms   max {max(scans):8.3f} ms")
    if not args.without_scan:
        print(f"replay added less that scan p50 {statistics.median(rest):8.3f} ms   "
              f"p99 {pct(rest, 99):8.3f} ms")
    print(f"replay decisions: {dict(kinds)}")
    if args.in_process:
        own = [t for _ in range(args.rounds)
               for t in asyncio.run(replayer_times(run, live, args.without_scan,
                                                   args.fresh_ids))]
        print(f"replayer's own work (in process, no sockets): p50 {statistics.median(own):8.3f} "
              f"ms   p99 {pct(own, 99):8.3f} ms   ({len(own)} requests)")
    shutil.rmtree(tmp, ignore_errors=True)


class _NullConnection:
    """Where the in-process replayer writes its answers: nowhere."""

    async def send_head(self, *_args: object, **_kwargs: object) -> None:
        pass

    async def send_data(self, *_args: object, **_kwargs: object) -> None:
        pass

    async def flush(self) -> None:
        pass

    async def end(self) -> None:
        pass

    async def abort(self) -> None:
        pass


async def replayer_times(run: Path, bodies: list[bytes], without_scan: bool,
                         fresh_ids: bool = False) -> list[float]:
    """Each request's time (ms) in ``Replayer._answer`` of a fresh replay of
    ``run``, as ``serve --replay --diagnostic`` makes it (the redactor of
    this environment); the log rows' writes are waited for at the end when
    the replayer writes them off the client's path."""
    import sys as _sys

    from wiretape import redaction
    from wiretape.launch.replay import live_redactor
    from wiretape.model import Request
    from wiretape.playback.decide import Mode, Policy
    from wiretape.proxy.replay import Replayer
    from wiretape.store.runfile import RunFile

    scan = redaction.redact_text
    if without_scan:
        redaction.redact_text = lambda data, location, rules=None, facts=None: (data, [])
    opened = RunFile.open(run, replay_logs=run.parent / "replays")
    try:
        opened.prepare_for_writes()
        allow = frozenset({"ids"}) if fresh_ids else frozenset()
        replayer = Replayer(opened, opened.exchanges(), Policy(mode=Mode.DIAGNOSTIC, allow=allow),
                            redactor=live_redactor(opened))
        opened.start_replay(replayer.replay_id, "diagnostic", {})  # type: ignore[typeddict-item]
        headers = ((b"Host", b"127.0.0.1"), (b"Authorization", f"Bearer {KEY}".encode()),
                   (b"Content-Type", b"application/json"))
        out = []
        for body in bodies:
            request = Request(b"POST", b"/v1/chat/completions",
                              (*headers, (b"Content-Length", str(len(body)).encode())), body)
            t = time.perf_counter_ns()
            await replayer._answer(_NullConnection(), request)  # type: ignore[arg-type]
            out.append((time.perf_counter_ns() - t) / 1e6)
        if hasattr(replayer, "finish"):
            await replayer.finish()
        kinds = Counter(row["kind"] for row in replayer.rows)
        if kinds != Counter({"equivalent" if fresh_ids else "exact": len(bodies)}):
            print(f"in-process replay decided {dict(kinds)}", file=_sys.stderr)
        return out
    finally:
        redaction.redact_text = scan
        opened.close()


def scan_times(bodies: list[bytes]) -> list[float]:
    """Per body: the median time (ms, of 3) ``redact_request`` takes on the
    live request, as the replay redacts it before comparing (the part of
    the replay's cost that is the redaction scanner's)."""
    from wiretape.model import Request
    from wiretape.redaction import STANDARD, redact_request

    out = []
    headers = ((b"Authorization", f"Bearer {KEY}".encode()),
               (b"Content-Type", b"application/json"))
    for body in bodies:
        request = Request(b"POST", b"/v1/chat/completions", headers, body)
        times = []
        for _ in range(3):
            t = time.perf_counter_ns()
            redact_request(request, STANDARD)
            times.append((time.perf_counter_ns() - t) / 1e6)
        out.append(statistics.median(times))
    return out


def _kinds(out: str) -> Counter[str]:
    """The decision kinds of a replay's verdict, as ``serve --json`` prints
    it on stdout after the URL line."""
    found: Counter[str] = Counter()
    start = 0 if out.startswith("{") else out.find("\n{") + 1
    if start <= 0 and not out.startswith("{"):
        return found
    verdict, _ = json.JSONDecoder().raw_decode(out[start:])
    for row in verdict.get("requests", []):
        found[str(row["kind"])] += 1
    return found


if __name__ == "__main__":
    main()
