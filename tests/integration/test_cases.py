"""Every case of ``tests/data/cases`` through wiretape: record from a raw upstream
that plays ``response.raw`` with the timing of ``chunks.json``, replay with
the upstream gone, and check what the case's ``expect.md`` says.

Each case test records once and replays once, then checks U1-U8 of
``cases/README.md`` and the case's own items, collecting every failed check
into one report. Variants (other replay modes, other client settings) are
separate tests with their own recording.

Timing tolerance is 50 ms (``WIRETAPE_TEST_TOL_MS`` overrides it).
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support import wt
from support.checks import Checks
from support.harness import (
    B22_NO_RETRY,
    CASES,
    CaseSpec,
    check_observation,
    client_cmd,
    raw_client_cmd,
    run_direct,
)
from support.raw_upstream import (
    HttpMessage,
    RawUpstream,
    Reply,
    case_replies,
    parse_http_message,
    split_sse_events,
)

pytestmark = [pytest.mark.timeout(170)]

TOL_NS = int(float(os.environ.get("WIRETAPE_TEST_TOL_MS", "50")) * 1e6)
MS = 1_000_000

HOP_BY_HOP = {b"host", b"connection", b"keep-alive", b"te", b"trailer", b"upgrade",
              b"transfer-encoding"}
CREDENTIALS = {b"authorization", b"x-api-key", b"api-key", b"cookie", b"x-goog-api-key"}


@pytest.fixture(scope="session")
def cli() -> None:
    """The wiretape CLI must be runnable (a broken CLI fails these tests)."""
    why = wt.cli_unavailable()
    if why:
        pytest.fail(why, pytrace=False)


# ------------------------------------------------------------------ running


@dataclass
class Replayed:
    proc: wt.Proc
    obs: dict[str, Any]
    timing: dict[str, Any]
    verdict: dict[str, Any]
    sentinel_connections: int | None  # connections that reached the old upstream port


@dataclass
class Recorded:
    spec: CaseSpec
    tmp: Path
    run: Path
    upstream: RawUpstream
    proc: wt.Proc
    obs: dict[str, Any]
    timing: dict[str, Any]
    info: Any
    exchanges: list
    digests: dict[str, Any]

    @property
    def replies(self) -> list[Reply]:
        return self.upstream.replies

    def expected_request(self, i: int) -> HttpMessage:
        return parse_http_message(self.replies[i].expected_request)


def _load_timing(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {"attempts": [], "events_ms": [], "events_ns": []}


def record_case(spec: CaseSpec, tmp: Path, *, client_args: tuple[str, ...] = (),
                time_scale: float | None = None, tag: str = "record",
                raw_client: bool = False) -> Recorded:
    """Record ``spec`` through wiretape from a raw upstream. ``raw_client``:
    drive it with the generic httpx client (request.http's own headers and
    body) instead of the SDK script."""
    scale = spec.time_scale if time_scale is None else time_scale
    run = tmp / f"{spec.case}-{tag}.wtape"
    timing_file = tmp / f"{tag}-timing.json"
    if raw_client:
        cmd = raw_client_cmd(spec, timing_file=timing_file)
    else:
        cmd = client_cmd(spec, *client_args, timing_file=timing_file)
    upstream = RawUpstream(case_replies(spec.dir, scale)).start()
    try:
        proc = wt.record(run, {spec.origin: upstream.url + spec.base_path}, cmd, cwd=tmp,
                         timeout=150)
        upstream.wait_served(len(upstream.received), timeout=5)
    finally:
        upstream.stop()
    assert proc.returncode == 0, f"record failed\n{proc.describe()}"
    assert run.exists(), f"no run file at {run}\n{proc.describe()}"
    obs = proc.observation()
    info, exchanges = wt.load_run(run)
    exchanges = sorted(exchanges, key=lambda e: e.seq)
    digests = json.loads((spec.dir / "digests.json").read_text())
    return Recorded(spec, tmp, run, upstream, proc, obs, _load_timing(timing_file), info,
                    exchanges, digests)


def replay_case(rec: Recorded, *, client_args: tuple[str, ...] = (), mode: str = "diagnostic",
                pace: str = "fast", tag: str = "replay") -> Replayed:
    timing_file = rec.tmp / f"{tag}-timing.json"
    # A sentinel where the upstream was: a replay must never reach it.
    sentinel = None
    try:
        sentinel = RawUpstream([], port=rec.upstream.port).start()
    except OSError:
        sentinel = None
    try:
        proc = wt.replay(rec.run, client_cmd(rec.spec, *client_args, timing_file=timing_file),
                         cwd=rec.tmp, mode=mode, pace=pace, timeout=150)
    finally:
        if sentinel is not None:
            sentinel.stop()
    obs = proc.observation(required=False) or {}
    verdict = wt.verdict(rec.run, cwd=rec.tmp)
    return Replayed(proc, obs, _load_timing(timing_file), verdict,
                    sentinel.connections if sentinel is not None else None)


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _hdrs(pairs) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) if isinstance(k, str) else (k, v)
            for k, v in pairs]


def _end_to_end(headers) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in _hdrs(headers)
            if k.lower() not in HOP_BY_HOP and not k.lower().startswith(b"proxy-")]


def _ms(ns: float) -> str:
    return f"{ns / MS:.1f} ms"


def _response_key(i: int) -> str:
    return "response.raw" if i == 0 else f"response.{i + 1}.raw"


def _request_key(i: int) -> str:
    return "request.http" if i == 0 else f"request.{i + 1}.http"


def _attempt(timing: dict[str, Any], i: int) -> dict[str, Any] | None:
    attempts = timing.get("attempts") or []
    return attempts[i] if i < len(attempts) else None


def _arrival_ns(reads: list, upto: int) -> int | None:
    """When the client had read ``upto`` body bytes."""
    total = 0
    for t, n in reads:
        total += n
        if total >= upto:
            return t
    return None


def _frame_end_offsets(frames) -> dict[int, int]:
    """cumulative end -> offset_ns of the frame ending there."""
    out, pos = {}, 0
    for f in frames:
        pos += len(f.data)
        out[pos] = f.offset_ns
    return out


# ------------------------------------------------------------ U1-U8 checks


def check_record(rec: Recorded, chk: Checks, *, u5: bool = False) -> None:
    """U1-U4 and what the SDK client observed live; with ``u5``, also U5.

    U5 is measured only with the generic httpx client (``u5=True`` runs): an
    SDK client's reads are stamped by a thread that competes for the GIL
    with the SDK's own parsing, which delays stamps by up to ~130 ms even
    with no proxy in between."""
    n = len(rec.replies)
    if rec.obs.get("wiretape_client") != "raw_http":
        for p in check_observation(rec.spec, rec.obs):
            chk.check(False, f"live client observation: {p}")
    chk.eq(len(rec.upstream.received), n, "upstream requests (the proxy must not retry or drop)")
    chk.eq(len(rec.exchanges), n, "stored exchanges")
    chk.eq([e.seq for e in rec.exchanges], list(range(n)), "stored sequence numbers")
    for i in range(min(n, len(rec.upstream.received), len(rec.exchanges))):
        want = rec.expected_request(i)
        reply = rec.replies[i]
        got_up = parse_http_message(rec.upstream.requests[i])
        attempt = _attempt(rec.timing, i)
        dreq = rec.digests.get(_request_key(i), {})
        dresp = rec.digests.get(_response_key(i), {})
        tag = f"exchange {i}"

        # U1: forwarded faithfully
        chk.eq(got_up.body, want.body, f"U1 {tag}: body received upstream")
        if "body_sha256" in dreq:
            chk.eq(_sha(got_up.body), dreq["body_sha256"], f"U1 {tag}: upstream body sha256")
        chk.eq(got_up.method, want.method, f"U1 {tag}: method upstream")
        chk.eq(got_up.target, want.target, f"U1 {tag}: target upstream")
        if attempt is not None:
            chk.eq(_end_to_end(got_up.headers), _end_to_end(attempt["headers"]),
                   f"U1 {tag}: headers upstream vs headers the client sent "
                   "(only Host and hop-by-hop may change)")

        # U2: stored request
        ex = rec.exchanges[i]
        chk.eq(ex.request.method, want.method, f"U2 {tag}: stored method")
        chk.eq(ex.request.target, want.target, f"U2 {tag}: stored target")
        chk.eq(ex.request.body, want.body, f"U2 {tag}: stored request body")
        if attempt is not None:
            sent = _hdrs(attempt["headers"])
            chk.eq([k for k, _ in ex.request.headers], [k for k, _ in sent],
                   f"U2 {tag}: stored request header names, order and case")
            chk.eq([(k, v) for k, v in ex.request.headers if k.lower() not in CREDENTIALS],
                   [(k, v) for k, v in sent if k.lower() not in CREDENTIALS],
                   f"U2 {tag}: stored request header values (credentials aside)")

        # U3: stored response
        resp = ex.response
        if not chk.check(resp is not None, f"U3 {tag}: no stored response (ending {ex.ending})"):
            continue
        raw_msg = parse_http_message(reply.wire, allow_truncated=True)
        chk.eq(resp.status, reply.status, f"U3 {tag}: stored status")
        chk.eq(resp.reason, raw_msg.reason, f"U3 {tag}: stored reason")
        chk.eq(list(resp.headers), list(reply.headers),
               f"U3 {tag}: stored response headers (every header, order and case)")
        chk.eq(resp.body, reply.payload, f"U3 {tag}: stored body (de-chunked wire bytes)")
        want_sha = dresp.get("payload_sha256", dresp.get("wire_body_sha256"))
        if want_sha:
            chk.eq(_sha(resp.body), want_sha, f"U3 {tag}: stored body sha256 (digests.json)")

        # U4: frames
        frames = list(resp.frames)
        chk.eq(b"".join(f.data for f in frames), reply.payload, f"U4 {tag}: frames concatenated")
        offs = [f.offset_ns for f in frames]
        chk.check(all(a <= b for a, b in itertools.pairwise(offs)),
                  f"U4 {tag}: frame offsets do not rise: {[_ms(o) for o in offs]}")
        ends = _frame_end_offsets(frames)
        served = rec.upstream.served[i] if i < len(rec.upstream.served) else None
        t_start = attempt["t_start_ns"] if attempt else None
        if served is None or t_start is None:
            chk.check(False, f"U4 {tag}: no upstream write log or client timing to compare with")
            continue
        # forwarding latency: client start -> the upstream had the whole request
        fwd = served.request.t_end_ns - t_start
        nominal = [w.at_s for w in reply.writes if w.payload]
        writes = [w for w in served.writes if w.payload_end > w.payload_start]
        for k, w in enumerate(writes):
            where = f"U4 {tag}: write {k} (body bytes ..{w.payload_end})"
            off = ends.get(w.payload_end)
            if not chk.check(off is not None,
                             f"{where}: no stored frame ends at this upstream write boundary; "
                             f"frame lengths {[len(f.data) for f in frames]}"):
                continue
            actual = w.t_ns - t_start
            chk.check(abs(off - actual) <= TOL_NS,
                      f"{where}: frame offset {_ms(off)} but upstream wrote it at {_ms(actual)} "
                      f"after the request started", timing=True)
            # Against the nominal cumulative delays too, unless the upstream itself
            # missed its schedule (an overloaded machine), which is not the proxy's doing.
            late = (w.t_ns - served.request.t_end_ns) - nominal[k] * 1e9
            if abs(late) <= TOL_NS / 2:
                nom = nominal[k] * 1e9 + fwd
                chk.check(abs(off - nom) <= TOL_NS,
                          f"{where}: frame offset {_ms(off)} vs cumulative delay "
                          f"{_ms(nominal[k] * 1e9)} + forwarding {_ms(fwd)}", timing=True)
            # U5: no buffering while recording
            arrived = _arrival_ns(attempt.get("reads", []), w.payload_end)
            if u5 and chk.check(arrived is not None, f"U5 {tag}: client never got body bytes "
                                                     f"..{w.payload_end}"):
                chk.check(arrived - w.t_ns <= TOL_NS,
                          f"U5 {tag}: write {k} reached the client {_ms(arrived - w.t_ns)} "
                          f"after the upstream wrote it", timing=True)
        if fwd > 100 * MS:
            warnings.warn(f"{rec.spec.case} {tag}: the proxy took {_ms(fwd)} to forward the "
                          "request upstream", stacklevel=2)


def check_replay(rec: Recorded, rep: Replayed, chk: Checks, *, exit_code: int = 0) -> None:
    """U6-U8 for a replay of the same client."""
    n = len(rec.replies)
    v = rep.verdict
    chk.eq(rep.proc.returncode, exit_code, "replay exit status")
    for key, want in (("recorded", n), ("exact", n), ("substituted", 0), ("diverged", 0),
                      ("missing", 0), ("unused", 0), ("reused", n), ("exchanges_pass", True),
                      ("pass", True)):
        chk.eq(v.get(key), want, f"U6 verdict {key}")
    reqs = v.get("requests") or []
    chk.eq([r.get("kind") for r in reqs], ["exact"] * n, "U6 verdict request kinds")
    chk.eq([r.get("seq") for r in reqs], list(range(n)), "U6 served recorded exchanges in order")
    for i, r in enumerate(reqs[:n]):
        want = rec.expected_request(i)
        chk.eq(str(r.get("method")), want.method.decode(), f"U6 request {i} method in verdict")
        chk.eq(str(r.get("target")), want.target.decode(), f"U6 request {i} target in verdict")
    for i in range(n):
        live, again = _attempt(rec.timing, i), _attempt(rep.timing, i)
        if not chk.check(live and again, f"U6 exchange {i}: missing client timing "
                                         f"(live {bool(live)}, replay {bool(again)})"):
            continue
        chk.eq(again.get("status"), live.get("status"), f"U6 exchange {i}: replayed status")
        chk.eq(again.get("reason"), live.get("reason"), f"U6 exchange {i}: replayed reason")
        chk.eq(again.get("response_headers"), live.get("response_headers"),
               f"U6 exchange {i}: replayed response headers as the client saw them live")
        chk.eq(again.get("raw_sha256"), live.get("raw_sha256"),
               f"U6 exchange {i}: replayed body bytes (sha256 of raw reads)")
        chk.eq(again.get("raw_len"), len(rec.replies[i].payload),
               f"U6 exchange {i}: replayed body length")
    # U7: no network fallback
    if rep.sentinel_connections is not None:
        chk.eq(rep.sentinel_connections, 0, "U7 connections to the old upstream during replay")
    # U8: the client sees the same thing
    chk.eq(rep.obs, rec.obs, "U8 client observation, replay vs live")
    for p in check_observation(rec.spec, rep.obs):
        chk.check(False, f"U8 replay client observation: {p}")


def _ctx(rec: Recorded | None = None, rep: Replayed | None = None):
    out = []
    if rec is not None:
        out.append(lambda: "--- record\n" + rec.proc.describe())
    if rep is not None:
        out.append(lambda: "--- replay\n" + rep.proc.describe()
                   + "\n--- verdict\n" + json.dumps(rep.verdict, indent=1)[:3000])
    return out


def _sse_blocks(body: bytes) -> list[bytes]:
    return split_sse_events(body)


def _sse_data(block: bytes) -> tuple[str | None, str]:
    """(event name, joined data) of one SSE block."""
    event, data = None, []
    for line in block.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n"):
        if line.startswith(b"event:"):
            event = line[6:].lstrip(b" ").decode()
        elif line.startswith(b"data:"):
            v = line[5:]
            data.append((v[1:] if v.startswith(b" ") else v).decode())
    return event, "\n".join(data)


# -------------------------------------------------------- per-case checks


def extra_B01(rec: Recorded, rep: Replayed, chk: Checks) -> None:
    ev = rec.timing.get("events_ms") or []
    a0 = _attempt(rec.timing, 0)
    fwd_ms = ((rec.upstream.served[0].request.t_end_ns - a0["t_start_ns"]) / MS
              if a0 and rec.upstream.served else 0.0)
    if chk.eq(len(ev), 7, "B01 live chat.completion.chunk events"):
        chk.check(abs(ev[0] - 400 - fwd_ms) <= TOL_NS / MS,
                  f"B01 first chunk at {ev[0]:.0f} ms, expected ~400 ms "
                  f"(+{fwd_ms:.0f} ms forwarding)", timing=True)
        chk.check(abs(ev[-1] - 1900 - fwd_ms) <= TOL_NS / MS,
                  f"B01 last chunk at {ev[-1]:.0f} ms, expected ~1900 ms", timing=True)
        # The upstream spaces them exactly 1.5 s apart; allow 25 ms of scheduling
        # jitter (a buffering proxy delivers them all within a few ms).
        chk.check(ev[-1] - ev[0] >= 1500 - 25,
                  f"B01 latency: last - first = {ev[-1] - ev[0]:.0f} ms < 1.5 s (buffered?)",
                  timing=True)
    frames = rec.exchanges[0].response.frames if rec.exchanges and rec.exchanges[0].response else ()
    offs = [f.offset_ns / MS for f in frames]
    want = [400 + 250 * k for k in range(7)] + [1920]
    if chk.eq(len(offs), 8, "B01 stored frames"):
        for k, (o, w) in enumerate(zip(offs, want, strict=True)):
            chk.check(abs(o - w - fwd_ms) <= TOL_NS / MS,
                      f"B01 stored frame {k} at {o:.0f} ms, expected ~{w} ms", timing=True)
    # replay as fast as possible: still one write per chunk, and said so
    reads = [n for _, n in (_attempt(rep.timing, 0) or {}).get("reads", [])]
    chk.eq(reads, [len(f.data) for f in frames], "B01 replay: chunks written separately")
    out = (rep.proc.stdout + rep.proc.stderr).lower()
    chk.check("timing" in out and "not reproduced" in out,
              "B01 replay --pace fast: the report does not say timing was not reproduced")
    chk.eq(rep.obs.get("n_events"), 7, "B01 replay: chunk events the SDK saw")


def extra_B05(rec: Recorded, rep: Replayed, chk: Checks) -> None:
    want = rec.expected_request(0)
    got = parse_http_message(rec.upstream.requests[0]) if rec.upstream.requests else None
    chk.eq(len(want.body), 3610, "B05 request body length (request.http)")
    riff = want.body.index(b"RIFF")
    wav = want.body[riff: want.body.index(b"\r\n--", riff)]
    chk.check(got is not None and wav in got.body, "B05 WAV bytes not verbatim upstream")
    chk.check(b"\xff\xfe\xc3\x28\x80\xbf\xed\xa0" in wav, "B05 test data lost its invalid UTF-8")
    if rec.exchanges:
        chk.check(wav in rec.exchanges[0].request.body, "B05 WAV bytes not verbatim in the store")
        chk.eq(str(rec.exchanges[0].ending), "complete", "B05 exchange ending")
    err = rec.proc.stderr
    chk.check("Traceback" not in err and "UnicodeDecodeError" not in err,
              f"B05 recorder raised: {err[-500:]}")


def extra_B07(rec: Recorded, rep: Replayed, chk: Checks) -> None:
    ex = rec.exchanges[0]
    body = ex.response.body
    chk.eq(len(body), 377, "B07 stored body length (gzip bytes)")
    chk.eq(_sha(body), rec.digests["response.raw"]["wire_body_sha256"], "B07 stored gzip sha256")
    hdrs = {k.lower(): v for k, v in ex.response.headers}
    chk.eq(hdrs.get(b"content-encoding"), b"gzip", "B07 stored Content-Encoding")
    chk.eq(hdrs.get(b"content-length"), b"377", "B07 stored Content-Length")
    decoded = (rec.spec.dir / "response.decoded-body.json").read_bytes()
    try:
        chk.eq(gzip.decompress(body), decoded, "B07 stored bytes decode to the decoded body")
    except OSError as e:
        chk.check(False, f"B07 stored body is not gzip: {e}")
    a = _attempt(rep.timing, 0) or {}
    rh = {k.lower(): v for k, v in a.get("response_headers", [])}
    if rh.get("content-encoding") == "gzip":
        chk.eq(rh.get("content-length"), "377", "B07 replay (a): Content-Length of gzip body")
        chk.eq(a.get("raw_sha256"), _sha(body), "B07 replay (a): gzip bytes")
    else:
        chk.eq(rh.get("content-length"), str(len(decoded)), "B07 replay (b): plain Content-Length")
        chk.eq(a.get("raw_sha256"), _sha(decoded), "B07 replay (b): plain body")
        out = rep.proc.stdout + rep.proc.stderr
        chk.check("content-encoding" in out.lower(), "B07 replay (b): header rewrite not reported")


def extra_B10(rec: Recorded, rep: Replayed, chk: Checks) -> None:
    ex = rec.exchanges[0]
    body = ex.response.body
    comment = b": OPENROUTER PROCESSING\n\n"
    chk.eq(body.count(comment), 3, "B10 comment blocks verbatim in the stored payload")
    chk.eq(len(_sse_blocks(body)), 9, "B10 SSE blocks (comments included)")
    chk.eq([f.data for f in ex.response.frames[:3]], [comment] * 3,
           "B10 each comment stored as its own frame")
    chk.eq(ex.request.target, b"/api/v1/chat/completions", "B10 stored request path")


def extra_B12(rec: Recorded, rep: Replayed, chk: Checks) -> None:
    body = rec.exchanges[0].response.body
    chk.check(b'event: ping\ndata: {"type": "ping"}\n\n' in body,
              "B12 ping event not stored exactly (with the space)")
    blocks = _sse_blocks(body)
    chk.eq(len(blocks), 14, "B12 SSE blocks")
    partial = ""
    for b in blocks:
        name, data = _sse_data(b)
        if name == "content_block_delta":
            d = json.loads(data)
            if d.get("index") == 1 and d["delta"].get("type") == "input_json_delta":
                partial += d["delta"]["partial_json"]
    chk.eq(partial, '{"city": "Lisbon", "unit": "celsius"}', "B12 tool_use partial_json")


def extra_B14(rec: Recorded, rep: Replayed, chk: Checks) -> None:
    ex = rec.exchanges[0]
    body = ex.response.body
    chk.eq(body.count(b"\r\n"), rec.replies[0].payload.count(b"\r\n"), "B14 CRLFs kept")
    chk.eq(body.replace(b"\r\n", b"").count(b"\n"), 0, "B14 bare LF introduced")
    chk.eq(len(_sse_blocks(body)), 7, "B14 SSE blocks")
    chk.check(ex.response.frames and ex.response.frames[0].data.endswith(b"\r"),
              "B14 first frame must end between CR and LF, as upstream chunk 0 did")
    chk.check(b"data:{" in body, "B14 data: without space not kept")
    chk.check(any(f.data.startswith(b": ping") for f in ex.response.frames),
              "B14 idle ping not its own frame")


def extra_B15(rec: Recorded, rep: Replayed, chk: Checks) -> None:
    frames = rec.exchanges[0].response.frames
    chk.eq([len(f.data) for f in frames], [683, 581, 302], "B15 stored raw chunks")
    reads = [n for _, n in (_attempt(rep.timing, 0) or {}).get("reads", [])]
    chk.eq(reads, [683, 581, 302], "B15 replay reproduces chunk boundaries (as the report says: "
                                   "one write per recorded frame)")


def extra_B17(rec: Recorded, rep: Replayed, chk: Checks) -> None:
    body = rec.exchanges[0].response.body
    multi = [b for b in _sse_blocks(body) if b.count(b"data:") == 3]
    if chk.eq(len(multi), 1, "B17 one event with three data: lines"):
        name, data = _sse_data(multi[0])
        chk.eq(name, "content_block_delta", "B17 multi-line event name")
        try:
            chk.eq(json.loads(data)["delta"]["text"], "Hi there", "B17 joined data as JSON")
        except ValueError as e:
            chk.check(False, f"B17 joined data is not JSON: {e}")
    chk.eq(len(_sse_blocks(body)), 7, "B17 SSE blocks")


def extra_B18(rec: Recorded, rep: Replayed, chk: Checks) -> None:
    body = rec.exchanges[0].response.body
    payload = rec.replies[0].payload
    chk.eq(body.count(b'"obfuscation"'), payload.count(b'"obfuscation"'), "B18 obfuscation kept")
    chk.eq(len(_sse_blocks(body)), 11, "B18 SSE blocks")
    chk.check(b'"choices":[]' in body, "B18 usage-only chunk (empty choices) not stored")
    usage = (rep.obs.get("usage") or {}).get("total_tokens")
    chk.eq(usage, 144, "B18 replay usage total_tokens")


def extra_B19(rec: Recorded, rep: Replayed, chk: Checks) -> None:
    body = rec.exchanges[0].response.body
    chk.check(b"[DONE]" not in body, "B19 [DONE] appended")
    blocks = _sse_blocks(body)
    chk.eq(len(blocks), 15, "B19 SSE blocks")
    seqs, added, bad = [], set(), []
    for b in blocks:
        name, data = _sse_data(b)
        d = json.loads(data)
        chk.eq(d.get("type"), name, "B19 event name matches data type")
        seqs.append(d.get("sequence_number"))
        if name == "response.output_item.added":
            added.add(d["item"]["id"])
        if "item_id" in d and d["item_id"] not in added:
            bad.append(d["item_id"])
        if name == "response.completed":
            chk.eq(len(d["response"]["output"]), 2, "B19 completed output items")
    chk.eq(seqs, list(range(15)), "B19 sequence numbers")
    chk.eq(bad, [], "B19 deltas for items never added")
    chk.eq(rep.obs.get("event_types"), rec.obs.get("event_types"), "B19 replay event order")


def extra_B20(rec: Recorded, rep: Replayed, chk: Checks) -> None:
    ex = rec.exchanges[0]
    chk.check(str(ex.ending) != "complete", f"B20 exchange stored as {ex.ending}, not incomplete")
    chk.eq(len(rec.upstream.received), 1, "B20 upstream requests (no retry by the recorder)")
    if ex.response is not None:
        chk.eq(len(ex.response.body), 681, "B20 partial payload length")
        chk.eq(_sha(ex.response.body), rec.digests["response.raw"]["payload_sha256"],
               "B20 partial payload sha256")
        chk.eq(len(ex.response.frames[-1].data) if ex.response.frames else None, 41,
               "B20 last frame (41 of 144 bytes)")
    a = _attempt(rep.timing, 0) or {}
    chk.eq([n for _, n in a.get("reads", [])], [358, 117, 36, 129, 41],
           "B20 replay: 4 chunks + 41 bytes of the 5th")
    chk.check("RemoteProtocolError" in str(a.get("raw_error")),
              f"B20 replay: the body did not end in an abrupt close ({a.get('raw_error')})")


def extra_B22(rec: Recorded, rep: Replayed, chk: Checks) -> None:
    chk.eq([e.response.status if e.response else None for e in rec.exchanges], [429, 200],
           "B22 stored statuses in order")
    chk.eq([str(e.ending) for e in rec.exchanges], ["complete", "complete"], "B22 endings")
    if rec.exchanges and rec.exchanges[0].response:
        h = {k.lower(): v for k, v in rec.exchanges[0].response.headers}
        chk.eq(h.get(b"retry-after"), b"1", "B22 retry-after kept")
        chk.eq(h.get(b"retry-after-ms"), b"1000", "B22 retry-after-ms kept")
    for name, timing in (("live", rec.timing), ("replay", rep.timing)):
        a0, a1 = _attempt(timing, 0), _attempt(timing, 1)
        if chk.check(a0 and a1, f"B22 {name}: two attempts"):
            wait = (a1["t_start_ns"] - a0["t_headers_ns"]) / 1e9
            chk.check(0.9 <= wait <= 1.6, f"B22 {name}: SDK waited {wait:.2f} s, expected ~1 s",
                      timing=True)


EXTRA: dict[str, Callable[[Recorded, Replayed, Checks], None]] = {
    k[len("extra_"):]: v for k, v in globals().items() if k.startswith("extra_")
}


# -------------------------------------------------------------------- tests


def _run_with_timing_retry(body: Callable[[Path], Checks], tmp_path: Path, tries: int = 3) -> None:
    """Run ``body`` (record, replay, checks); if only timing checks failed, the
    machine may have been overloaded: run it again (up to ``tries`` in all),
    and report that. Any other failure fails at once."""
    for attempt in range(1, tries + 1):
        folder = tmp_path / f"try{attempt}"
        folder.mkdir()
        chk = body(folder)
        if not chk.only_timing_failed or attempt == tries:
            break
        warnings.warn(f"timing checks failed (try {attempt} of {tries}), running again:\n"
                      + "\n".join(chk.failures), stacklevel=2)
    chk.done()


@pytest.mark.parametrize("spec", [*CASES.values(), B22_NO_RETRY],
                         ids=[*CASES, "B22-no-retry"])
@pytest.mark.slow  # a long scenario: make test-slow
def test_client_direct(spec: CaseSpec) -> None:
    """The harness itself, with no wiretape in between: each client sends its
    case's exact request bytes and observes what expect.md says."""
    with RawUpstream(case_replies(spec.dir, min(spec.time_scale, 0.2))) as up:
        obs, proc = run_direct(spec, up.url)
        up.wait_served(len(up.received), timeout=5)
    chk = Checks(lambda: f"client stderr:\n{proc.stderr.decode(errors='replace')[-3000:]}")
    chk.eq(proc.returncode, 0, "client exit status")
    for p in check_observation(spec, obs):
        chk.check(False, p)
    want_n = len(spec.expect.get("statuses") or [None])
    chk.eq(len(up.received), want_n, "requests received")
    for i, raw in enumerate(up.requests):
        got = parse_http_message(raw)
        want = parse_http_message(up.served[i].reply.expected_request)
        chk.eq(got.body, want.body, f"request {i}: body bytes = request file body")
        chk.eq((got.method, got.target), (want.method, want.target), f"request {i}: line")
    chk.done()


