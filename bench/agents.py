"""Agent-shaped benchmark: what wiretape adds, against a direct connection
and against mitmproxy, measured in one run.

One raw HTTP/1.1 upstream runs in its own process; ``wiretape serve`` and
``mitmdump`` run in theirs, as an agent would meet them. The client is a
plain keep-alive socket (no HTTP library in the measured path). Every
measurement interleaves the paths round by round (the order rotating), so
a noisy machine slows them alike; figures are "added" milliseconds (path
minus direct, measured in the same run) and ratios.

  1. small JSON exchanges: added p50 and p99 per exchange;
  2. a 50-turn agent session (OpenAI chat JSON, the whole conversation with
     tool calls and tool results resent each turn, a ``tools`` list; bodies
     growing from ~10 KiB to ~1 MiB; sequential, keep-alive), recorded by a
     fresh ``wiretape serve --record`` per session: added p50 over all turns
     (paired with the same turn sent direct) and over the turns of
     240-375 KiB (the "300 KiB agent-shaped request");
  3. SSE streams of 200 frames, the upstream stamping each frame with its
     send time: per-frame send-to-arrival added p50 and p99;
  4. 64 concurrent SSE streams: the same per-frame figures;
  5. the sessions replayed by ``wiretape serve --replay`` of their run files:
     added p50 per request;
  6. mitmproxy (``mitmdump --mode reverse:... -w FILE``) recording the small
     exchanges and the sessions: wiretape added / mitmproxy added;
  7. the floors, on the small exchanges, the sessions and the single
     streams: a bare asyncio TCP relay (``common.relay``: bytes piped,
     nothing parsed or stored), the least any asyncio proxy in Python adds
     here; and the HTTP floor (``common.relay(url, http=True)``: h11 on
     both sides, every event passed on as it arrives, nothing stored), the
     least a Python proxy that parses HTTP/1.1 with h11 adds.

Then, each in a pass of its own: the run file's size as a share of the
session's raw bytes; the peak RSS growth of ``wiretape serve --record``
recording one 200 MiB streamed response; the longest the wiretape event loop
was blocked (``bench/loopwatch.py``: each callback timed, threshold 1 ms;
``--loop-debug``: asyncio's debug mode's slow-callback warnings instead)
while recording and replaying the same traffic; the start
time of ``wiretape --help``; the time of ``wiretape check -j 2`` on 1,000
copies of a tiny recorded run (stopped after ``--check-budget`` seconds and
extrapolated from the runs done, then shown as an estimate).

Prints one table (figure, value, target, PASS/MISS); ``--json FILE`` writes
the figures as JSON too.

Usage: python bench/agents.py [--quick] [--json FILE] [--mitmdump PATH] ...
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import HERE, KIB, MIB, SMALL_REQUEST, Proc, pct, relay, session, upstream, wiretape

HEADERS = {
    "Accept": "application/json",
    "Content-Type": "application/json",
    "User-Agent": "OpenAI/Python 1.108.0",
    "X-Stainless-Lang": "python",
    "X-Stainless-Package-Version": "1.108.0",
    "X-Stainless-Runtime": "CPython",
    "X-Stainless-Retry-Count": "0",
    "Authorization": "Bearer sk-proj-benchbenchbenchbenchbenchbenchbench0123456789",
}
#: How the table names the HTTP floor (``common.relay(url, http=True)``).
HTTP_FLOOR = "HTTP floor (h11 relay, nothing stored)"
#: Turns whose request body is within these bytes are "the 300 KiB requests".
AROUND_300K = (240 * KIB, 375 * KIB)

# ----------------------------------------------------------------- the client


class Dechunk:
    """Incremental decoder of a chunked body."""

    def __init__(self) -> None:
        self.buf = b""
        self.left = 0
        self.crlf = False
        self.done = False
        self.last = False

    def feed(self, data: bytes) -> bytes:
        self.buf += data
        out = bytearray()
        while not self.done:
            if self.left:
                take = self.buf[: self.left]
                out += take
                self.buf = self.buf[len(take):]
                self.left -= len(take)
                if self.left:
                    break
                self.crlf = True
            if self.crlf or self.last:
                if len(self.buf) < 2:
                    break
                self.buf = self.buf[2:]
                self.crlf = False
                if self.last:
                    self.done = True
                    break
            i = self.buf.find(b"\r\n")
            if i < 0:
                break
            size = int(self.buf[:i].split(b";")[0], 16)
            self.buf = self.buf[i + 2:]
            if size == 0:
                self.last = True
            else:
                self.left = size
        return bytes(out)


def split_head(buf: bytes) -> tuple[int, dict[str, str], bytes] | None:
    i = buf.find(b"\r\n\r\n")
    if i < 0:
        return None
    lines = buf[:i].decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split(" ", 2)[1]), headers, buf[i + 4:]


def request_bytes(host: str, path: str, body: bytes) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in HEADERS.items()) + f"Content-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


class Conn:
    """One keep-alive HTTP/1.1 connection: ``post`` returns (status, body)."""

    def __init__(self, base: str) -> None:
        hostport, _, prefix = base.removeprefix("http://").partition("/")
        self.host = hostport
        self.prefix = "/" + prefix if prefix else ""
        self.addr = (hostport.split(":")[0], int(hostport.split(":")[1]))
        self.sock: socket.socket | None = None
        self.sent = 0
        self.received = 0

    def connect(self) -> socket.socket:
        if self.sock is None:
            self.sock = socket.create_connection(self.addr)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self.sock

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def recv(self, sock: socket.socket, size: int = 256 * KIB) -> bytes:
        chunk = sock.recv(size)
        if not chunk:
            raise ConnectionError(f"{self.host} closed the connection")
        self.received += len(chunk)
        return chunk

    def post(self, path: str, body: bytes, keep: bool = True) -> tuple[int, bytes, int]:
        """Send one request, read its whole answer: (status, body, body
        bytes); with ``keep`` false the body is counted, not kept."""
        sock = self.connect()
        data = request_bytes(self.host, self.prefix + path, body)
        sock.sendall(data)
        self.sent += len(data)
        buf = b""
        while (parsed := split_head(buf)) is None:
            buf += self.recv(sock)
        status, headers, rest = parsed
        out = bytearray()
        count = 0

        def take(piece: bytes) -> None:
            nonlocal count
            count += len(piece)
            if keep:
                out.extend(piece)

        if headers.get("transfer-encoding", "").lower() == "chunked":
            dechunk = Dechunk()
            take(dechunk.feed(rest))
            while not dechunk.done:
                take(dechunk.feed(self.recv(sock)))
        else:
            length = int(headers.get("content-length", "0"))
            take(rest)
            while count < length:
                take(self.recv(sock, max(256 * KIB, length - count)))
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, bytes(out), count

    def timed(self, path: str, body: bytes) -> float:
        """One exchange's round trip, in ms (a non-200 answer stops the bench)."""
        t = time.perf_counter_ns()
        status, out, _ = self.post(path, body)
        ms = (time.perf_counter_ns() - t) / 1e6
        if status != 200:
            raise SystemExit(f"bench: {self.host}{path} answered {status}: {out[:300]!r}")
        return ms


