"""Every fixture of ``tests/data/fixtures/corpus`` (real provider traffic) through
wiretape: a raw upstream serves the recorded response (chunked bodies one
SSE event or gzip flush per chunk), the generic httpx client drives it
through ``wiretape record``, the upstream goes away, and ``wiretape replay``
serves it again. The client must see the same status, headers, raw body
bytes and frames in both passes, and the verdict must be exact.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support import wt
from support.checks import Checks
from support.harness import CLIENTS_DIR, child_env, corpus_split, parse_observation
from support.raw_upstream import (
    RawUpstream,
    corpus_dir,
    fixture_reply,
    parse_http_message,
)

pytestmark = [pytest.mark.timeout(150)]

# Spread a fixture's chunks over at most ~0.6 s so that long streams stay quick.
MAX_STREAM_S = 0.6
GAP_MS = 15.0


#: The fixtures the everyday tier records and replays (one stream per wire
#: format, an error, an SSE comment); every other one runs in `make test-slow`.
_EVERYDAY = frozenset({
    "anthropic-stream-tool-use-gzip", "gemini-sse-thinking",
    "openai-chat-stream-tool-call-deltas", "openai-responses-stream-function-call",
    "openai-error-400-responses", "openrouter-stream-processing-comment",
})


def _fixtures() -> list[str]:
    d = corpus_dir()
    if not d.is_dir():
        return []
    return sorted(p.name for p in d.iterdir() if (p / "response_body.bin").exists())


@pytest.fixture(scope="session")
def cli() -> None:
    """The wiretape CLI must be runnable (a broken CLI fails these tests)."""
    why = wt.cli_unavailable()
    if why:
        pytest.fail(why, pytrace=False)


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _client(fx: Path, var: str, rest: str, timing: Path) -> list[str]:
    return [sys.executable, str(CLIENTS_DIR / "raw_http.py"), str(fx), "--env", var,
            "--rest", rest, "--timing-file", str(timing)]


def _read_json(p: Path) -> dict[str, Any]:
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return {}


def test_corpus_is_present() -> None:
    assert _fixtures(), f"no corpus fixtures under {corpus_dir()}"


@pytest.mark.parametrize("name", _fixtures())
def test_corpus_direct(name: str, tmp_path: Path) -> None:
    """The harness itself, with no wiretape in between: the generic client
    gets the fixture's status, headers, body and chunking from the raw
    upstream, and the upstream gets the recorded request."""
    fx = corpus_dir() / name
    _, var, base, rest = corpus_split(fx)
    reply = fixture_reply(fx, gap_ms=1.0)
    req_json = json.loads((fx / "request.json").read_text())
    with RawUpstream(reply) as up:
        p = subprocess.run(_client(fx, var, rest, tmp_path / "t.json"), capture_output=True,
                           env=child_env(**{var: up.url + base}), timeout=60, check=False)
        up.wait_served(1, timeout=5)
    obs = parse_observation(p.stdout)
    chk = Checks(lambda: p.stderr.decode(errors="replace")[-2000:])
    chk.eq(obs.get("exception"), None, "client exception")
    chk.eq(obs.get("status"), reply.status, "status")
    chk.eq(_hdrs(obs.get("headers") or []), list(reply.headers), "headers, order and case")
    chk.eq(obs.get("body_sha256"), _sha(reply.payload), "raw body sha256")
    chk.eq(obs.get("frames"), [len(c) for c in reply.chunk_payloads] or [len(reply.payload)],
           "raw frames")
    if chk.eq(len(up.received), 1, "requests received"):
        got = parse_http_message(up.requests[0])
        chk.eq(got.method.decode(), req_json["method"], "method")
        chk.eq(got.target.decode("latin-1"), base + rest, "target")
        chk.eq(got.body, (req_json.get("body") or "").encode("utf-8"), "body")
        skip = {"host", "content-length", "connection", "keep-alive", "transfer-encoding"}
        sent = [(k, v) for k, v in got.headers if k.lower() not in (b"host", b"content-length")]
        want = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in req_json["headers"]
                if k.lower() not in skip]
        chk.eq(sent, want, "request headers as recorded (Host/Content-Length/hop-by-hop aside)")
    chk.done()


def _hdrs(pairs) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in pairs]


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=() if name in _EVERYDAY else pytest.mark.slow)
    for name in _fixtures()])
def test_corpus_fixture(name: str, tmp_path: Path, cli: None) -> None:
    fx = corpus_dir() / name
    origin, var, base, rest = corpus_split(fx)
    probe = fixture_reply(fx)
    n_chunks = max(1, len(probe.chunk_payloads))
    reply = fixture_reply(fx, gap_ms=min(GAP_MS, MAX_STREAM_S * 1000 / n_chunks))
    req_json = json.loads((fx / "request.json").read_text())
    run = tmp_path / f"{name}.wtape"
    t_live, t_replay = tmp_path / "live-timing.json", tmp_path / "replay-timing.json"

    upstream = RawUpstream(reply).start()
    try:
        rec = wt.record(run, {origin: upstream.url + base}, _client(fx, var, rest, t_live),
                        cwd=tmp_path)
        upstream.wait_served(1, timeout=5)
    finally:
        upstream.stop()
    assert rec.returncode == 0, rec.describe()
    live = rec.observation()
    chk = Checks(lambda: "--- record\n" + rec.describe())

    # live pass: the client got what the upstream sent, through the proxy
    chk.eq(live.get("exception"), None, "live client exception")
    chk.eq(live.get("status"), reply.status, "live status")
    chk.eq(live.get("body_sha256"), _sha(reply.payload), "live raw body sha256")
    if reply.chunk_payloads:
        chk.eq(live.get("frames"), [len(p) for p in reply.chunk_payloads],
               "live raw frames = upstream chunks")
    chk.eq(len(upstream.received), 1, "upstream requests")
    if upstream.received:
        got = parse_http_message(upstream.requests[0])
        chk.eq(got.body, (req_json.get("body") or "").encode("utf-8"), "body received upstream")
        chk.eq(got.method.decode(), req_json["method"], "method upstream")
        chk.eq(got.target.decode("latin-1"), base + rest, "target upstream")

    # the stored exchange
    _, exchanges = wt.load_run(run)
    if chk.eq(len(exchanges), 1, "stored exchanges"):
        ex = exchanges[0]
        chk.eq(str(ex.ending), "complete", "stored ending")
        chk.eq(ex.request.body, (req_json.get("body") or "").encode("utf-8"), "stored request body")
        if chk.check(ex.response is not None, "no stored response"):
            chk.eq(ex.response.status, reply.status, "stored status")
            chk.eq(list(ex.response.headers), list(reply.headers),
                   "stored response headers (order and case)")
            chk.eq(ex.response.body, reply.payload, "stored body")
            pos, ends = 0, set()
            for f in ex.response.frames:
                pos += len(f.data)
                ends.add(pos)
            bounds, acc = [], 0
            for p in reply.chunk_payloads:
                acc += len(p)
                bounds.append(acc)
            chk.eq([b for b in bounds if b not in ends], [],
                   "upstream chunk boundaries missing from the stored frames")

    # replay with the upstream gone; a sentinel where it was must see nothing
    try:
        sentinel = RawUpstream([], port=upstream.port).start()
    except OSError:
        sentinel = None
    try:
        rep = wt.replay(run, _client(fx, var, rest, t_replay), cwd=tmp_path,
                        mode="diagnostic", pace="fast")
    finally:
        if sentinel is not None:
            sentinel.stop()
    chk.context += (lambda: "--- replay\n" + rep.describe(),)
    again = rep.observation(required=False) or {}
    verdict = wt.verdict(run, cwd=tmp_path)
    chk.context += (lambda: "--- verdict\n" + json.dumps(verdict, indent=1)[:3000],)

    chk.eq(rep.returncode, 0, "replay exit status")
    for key, want in (("recorded", 1), ("exact", 1), ("substituted", 0), ("diverged", 0),
                      ("missing", 0), ("unused", 0), ("exchanges_pass", True), ("pass", True)):
        chk.eq(verdict.get(key), want, f"verdict {key}")
    chk.eq([r.get("kind") for r in verdict.get("requests") or []], ["exact"], "request kinds")
    if sentinel is not None:
        chk.eq(sentinel.connections, 0, "connections to the old upstream during replay")

    # the client saw the same thing, byte for byte and frame for frame
    for key in ("status", "reason", "http_version", "headers", "body_sha256", "body_len",
                "frames", "frames_sha256", "exception"):
        chk.eq(again.get(key), live.get(key), f"replay vs live: {key}")
    chk.eq(again, live, "replay vs live: whole client observation")
    chk.done()