#: Cases whose record and replay take longest (recorded stalls): long
#: scenarios, run by `make test-slow`.
_LONG_CASES = frozenset({"B01"})


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=[pytest.mark.slow] if c in _LONG_CASES else []) for c in sorted(CASES)])
def test_case(case: str, tmp_path: Path, cli: None) -> None:
    """Record, replay, and check U1-U8 and the case's own expectations."""
    spec = CASES[case]

    def body(tmp: Path) -> Checks:
        rec = record_case(spec, tmp)
        rep = replay_case(rec)
        chk = Checks(*_ctx(rec, rep))
        check_record(rec, chk)
        check_replay(rec, rep, chk)
        if case in EXTRA:
            EXTRA[case](rec, rep, chk)
        return chk

    _run_with_timing_retry(body, tmp_path)


STREAMED = sorted(c for c in CASES if (CASES[c].dir / "chunks.json").exists())


@pytest.mark.parametrize("case", STREAMED)
def test_no_buffering(case: str, tmp_path: Path, cli: None) -> None:
    """U5 (and U1-U4 again): a plain httpx client, doing nothing but reading,
    gets every upstream chunk within 50 ms of the upstream writing it."""
    spec = CASES[case]

    def body(tmp: Path) -> Checks:
        rec = record_case(spec, tmp, raw_client=True)
        chk = Checks(*_ctx(rec))
        check_record(rec, chk, u5=True)
        reply = rec.replies[0]
        chk.eq(rec.obs.get("status"), reply.status, "client status")
        chk.eq(rec.obs.get("body_sha256"), _sha(reply.payload), "client raw body sha256")
        chk.eq(rec.obs.get("frames"), [len(p) for p in reply.chunk_payloads],
               "client raw frames = upstream chunks")
        if reply.end == "truncate":
            chk.eq((rec.obs.get("exception") or {}).get("type"), "RemoteProtocolError",
                   "client sees the upstream's abrupt close")
        else:
            chk.eq(rec.obs.get("exception"), None, "client exception")
        return chk

    _run_with_timing_retry(body, tmp_path)