STAMP = re.compile(rb'"t":(\d+)\}')


def streams(base: str, count: int, frames: int, gap_ms: int) -> tuple[list[float], float]:
    """``count`` concurrent SSE streams of ``frames`` frames; returns every
    frame's send-to-arrival delay (ms) and the wall time (s)."""
    probe = Conn(base)
    sel = selectors.DefaultSelector()
    state: dict[socket.socket, list[Any]] = {}
    t0 = time.perf_counter()
    for _ in range(count):
        sock = socket.create_connection(probe.addr)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(request_bytes(probe.host, probe.prefix + "/stream",
                                   b"%d,%d" % (frames, gap_ms)))
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ)
        state[sock] = [b"", None, b""]  # raw head buffer, Dechunk, partial line
    delays: list[float] = []
    while state:
        for key, _ in sel.select(timeout=30):
            sock = key.fileobj  # type: ignore[assignment]
            assert isinstance(sock, socket.socket)
            chunk = sock.recv(256 * KIB)
            now = time.monotonic_ns()
            st = state[sock]
            if not chunk:
                raise SystemExit(f"bench: {base} closed a stream early")
            if st[1] is None:
                st[0] += chunk
                parsed = split_head(st[0])
                if parsed is None:
                    continue
                status, headers, chunk = parsed
                if status != 200 or "chunked" not in headers.get("transfer-encoding", ""):
                    raise SystemExit(f"bench: {base}/stream answered {status} {headers}")
                st[1] = Dechunk()
            dechunk: Dechunk = st[1]
            text = st[2] + dechunk.feed(chunk)
            lines = text.split(b"\n")
            st[2] = lines.pop()
            for line in lines:
                m = STAMP.search(line)
                if m:
                    delays.append((now - int(m.group(1))) / 1e6)
            if dechunk.done:
                sel.unregister(sock)
                sock.close()
                del state[sock]
    return delays, time.perf_counter() - t0