@pytest.mark.slow  # a long scenario: `make test-slow`
def test_B01_replay_with_recorded_pace(tmp_path: Path, cli: None) -> None:
    """B01: with recorded timing the client sees ~250 ms between chunks."""
    def body(tmp: Path) -> Checks:
        rec = record_case(CASES["B01"], tmp)
        rep = replay_case(rec, pace="recorded")
        chk = Checks(*_ctx(rec, rep))
        check_replay(rec, rep, chk)
        ev = rep.timing.get("events_ms") or []
        if chk.eq(len(ev), 7, "B01 replay events"):
            gaps = [b - a for a, b in itertools.pairwise(ev)]
            chk.check(all(abs(g - 250) <= TOL_NS / MS for g in gaps),
                      f"B01 replay gaps {[round(g) for g in gaps]} ms, expected ~250 ms",
                      timing=True)
        return chk

    _run_with_timing_retry(body, tmp_path)


def _body_diff(a: bytes, b: bytes) -> tuple[int, int | None]:
    """(number of differing byte positions, first differing offset)."""
    diffs = [i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y] + list(
        range(min(len(a), len(b)), max(len(a), len(b))))
    return len(diffs), (diffs[0] if diffs else None)


@pytest.mark.slow  # a long scenario: `make test-slow`
def test_B05_changed_upload_diverges(tmp_path: Path, cli: None) -> None:
    """B05/B06: another multipart boundary, or one flipped WAV byte, is diverged
    (never a silent hit); strict mode rejects it."""
    spec = CASES["B05"]
    rec = record_case(spec, tmp_path)
    original = rec.expected_request(0).body
    rerun = parse_http_message((spec.dir / "request.rerun.http").read_bytes()).body
    flip_at = 2000  # inside the WAV data of the file part
    riff = original.index(b"RIFF")
    flipped = bytearray(original)
    flipped[riff + flip_at] ^= 0x01

    variants = [
        ("rerun-diagnostic", ("--request", "request.rerun.http"), "diagnostic", rerun),
        ("rerun-strict", ("--request", "request.rerun.http"), "strict", rerun),
        ("flip-diagnostic", ("--flip-byte", str(flip_at)), "diagnostic", bytes(flipped)),
    ]
    chk = Checks(*_ctx(rec))
    for tag, args, mode, live_body in variants:
        rep = replay_case(rec, client_args=args, mode=mode, tag=tag)
        chk.context += tuple(_ctx(None, rep))
        v = rep.verdict
        reqs = v.get("requests") or []
        chk.eq([r.get("kind") for r in reqs], ["diverged"], f"{tag}: request kinds")
        chk.eq(v.get("exact"), 0, f"{tag}: exact")
        chk.eq(v.get("exchanges_pass"), False, f"{tag}: exchanges_pass")
        chk.eq(v.get("pass"), False, f"{tag}: pass")
        chk.eq(rep.proc.returncode, 3, f"{tag}: replay exit status")
        if rep.sentinel_connections is not None:
            chk.eq(rep.sentinel_connections, 0, f"{tag}: connections to the old upstream")
        if mode == "diagnostic":
            chk.eq(v.get("diverged"), 1, f"{tag}: diverged")
            chk.eq(rep.obs.get("text"), "Testing, one, two, three.",
                   f"{tag}: diagnostic serves the diverged exchange")
        else:  # rejected: the client gets an error, or is stopped before it prints
            chk.check(not rep.obs or rep.obs.get("exception") is not None,
                      f"{tag}: strict must reject the request with an error: {rep.obs}")
            chk.check(not rep.obs or rep.obs.get("text") is None,
                      f"{tag}: strict served the diverged exchange: {rep.obs}")
        # Where the tool reports the first differing byte, it must be the right one.
        detail = (reqs[0].get("detail") or {}) if reqs else {}
        _, first = _body_diff(original, live_body)
        if "first_body_offset" in detail:
            chk.eq(detail["first_body_offset"], first, f"{tag}: first differing body offset")
        if tag.startswith("flip") and "body_bytes_differ" in detail:
            chk.eq(detail["body_bytes_differ"], 1, f"{tag}: differing body bytes")
    chk.done()


def test_B06_boundary_divergence_is_localised(tmp_path: Path, cli: None) -> None:
    """B06: the report localises a boundary-only change to the boundary token
    (one header parameter and four delimiter lines), so a user can see it is
    boundary-only: the differing body bytes are no more than the four
    boundary tokens, and the Content-Type header is named."""
    spec = CASES["B05"]
    rec = record_case(spec, tmp_path)
    rep = replay_case(rec, client_args=("--request", "request.rerun.http"), tag="rerun")
    chk = Checks(*_ctx(rec, rep))
    reqs = rep.verdict.get("requests") or []
    chk.eq([r.get("kind") for r in reqs], ["diverged"], "request kinds")
    detail = (reqs[0].get("detail") or {}) if reqs else {}
    boundary = b"8a6c0c3bd3f34b7b9c2e0b6f5d1a4e27"
    original = rec.expected_request(0).body
    rerun = parse_http_message((spec.dir / "request.rerun.http").read_bytes()).body
    ndiff, _ = _body_diff(original, rerun)
    chk.eq(original.count(b"--" + boundary), 4, "delimiter lines in request.http")
    limit = 4 * len(boundary)
    chk.check(isinstance(detail.get("body_bytes_differ"), int)
              and detail["body_bytes_differ"] <= limit,
              f"the report's differing body bytes ({detail.get('body_bytes_differ')}) are not "
              f"localised to the 4 boundary tokens ({ndiff} bytes differ, at most {limit})")
    chk.check("content-type" in json.dumps(detail).lower(),
              f"the report does not name the Content-Type (boundary) difference: {detail}")
    chk.done()