def big_stream(base: str, total: int) -> tuple[int, float]:
    """Read one streamed response of ``total`` bytes of frames; (bytes, s)."""
    conn = Conn(base)
    conn.connect().settimeout(900)
    t0 = time.perf_counter()
    _, _, got = conn.post("/big", b"%d" % total, keep=False)
    conn.close()
    return got, time.perf_counter() - t0


# ------------------------------------------------------------ the processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def mitmdump(exe: str, upstream: str, flows: Path) -> Proc:
    port = free_port()
    popen = subprocess.Popen(
        [exe, "--mode", f"reverse:{upstream}", "--listen-host", "127.0.0.1",
         "--listen-port", str(port), "-w", str(flows), "-q"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            err = popen.stderr.read() if popen.stderr else ""
            raise SystemExit(f"bench: mitmdump exited: {err}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return Proc(popen, f"http://127.0.0.1:{port}")
        time.sleep(0.1)
    popen.kill()
    raise SystemExit("bench: mitmdump did not listen within 60 s")


def rotations(names: list[str], rounds: int) -> Iterator[tuple[int, list[str]]]:
    """(round, the paths in this round's order): the order rotates each round."""
    for r in range(rounds):
        k = r % len(names)
        yield r, names[k:] + names[:k]


# ----------------------------------------------------------------- the passes


@dataclass
class Figures:
    #: a ``--quick`` run: its verdicts are marked, the targets being the full run's
    quick: bool = False
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, value: float | None, unit: str, target: float | None = None,
            kind: str = "max", shown: str | None = None) -> None:
        """A figure; ``kind`` max: PASS when value <= target; n/a when no value."""
        if value is None or value != value:
            verdict = "n/a"
        elif target is None:
            verdict = ""
        else:
            verdict = "PASS" if value <= target else "MISS"
            if self.quick:
                verdict += "*"
        self.rows.append({"figure": name, "value": value, "unit": unit, "target": target,
                          "result": verdict, "shown": shown})


def small_exchanges(paths: dict[str, str], n: int) -> dict[str, list[float]]:
    conns = {name: Conn(url) for name, url in paths.items()}
    times: dict[str, list[float]] = {name: [] for name in paths}
    for conn in conns.values():
        for _ in range(20):
            conn.timed("/v1/small", SMALL_REQUEST)
    for _, order in rotations(list(paths), n):
        for name in order:
            times[name].append(conns[name].timed("/v1/small", SMALL_REQUEST))
    for conn in conns.values():
        conn.close()
    return times


def run_session(paths: dict[str, str], bodies: list[bytes]) -> tuple[dict[str, list[float]],
                                                                       dict[str, int]]:
    """Each turn sent on every path (rotating order); per path the turn
    times (ms), and the raw bytes (request + answer, heads included)."""
    conns = {name: Conn(url) for name, url in paths.items()}
    for conn in conns.values():
        conn.connect()
    times: dict[str, list[float]] = {name: [] for name in paths}
    for t, order in rotations(list(paths), len(bodies)):
        for name in order:
            times[name].append(conns[name].timed("/v1/chat/completions", bodies[t]))
    raw = {name: conn.sent + conn.received for name, conn in conns.items()}
    for conn in conns.values():
        conn.close()
    return times, raw


def paired(times: dict[str, list[float]], name: str, turns: list[int] | None = None) -> list[float]:
    idx = range(len(times[name])) if turns is None else turns
    return [times[name][i] - times["direct"][i] for i in idx]


def stat_run(path: Path) -> int:
    total = path.stat().st_size
    for suffix in ("-wal", "-shm", "-journal"):
        extra = path.with_name(path.name + suffix)
        if extra.exists():
            total += extra.stat().st_size
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run, to iterate")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the figures as JSON")
    parser.add_argument("--mitmdump", default=None,
                        help="mitmdump to compare with (default: .venv-bench/bin/mitmdump, "
                             "else mitmdump on PATH)")
    parser.add_argument("--requests", type=int, help="small exchanges per path (500)")
    parser.add_argument("--sessions", type=int, help="50-turn sessions (3)")
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--stream-rounds", type=int, help="single streams per path (3)")
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--gap-ms", type=int, default=5)
    parser.add_argument("--concurrent", type=int, default=64)
    parser.add_argument("--concurrent-gap-ms", type=int, default=20)
    parser.add_argument("--big-mib", type=int, help="the streamed response for RSS (200)")
    parser.add_argument("--check-runs", type=int, help="runs given to wiretape check (1000)")
    parser.add_argument("--check-budget", type=float,
                        help="seconds before check is stopped and its time extrapolated (90)")
    parser.add_argument("--skip", default="", help="comma list of passes to skip: "
                        "mitm,replay,streams,rss,loop,help,check")
    parser.add_argument("--loop-debug", action="store_true",
                        help="measure the event loop in asyncio's debug mode (slow-callback "
                             "warnings), as the first versions of this script did")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args()
    # Stopped by SIGTERM or Ctrl-C (even started in the background, where
    # SIGINT comes ignored): stop the processes started, remove the scratch.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    q = args.quick
    n_small = args.requests or (100 if q else 500)
    n_sessions = args.sessions or (1 if q else 3)
    stream_rounds = args.stream_rounds or (1 if q else 3)
    frames = 50 if q and args.frames == 200 else args.frames
    concurrent = 16 if q and args.concurrent == 64 else args.concurrent
    big = (args.big_mib or (20 if q else 200)) * MIB
    check_runs = args.check_runs or (20 if q else 1000)
    check_budget = args.check_budget or (30 if q else 90)
    skip = set(filter(None, args.skip.split(",")))
    tmp = Path(tempfile.mkdtemp(prefix="wiretape-bench-"))
    fig = Figures(quick=q)
    if q:
        fig.notes.append(
            f"* --quick: a scaled-down run ({n_small} small exchanges, {n_sessions} session, "
            f"{frames} frames a stream, {concurrent} concurrent streams, a {big // MIB} MiB "
            f"stream, {check_runs} check runs), graded against the full run's targets: "
            "indicative only")
    started = time.monotonic()
    fig.details["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                              "load_average_at_start": os.getloadavg()}
    procs: list[Proc] = []
    try:
        with (upstream() as direct, relay(direct) as (floor, _),
              relay(direct, http=True) as (http_floor, _)):
            try:
                measure(args, fig, tmp, direct, {"floor": floor, "http floor": http_floor},
                        procs, n_small=n_small,
                        n_sessions=n_sessions, stream_rounds=stream_rounds, frames=frames,
                        concurrent=concurrent,
                        big=big, check_runs=check_runs, check_budget=check_budget, skip=skip)
            finally:
                for p in procs:
                    if p.popen.poll() is None:
                        p.stop()
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    fig.details["duration_s"] = round(time.monotonic() - started, 1)
    fig.details["machine"]["load_average_at_end"] = os.getloadavg()
    report(fig, args.json)


def measure(args: argparse.Namespace, fig: Figures, tmp: Path, direct: str,
            floors: dict[str, str], procs: list[Proc],
            *, n_small: int, n_sessions: int, stream_rounds: int, frames: int, concurrent: int,
            big: int, check_runs: int, check_budget: float, skip: set[str]) -> None:
    log = progress()
    mitm_exe = None if "mitm" in skip else find_mitmdump(args.mitmdump)
    if "mitm" not in skip and mitm_exe is None:
        fig.notes.append("mitmproxy is not installed (make bench installs it into .venv-bench): "
                         "the ratios to it are n/a")

    # 1. small exchanges: direct, wiretape, mitmproxy, interleaved.
    log("small exchanges")
    rec = wiretape(["serve", "--record", "--upstream", direct + "/v1", "-o",
                    str(tmp / "small.wtape")])
    procs.append(rec)
    paths = {"direct": direct, "wiretape": rec.url, **floors}
    mitm = None
    if mitm_exe:
        mitm = mitmdump(mitm_exe, direct, tmp / "flows.mitm")
        procs.append(mitm)
        paths["mitmproxy"] = mitm.url
    small = small_exchanges(paths, n_small)
    base50, base99 = pct(small["direct"], 50), pct(small["direct"], 99)
    added = {name: (pct(v, 50) - base50, pct(v, 99) - base99) for name, v in small.items()}
    fig.details["small_ms"] = {name: {"p50": round(pct(v, 50), 4), "p99": round(pct(v, 99), 4)}
                               for name, v in small.items()}
    fig.add("small exchange: wiretape added p50", added["wiretape"][0], "ms", 0.5)
    fig.add("small exchange: wiretape added p99", added["wiretape"][1], "ms")
    fig.add("small exchange: floor (bare TCP relay) added p50", added["floor"][0], "ms")
    fig.add(f"small exchange: {HTTP_FLOOR} added p50", added["http floor"][0], "ms")
    if mitm:
        fig.add("small exchange: mitmproxy added p50", added["mitmproxy"][0], "ms")
        fig.add("small exchange: wiretape / mitmproxy (added p50)",
                ratio(added["wiretape"][0], added["mitmproxy"][0]), "x", 0.5)

    # 2. the 50-turn sessions, each recorded by a fresh wiretape.
    log(f"{n_sessions} agent session(s) of {args.turns} turns")
    sessions = [session(args.turns, 10 * KIB, MIB, seed) for seed in range(n_sessions)]
    sizes = [len(b) for b in sessions[0]]
    around = [t for t, s in enumerate(sizes) if AROUND_300K[0] <= s <= AROUND_300K[1]]
    fig.details["session_turn_bytes"] = sizes
    fig.details["turns_around_300KiB"] = around
    per: dict[str, list[float]] = {"wiretape": [], "mitmproxy": [], **{f: [] for f in floors}}
    per300: dict[str, list[float]] = {name: [] for name in per}
    run_files: list[Path] = []
    shares: list[float] = []
    for i, bodies in enumerate(sessions):
        run = tmp / f"session{i}.wtape"
        srec = wiretape(["serve", "--record", "--upstream", direct + "/v1", "-o", str(run)])
        procs.append(srec)
        spaths = {"direct": direct, "wiretape": srec.url, **floors}
        if mitm:
            spaths["mitmproxy"] = mitm.url
        times, raw = run_session(spaths, bodies)
        status = srec.stop()
        procs.remove(srec)
        if status != 0:
            raise SystemExit(f"bench: wiretape serve --record exited {status}: {srec.err}")
        run_files.append(run)
        shares.append(stat_run(run) / raw["wiretape"])
        fig.details.setdefault("session_record_summary", srec.err.splitlines()[-1:])
        for name in per:
            if name in times:
                per[name] += paired(times, name)
                per300[name] += paired(times, name, around)
    fig.add("session: wiretape added p50, all turns", statistics.median(per["wiretape"]), "ms")
    fig.add("300 KiB agent request: wiretape added p50", statistics.median(per300["wiretape"]),
            "ms", 2.0)
    fig.add("300 KiB agent request: floor (bare TCP relay) added p50",
            statistics.median(per300["floor"]), "ms")
    fig.add(f"300 KiB agent request: {HTTP_FLOOR} added p50",
            statistics.median(per300["http floor"]), "ms")
    if mitm:
        fig.add("session: mitmproxy added p50, all turns", statistics.median(per["mitmproxy"]),
                "ms")
        fig.add("300 KiB agent request: mitmproxy added p50",
                statistics.median(per300["mitmproxy"]), "ms")
        fig.add("300 KiB agent request: wiretape / mitmproxy (added p50)",
                ratio(statistics.median(per300["wiretape"]),
                      statistics.median(per300["mitmproxy"])), "x", 0.2)
    fig.add("run file / raw bytes of the session", 100 * statistics.median(shares), "%", 10)
    fig.details["run_file_shares"] = [round(s, 4) for s in shares]

    # 3, 4. SSE streams, single and concurrent (mitmproxy buffers SSE: not compared).
    if "streams" not in skip:
        log(f"SSE streams: {stream_rounds} x {frames} frames, then {concurrent} concurrent")
        spaths = {"direct": direct, "wiretape": rec.url, **floors}
        one: dict[str, list[float]] = {name: [] for name in spaths}
        for _, order in rotations(list(spaths), stream_rounds):
            for name in order:
                one[name] += streams(spaths[name], 1, frames, args.gap_ms)[0]
        fig.add(f"SSE frame ({args.gap_ms} ms apart): wiretape added p50",
                pct(one["wiretape"], 50) - pct(one["direct"], 50), "ms", 0.2)
        fig.add(f"SSE frame ({args.gap_ms} ms apart): wiretape added p99",
                pct(one["wiretape"], 99) - pct(one["direct"], 99), "ms", 2.0)
        fig.add(f"SSE frame ({args.gap_ms} ms apart): floor (bare TCP relay) added p50",
                pct(one["floor"], 50) - pct(one["direct"], 50), "ms")
        fig.add(f"SSE frame ({args.gap_ms} ms apart): {HTTP_FLOOR} added p50",
                pct(one["http floor"], 50) - pct(one["direct"], 50), "ms")
        many: dict[str, list[float]] = {name: [] for name in spaths}
        walls: dict[str, list[float]] = {name: [] for name in spaths}
        for _, order in rotations(list(spaths), 2 if not args.quick else 1):
            for name in order:
                delays, wall = streams(spaths[name], concurrent, frames, args.concurrent_gap_ms)
                many[name] += delays
                walls[name].append(wall)
        fig.add(f"{concurrent} concurrent streams: wiretape added p50 per frame",
                pct(many["wiretape"], 50) - pct(many["direct"], 50), "ms")
        fig.add(f"{concurrent} concurrent streams: wiretape added p99 per frame",
                pct(many["wiretape"], 99) - pct(many["direct"], 99), "ms")
        fig.details["stream_frame_ms"] = {
            "single": {n: {"p50": round(pct(v, 50), 4), "p99": round(pct(v, 99), 4)}
                       for n, v in one.items()},
            "concurrent": {n: {"p50": round(pct(v, 50), 4), "p99": round(pct(v, 99), 4),
                               "wall_s": [round(w, 3) for w in walls[n]]}
                           for n, v in many.items()}}
    status = rec.stop()
    procs.remove(rec)
    if mitm:
        mitm.stop()
        procs.remove(mitm)
    if status != 0:
        raise SystemExit(f"bench: wiretape serve --record exited {status}: {rec.err}")

    # 5. replay of the recorded sessions.
    if "replay" not in skip:
        log("replay of the sessions")
        rep_added: list[float] = []
        verdicts = []
        for run, bodies in zip(run_files, sessions, strict=True):
            rep = wiretape(["serve", "--replay", str(run), "--diagnostic"])
            procs.append(rep)
            times, _ = run_session({"direct": direct, "replay": rep.url}, bodies)
            rep.stop()
            procs.remove(rep)
            verdicts.append(next((line for line in rep.err.splitlines() if "verdict" in line),
                                 rep.err[-200:]))
            rep_added += paired(times, "replay")
        fig.add("replay of the session: added p50 per request", statistics.median(rep_added),
                "ms", 1.0)
        fig.details["replay_verdicts"] = verdicts

    # Peak RSS while recording one big streamed response.
    if "rss" not in skip:
        log(f"RSS: one {big // MIB} MiB streamed response")
        rss = wiretape(["serve", "--record", "--upstream", direct + "/v1", "-o",
                        str(tmp / "big.wtape")])
        procs.append(rss)
        Conn(rss.url).timed("/v1/small", SMALL_REQUEST)
        time.sleep(0.5)
        idle = rss.rss()["VmRSS"]
        got, secs = big_stream(rss.url + "/v1", big)
        peak = rss.rss()["VmHWM"]
        _, direct_secs = big_stream(direct + "/v1", big)
        status = rss.stop()
        procs.remove(rss)
        if got < big or status != 0:
            fig.notes.append(f"the big stream: got {got} of {big} bytes, serve exited {status}")
        fig.add(f"RSS growth recording one {big // MIB} MiB stream", (peak - idle) / MIB, "MiB",
                64)
        fig.add(f"the {big // MIB} MiB stream: wiretape time / direct time",
                ratio(secs, direct_secs), "x", shown=f"{secs:.1f} s / {direct_secs:.1f} s")
        fig.details["big_stream"] = {"idle_rss": idle, "peak_rss": peak,
                                     "wiretape_s": round(secs, 3),
                                     "direct_s": round(direct_secs, 3),
                                     "run_file_bytes": stat_run(tmp / "big.wtape")}
        (tmp / "big.wtape").unlink(missing_ok=True)

    # The event loop, in a pass of its own: record, then replay.
    if "loop" not in skip:
        how = "asyncio debug mode" if args.loop_debug else "callbacks timed"
        log(f"event loop ({how})")
        loops: dict[str, dict[str, Any]] = {}
        watch = tmp / "loop-record.json"
        w = wiretape(["serve", "--record", "--upstream", direct + "/v1", "-o",
                      str(tmp / "loop.wtape")], watch=watch, watch_debug=args.loop_debug)
        procs.append(w)
        t0 = time.monotonic()
        small_exchanges({"wiretape": w.url}, min(n_small, 200))
        run_session({"wiretape": w.url}, sessions[0])
        if "streams" not in skip:
            streams(w.url, 1, frames, args.gap_ms)
            streams(w.url, concurrent, frames, args.concurrent_gap_ms)
        window = (t0, time.monotonic())
        w.stop()
        procs.remove(w)
        loops["record"] = blocked(watch, window)
        watch = tmp / "loop-replay.json"
        r = wiretape(["serve", "--replay", str(run_files[0]), "--diagnostic"], watch=watch,
                     watch_debug=args.loop_debug)
        procs.append(r)
        t0 = time.monotonic()
        run_session({"replay": r.url}, sessions[0])
        window = (t0, time.monotonic())
        r.stop()
        procs.remove(r)
        loops["replay"] = blocked(watch, window)
        fig.add("event loop blocked, longest, serving (record + replay)",
                max(v["serving_max_ms"] for v in loops.values()), "ms", 5.0)
        fig.add("event loop blocked, longest, start-up/shut-down",
                max(v["outside_max_ms"] for v in loops.values()), "ms")
        fig.add("garbage collection's longest pause, serving",
                max(v["serving_gc_max_ms"] for v in loops.values()), "ms")
        cpus = [v["serving_cpu_max_ms"] for v in loops.values()
                if v["serving_cpu_max_ms"] is not None]
        fig.add("CPU time of one callback, longest, serving", max(cpus) if cpus else None, "ms")
        fig.details["event_loop"] = loops

    # `wiretape --help`.
    if "help" not in skip:
        log("wiretape --help")
        starts: dict[str, list[float]] = {"help": [], "bare": []}
        for _, order in rotations(list(starts), 3 if args.quick else 9):
            for name in order:
                t = time.perf_counter()
                subprocess.run([sys.executable, *(["-m", "wiretape", "--help"] if name == "help"
                                                  else ["-c", "pass"])],
                               check=True, stdout=subprocess.DEVNULL)
                starts[name].append(time.perf_counter() - t)
        fig.add("wiretape --help (median)", statistics.median(starts["help"]), "s", 0.2)
        fig.add("  the bare interpreter (python -c pass), same rounds",
                statistics.median(starts["bare"]), "s")

    # `wiretape check -j 2` on many copies of one tiny run.
    if "check" not in skip:
        log(f"wiretape check -j 2 on {check_runs} runs (stopped after {check_budget:.0f} s)")
        secs, done, est = check_pass(tmp, check_runs, check_budget)
        shown = (f"{secs:.1f} s" if done == check_runs
                 else f"~{est:.0f} s (est.: {done} of {check_runs} in {secs:.0f} s)")
        fig.add(f"wiretape check -j 2, {check_runs} tiny runs", est, "s", shown=shown)
        fig.details["check"] = {"runs": check_runs, "done": done, "seconds": round(secs, 2),
                                "estimate_s": round(est, 1)}


def blocked(watch: Path, window: tuple[float, float]) -> dict[str, Any]:
    """The slow callbacks of a loopwatch report: the longest (ms) of those
    that started within the traffic ``window`` (monotonic s: from the URL
    being read to the last answer) and of the others (start-up, including a
    step still running when the URL was printed, and shut-down), counts,
    the five longest while serving, the longest collection while serving
    and the longest CPU time the loop's thread spent in one callback while
    serving (None in debug mode)."""
    if not watch.exists():
        raise SystemExit(f"bench: the loop watch wrote no report ({watch.name})")
    report = json.loads(watch.read_text())
    events = report["events"]
    inside = [e for e in events if window[0] <= e[1] - e[0] / 1000 <= window[1]]
    collections = [e for e in report.get("gc", [])
                   if window[0] <= e[1] - e[0] / 1000 <= window[1]]
    outside = [e for e in events if e not in inside]
    inside.sort(reverse=True)
    return {"serving_max_ms": inside[0][0] if inside else 0.0,
            "outside_max_ms": max((e[0] for e in outside), default=0.0),
            "serving_gc_max_ms": max((e[0] for e in collections), default=0.0),
            "serving_cpu_max_ms": max((e[3] for e in inside if len(e) > 3), default=None),
            "serving_gc_over_5ms": sum(e[0] > 5 for e in collections),
            "serving_count": len(inside), "serving_over_5ms": sum(e[0] > 5 for e in inside),
            "serving_top": [[e[0], e[3] if len(e) > 3 else None, e[2]] for e in inside[:5]]}


def ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def find_mitmdump(given: str | None) -> str | None:
    if given:
        return given if Path(given).exists() else None
    local = HERE.parent / ".venv-bench" / "bin" / "mitmdump"
    return str(local) if local.exists() else shutil.which("mitmdump")


TINY_AGENT = ('curl -s -H "content-type: application/json" -d \'{"model":"fake-model",'
              '"messages":[{"role":"user","content":"hi"}]}\' "$OPENAI_BASE_URL/chat/completions"')


def check_pass(tmp: Path, count: int, budget: float) -> tuple[float, int, float]:
    """Record one tiny run (curl against the built-in fake provider), copy it
    ``count`` times, and time ``wiretape check -j 2 --free-ports`` on them.
    Returns (seconds, runs done, seconds estimated for all): when check is
    still running after ``budget`` s it is stopped (SIGTERM) and the time for
    all is extrapolated: the time to the first result, plus the pace between
    the first and the last result for the rest."""
    fake = subprocess.Popen([sys.executable, "-m", "wiretape.testing", "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert fake.stdout is not None
        url = fake.stdout.readline().split()[-1]
        agent = tmp / "tiny-agent"
        agent.mkdir()
        subprocess.run([sys.executable, "-m", "wiretape", "record", "--upstream",
                        f"openai={url}/v1", "-o", str(tmp / "tiny.wtape"), "--", "sh", "-c",
                        TINY_AGENT], cwd=agent, check=True, capture_output=True)
    finally:
        fake.terminate()
        fake.wait()
    runs = tmp / "runs"
    runs.mkdir()
    for i in range(count):
        shutil.copyfile(tmp / "tiny.wtape", runs / f"run{i:04d}.wtape")
    done = 0
    out = (tmp / "check.out").open("w")
    t0 = time.monotonic()
    popen = subprocess.Popen([sys.executable, "-m", "wiretape", "check", "-j", "2",
                              "--free-ports", str(runs)], stdout=out, stderr=subprocess.PIPE,
                             text=True, cwd=tmp)
    timer = threading.Timer(budget, popen.send_signal, (signal.SIGTERM,))
    timer.start()
    assert popen.stderr is not None
    passed = 0
    ends: list[float] = []
    for line in popen.stderr:
        if re.match(r"wiretape check: \[\d+/\d+\]", line):
            ends.append(time.monotonic() - t0)
            done += 1
            passed += " PASS " in line
    popen.wait()
    secs = time.monotonic() - t0
    timer.cancel()
    out.close()
    if passed < done:
        print(f"bench: check: {done - passed} of {done} runs did not pass", file=sys.stderr)
    if done == count:
        return secs, done, secs
    if done < 2:
        return secs, done, secs * count / max(done, 1)
    return secs, done, ends[0] + (ends[-1] - ends[0]) * (count - 1) / (done - 1)


def progress() -> Callable[[str], None]:
    t0 = time.monotonic()

    def log(what: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f} s] {what}", file=sys.stderr, flush=True)

    return log


def report(fig: Figures, json_path: Path | None) -> None:
    def fmt(v: float | None, unit: str) -> str:
        if v is None or v != v:
            return "n/a"
        if unit == "x":
            return f"{v:.2f} x"
        if unit == "%":
            return f"{v:.1f} %"
        if unit == "s":
            return f"{v:.3f} s"
        return f"{v:.3f} {unit}"

    def target(row: dict[str, Any]) -> str:
        t = row["target"]
        if t is None:
            return "-"
        return f"<= {t:g} {row['unit']}" if row["unit"] != "x" else f"<= {t:g} x"

    rows = [(r["figure"], r["shown"] or fmt(r["value"], r["unit"]), target(r), r["result"])
            for r in fig.rows]
    head = ("figure", "value", "target", "result")
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(4)]
    for line in [head, tuple("-" * w for w in widths), *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    machine = fig.details["machine"]
    print(f"{machine['cpus']} CPUs, Python {machine['python']}, load average "
          f"{machine['load_average_at_start'][0]:.1f} at the start, "
          f"{machine['load_average_at_end'][0]:.1f} at the end; "
          f"{fig.details['duration_s']:.0f} s")
    for note in fig.notes:
        print(f"note: {note}")
    loop = fig.details.get("event_loop", {})
    for name, v in loop.items():
        for ms, cpu, what in v["serving_top"][:3]:
            on_cpu = "" if cpu is None else f" ({cpu:.1f} ms CPU)"
            print(f"loop ({name}): {ms:.1f} ms{on_cpu}  {what[:160]}")
    if json_path is not None:
        json_path.write_text(json.dumps({"figures": fig.rows, "notes": fig.notes,
                                         "details": fig.details}, indent=1) + "\n")


if __name__ == "__main__":
    main()