@pytest.mark.slow
def test_B14_full_idle_stall(tmp_path: Path, cli: None) -> None:
    """B14 at real time: the 15 s idle gap passes through (no read timeout
    shorter than that on the upstream side), each chunk on time."""
    spec = CASES["B14"]
    rec = record_case(spec, tmp_path, time_scale=1.0, raw_client=True)
    chk = Checks(*_ctx(rec))
    chk.eq(rec.obs.get("exception"), None, "client exception")
    chk.eq(rec.obs.get("body_sha256"), _sha(rec.replies[0].payload), "client raw body sha256")
    ex = rec.exchanges[0] if rec.exchanges else None
    if chk.check(ex is not None and ex.response is not None, "B14: no stored response"):
        chk.eq(str(ex.ending), "complete", "B14 ending")
        chk.eq(ex.response.body, rec.replies[0].payload, "B14 stored payload")
        ends = _frame_end_offsets(ex.response.frames)
        ping_end = sum(len(p) for p in rec.replies[0].chunk_payloads[:3])
        off = ends.get(ping_end)
        if chk.check(off is not None, "B14: the ping is not a frame of its own"):
            chk.check(off >= 15.3e9, f"B14: the ping frame at {_ms(off)}, expected ~15.44 s")
    a = _attempt(rec.timing, 0) or {}
    reads = a.get("reads") or []
    if chk.check(len(reads) >= 3, "B14: client reads"):
        served = rec.upstream.served[0]
        for k, w in enumerate(served.chunk_writes()):
            arrived = _arrival_ns(reads, w.payload_end)
            chk.check(arrived is not None and arrived - w.t_ns <= TOL_NS,
                      f"B14 U5: chunk {k} reached the client late or never", timing=True)
    chk.done()


def test_B22_without_retries_leaves_one_unused(tmp_path: Path, cli: None) -> None:
    """B22 variant: a client with max_retries=0 consumes the 429 only; the 200
    stays unused and the client raises RateLimitError, as it would live."""
    rec = record_case(CASES["B22"], tmp_path)
    rep = replay_case(rec, client_args=("--max-retries", "0"))
    chk = Checks(*_ctx(rec, rep))
    v = rep.verdict
    for key, want in (("recorded", 2), ("exact", 1), ("missing", 0), ("unused", 1),
                      ("exchanges_pass", False), ("pass", False)):
        chk.eq(v.get(key), want, f"verdict {key}")
    reqs = v.get("requests") or []
    chk.eq([(r.get("kind"), r.get("seq")) for r in reqs], [("exact", 0)],
           "the one request gets the 429 (seq 0)")
    chk.eq(rep.proc.returncode, 3, "replay exit status")
    for p in check_observation(B22_NO_RETRY, rep.obs):
        chk.check(False, f"client observation: {p}")
    chk.done()


def test_missing_request_gets_error_without_fallback(tmp_path: Path, cli: None) -> None:
    """U7: a request with no recorded counterpart is missing and gets an
    explicit error; nothing reaches the network. (B22 recorded with
    max_retries=0 holds the 429 only; the retrying client's second attempt
    has nothing left.)"""
    rec = record_case(B22_NO_RETRY, tmp_path)
    chk = Checks(*_ctx(rec))
    chk.eq(len(rec.exchanges), 1, "recorded exchanges")
    for p in check_observation(B22_NO_RETRY, rec.obs):
        chk.check(False, f"live client observation: {p}")
    rep = replay_case(rec, client_args=("--max-retries", "2"))
    chk.context += tuple(_ctx(None, rep))
    v = rep.verdict
    for key, want in (("recorded", 1), ("exact", 1), ("missing", 1), ("unused", 0),
                      ("exchanges_pass", False), ("pass", False)):
        chk.eq(v.get(key), want, f"verdict {key}")
    chk.eq([r.get("kind") for r in v.get("requests") or []], ["exact", "missing"],
           "request kinds in arrival order")
    chk.eq(rep.proc.returncode, 3, "replay exit status")
    exc = rep.obs.get("exception") or {}
    chk.check(exc and "wiretape" in json.dumps(exc).lower(),
              f"the missing request's error must name wiretape: {exc}")
    statuses = rep.obs.get("statuses") or []
    chk.check(len(statuses) == 2 and 400 <= (statuses[-1] or 0) < 500,
              f"missing request must get a 4xx (not retried): statuses {statuses}")
    a = _attempt(rep.timing, 1) or {}
    rh = {k.lower(): v for k, v in a.get("response_headers", [])}
    chk.eq(rh.get("x-should-retry"), "false", "missing request's x-should-retry")
    if rep.sentinel_connections is not None:
        chk.eq(rep.sentinel_connections, 0, "connections to the old upstream during replay")
    chk.done()
