"""Recording and replaying (``proxy/record.py``, ``proxy/replay.py``) in
this process: the proxy on a real 127.0.0.1 socket as ``wiretape record``
and ``wiretape replay`` wire it, a raw or httpx client, and for recording a
real origin on 127.0.0.1 (the fake provider, or a raw upstream that writes
recorded provider bytes). Checked: what the client got (status, head bytes,
chunks), what the run file holds afterwards, and each replay decision."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.utils import accept_key

from support.inproc import RawClient, in_loop, listening, request_bytes
from support.raw_upstream import (
    RawUpstream,
    Reply,
    Write,
    case_replies,
    cases_dir,
    parse_http_message,
)
from wiretape.model import (
    Ending,
    Exchange,
    Frame,
    Message,
    Opcode,
    Origin,
    Redaction,
    Request,
    Response,
    RunInfo,
)
from wiretape.origins import parse_upstream
from wiretape.playback.decide import Mode, Policy
from wiretape.proxy import replay, upstream
from wiretape.proxy.http1 import ErrorBody
from wiretape.proxy.record import Recorder, origin_error
from wiretape.proxy.replay import HeadRedactor, Replayer, Tape
from wiretape.proxy.shapes import error_response
from wiretape.redaction import STANDARD, LiveRedactor, fingerprint, redact_request
from wiretape.store.runfile import RunFile, open_run
from wiretape.testing import AsyncFakeProvider, TextTurn

INFO = RunInfo(run_id="run_0123456789ab", wiretape_version="test", argv=(), cwd="/",
               env_names=(), origins=(Origin("openai", "http://127.0.0.1:9/v1", 0, ()),),
               started_at_ns=1_760_000_000_000_000_000, mode="serve")

CHAT = "/v1/chat/completions"
JSON = [("Content-Type", "application/json")]


def chat(content: str, *, stream: bool = False) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": content}],
                       "stream": stream}).encode()


def error_body_for(base: str) -> ErrorBody:
    """The refusals' shape for an origin's base path, as the launchers pick it."""
    return lambda status, code, message: error_response(base.encode(), status, code, message)


# --- recording ----------------------------------------------------------------------------


@dataclass
class Recording:
    port: int
    recorder: Recorder


@contextlib.asynccontextmanager
async def recording(path: Path, upstream: str, origin: str = "openai"
                    ) -> AsyncIterator[Recording]:
    """A recorder for ``origin`` in front of ``upstream``, writing ``path``;
    on exit every exchange is committed and the file closed."""
    run = RunFile.create(path, INFO)
    recorder = Recorder(run)
    try:
        async with listening(lambda conn_id: recorder.handler(origin, upstream, conn_id),
                             error_body=error_body_for(parse_upstream(upstream)[2])
                             ) as (_, port):
            yield Recording(port, recorder)
    finally:
        await recorder.aclose()
        run.close(compact=True)


def stored(path: Path) -> list[Exchange]:
    """The exchanges in the run file, read back from disk."""
    with open_run(path) as run:
        return run.exchanges()


def assert_frames(response: Response, chunks: list[bytes]) -> None:
    """The recorded frames are the chunks the client got, in rising time."""
    assert [f.data for f in response.frames] == chunks
    assert response.body == b"".join(chunks)
    offsets = [f.offset_ns for f in response.frames]
    assert all(0 < a < b for a, b in itertools.pairwise(offsets)), offsets


def unused_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def streamed_reply(events: list[bytes], gap_s: float) -> Reply:
    """A chunked event stream: one event per chunk, ``gap_s`` apart."""
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\nX-Request-ID: req_stream\r\n\r\n")
    writes = [Write(0.0, head, "head")]
    writes += [Write(i * gap_s, b"%x\r\n%s\r\n" % (len(e), e), "chunk", e)
               for i, e in enumerate(events)]
    writes.append(Write(len(events) * gap_s, b"0\r\n\r\n", "terminator"))
    return Reply("stream", tuple(writes))


@in_loop
async def test_record_relays_a_provider_stream_verbatim_and_stores_it(tmp_path: Path) -> None:
    """A recorded OpenAI stream (headers in the provider's order and case,
    eight chunks) reaches the client as the origin wrote it, and is stored
    as eight frames."""
    [reply] = case_replies(cases_dir() / "B01", time_scale=0.02)
    origin_head = parse_http_message(reply.wire)
    body = chat("Name the three primary colours.", stream=True)
    with RawUpstream(reply) as up:
        async with (recording(tmp_path / "r.wtape", up.url + "/v1") as rec,
                    await RawClient.open(rec.port) as client):
            await client.send(request_bytes(
                "POST", CHAT, body, [*JSON, ("Authorization", "Bearer sk-test-1234")]))
            got = await client.response()
    assert got.head == origin_head.head  # order, case, Connection and framing in place
    assert got.chunks == reply.chunk_payloads and len(got.chunks) == 8
    # the origin got the request with its own Host and nothing hop-by-hop
    [seen] = up.received
    assert (seen.method, seen.target, seen.body) == (b"POST", CHAT.encode(), body)
    assert seen.headers == ((b"Host", up.url.removeprefix("http://").encode()),
                            (b"Content-Type", b"application/json"),
                            (b"Authorization", b"Bearer sk-test-1234"),
                            (b"Content-Length", str(len(body)).encode()))
    [ex] = stored(tmp_path / "r.wtape")
    assert (ex.seq, ex.connection_id, ex.origin, ex.ending) == (0, 1, "openai", Ending.COMPLETE)
    assert ex.request == Request(b"POST", CHAT.encode(), (
        (b"Host", b"127.0.0.1"), (b"Content-Type", b"application/json"),
        (b"Authorization", b"Bearer <redacted>"), (b"Content-Length", str(len(body)).encode())),
        body)
    assert ex.response is not None
    assert (ex.response.status, ex.response.reason) == (200, b"OK")
    assert ex.response.headers == origin_head.headers
    assert_frames(ex.response, got.chunks)
    assert ex.ttfb_ns is not None and ex.ttfb_ns <= ex.response.frames[0].offset_ns
    assert ex.response.frames[-1].offset_ns <= ex.duration_ns


@in_loop
async def test_record_two_requests_on_one_keep_alive_connection(tmp_path: Path) -> None:
    async with (AsyncFakeProvider([TextTurn("one"), TextTurn("two")]) as fp,
                recording(tmp_path / "r.wtape", fp.url + "/v1") as rec,
                await RawClient.open(rec.port) as client):
        replies = []
        for word in ("first", "second"):
            await client.send(request_bytes("POST", CHAT, chat(word), JSON))
            replies.append(await client.response())
        assert [r.json()["messages"][0]["content"] for r in fp.requests] == ["first", "second"]
    assert [r.status for r in replies] == [200, 200]
    assert [r.json()["choices"][0]["message"]["content"] for r in replies] == ["one", "two"]
    exchanges = stored(tmp_path / "r.wtape")
    assert [e.seq for e in exchanges] == [0, 1]
    assert [e.connection_id for e in exchanges] == [1, 1]
    assert [e.request.body for e in exchanges] == [chat("first"), chat("second")]
    assert [e.response.body for e in exchanges if e.response] == [r.body for r in replies]
    assert [e.response.headers for e in exchanges if e.response] == [
        tuple(r.headers) for r in replies]
    assert [e.ending for e in exchanges] == [Ending.COMPLETE] * 2


@in_loop
async def test_record_an_httpx_client_with_its_key_redacted_on_disk(tmp_path: Path) -> None:
    key = "sk-proj-" + "k" * 40
    async with (AsyncFakeProvider([TextTurn("pong")]) as fp,
                recording(tmp_path / "r.wtape", fp.url + "/v1") as rec):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{rec.port}/v1",
                                     headers={"Authorization": f"Bearer {key}"}) as client:
            response = await client.post("/chat/completions", json={"model": "m", "messages": [
                {"role": "user", "content": f"ping, my key is {key}"}]})
        [seen] = fp.requests
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "pong"
    assert seen.header("authorization") == f"Bearer {key}"  # the origin got the real key
    assert key in seen.body.decode()
    [ex] = stored(tmp_path / "r.wtape")
    assert (b"Authorization", b"Bearer <redacted>") in ex.request.headers
    assert key.encode() not in ex.request.body and b"my key is <redacted*" in ex.request.body
    assert len(ex.request.body) == len(seen.body)  # masked in place, same length
    with open_run(tmp_path / "r.wtape") as run:
        facts = sorted(run.redactions(), key=lambda f: f[1].location)
    assert facts == [(0, Redaction("request-body", "openai-key", fingerprint(key.encode()))),
                     (0, Redaction("request-header", "Authorization", fingerprint(key.encode())))]


@in_loop
async def test_record_relays_an_sse_stream_frame_by_frame(tmp_path: Path) -> None:
    """Each event is relayed as the origin sends it (the client has the
    first before the origin sent the last), one frame per event."""
    async with (AsyncFakeProvider([TextTurn("one two three")], delay=0.04) as fp,
                recording(tmp_path / "r.wtape", fp.url + "/v1") as rec,
                await RawClient.open(rec.port) as client):
        sent_ns = time.monotonic_ns()
        await client.send(request_bytes("POST", CHAT, chat("count", stream=True), JSON))
        got = await client.response()
    events = got.body.split(b"\n\n")
    assert events[-1] == b"" and events[-2] == b"data: [DONE]"
    assert got.chunks == [e + b"\n\n" for e in events[:-1]]  # one event per chunk
    [ex] = stored(tmp_path / "r.wtape")
    assert ex.response is not None
    assert_frames(ex.response, got.chunks)
    offsets = [f.offset_ns for f in ex.response.frames]
    assert offsets[-1] - offsets[0] >= 0.04e9 * (len(offsets) - 1) * 0.75  # the origin's pace
    assert got.chunk_ns[0] - sent_ns < offsets[-1]  # not buffered
    assert all(t - sent_ns >= o for t, o in zip(got.chunk_ns, offsets, strict=True))


@in_loop
async def test_record_a_client_leaving_mid_stream_ends_client_gone(tmp_path: Path) -> None:
    events = [b"data: {\"n\": %d}\n\n" % i for i in range(40)]
    with RawUpstream(streamed_reply(events, 0.015)) as up:
        async with recording(tmp_path / "r.wtape", up.url + "/v1") as rec:
            client = await RawClient.open(rec.port)
            await client.send(request_bytes("POST", CHAT, chat("go", stream=True), JSON))
            await client.reader.readuntil(events[1])
            await client.aclose()
        # the recorder stopped reading the origin: its writes fail early
        assert await asyncio.to_thread(up.wait_served, 1, 5.0)
        assert up.served[0].ended == "client-gone"
        assert len(up.served[0].chunk_writes()) < len(events)
    [ex] = stored(tmp_path / "r.wtape")
    assert ex.ending is Ending.CLIENT_GONE
    # why, for the summary's line (exchange #0 client_gone: ...)
    assert ex.error is not None and ex.error.startswith(
        "the client left during the response's body: "), ex.error
    assert ex.response is not None and ex.response.status == 200
    frames = [f.data for f in ex.response.frames]
    assert 2 <= len(frames) < len(events)
    assert frames == events[:len(frames)]


@pytest.mark.parametrize(("origin", "base", "target", "shape"), [
    ("openai", "/v1", CHAT, "openai"),
    ("anthropic", "", "/v1/messages", "anthropic"),
])
@in_loop
async def test_record_an_unreachable_origin_answers_502_and_stores_why(
        tmp_path: Path, origin: str, base: str, target: str, shape: str) -> None:
    upstream = f"http://127.0.0.1:{unused_port()}{base}"
    async with (recording(tmp_path / "r.wtape", upstream, origin) as rec,
                await RawClient.open(rec.port) as client):
        replies = []
        for _ in range(2):  # the connection stays usable
            await client.send(request_bytes("POST", target, chat("hi"), JSON))
            replies.append(await client.response())
    for got in replies:
        assert (got.status, got.reason) == (502, b"Bad Gateway")
        assert [k for k, _ in got.headers] == [
            b"Content-Type", b"Content-Length", b"x-should-retry", b"x-wiretape-error"]
        assert got.header("x-should-retry") == b"false"
        assert got.header("x-wiretape-error") == b"origin_unreachable"
        error = got.json()
        if shape == "anthropic":
            assert error["type"] == "error" and error["error"]["type"] == "api_error"
            message = error["error"]["message"]
        else:
            assert error["error"]["code"] == "origin_unreachable"
            message = error["error"]["message"]
        assert message.startswith(f"wiretape: origin {upstream} unreachable: ConnectError")
    exchanges = stored(tmp_path / "r.wtape")
    assert [(e.seq, e.origin, e.ending) for e in exchanges] == [
        (0, origin, Ending.ORIGIN_UNREACHABLE), (1, origin, Ending.ORIGIN_UNREACHABLE)]
    assert all(e.error and e.error.startswith("ConnectError") for e in exchanges)
    assert all(e.ttfb_ns is None for e in exchanges)  # the origin sent no byte
    for e, got in zip(exchanges, replies, strict=True):  # the answer the agent got, as it got it
        assert e.response is not None
        assert (e.response.status, e.response.reason) == (got.status, got.reason)
        assert list(e.response.headers) == got.headers and e.response.body == got.body


@in_loop
async def test_record_an_origin_dying_mid_stream_ends_origin_reset(tmp_path: Path) -> None:
    """Anthropic's stream cut inside a chunk: the client's connection is cut
    too (no terminating chunk), and what arrived is stored."""
    [reply] = case_replies(cases_dir() / "B20", time_scale=0.02)
    with RawUpstream(reply) as up:
        async with (recording(tmp_path / "r.wtape", up.url, "anthropic") as rec,
                    await RawClient.open(rec.port) as client):
            await client.send(request_bytes("POST", "/v1/messages", chat("moon"), JSON))
            got = await client.response()
    assert got.status == 200 and not got.complete
    assert got.body == reply.payload  # everything up to the cut, the partial chunk included
    [ex] = stored(tmp_path / "r.wtape")
    assert ex.ending is Ending.ORIGIN_RESET
    assert ex.error is not None and ex.error.startswith("RemoteProtocolError")
    assert ex.response is not None and ex.response.body == reply.payload
    assert_frames(ex.response, got.chunks)


# --- replaying ------------------------------------------------------------------------------


SSE_HEADERS = ((b"Content-Type", b"text/event-stream; charset=utf-8"),
               (b"Transfer-Encoding", b"chunked"), (b"X-Request-ID", b"req_rec"),
               (b"openai-processing-ms", b"7"))
FRAMES = (Frame(20_000_000, b'data: {"n":1}\n\n'), Frame(30_000_000, b'data: {"n":2}\n\n'),
          Frame(40_000_000, b"data: [DONE]\n\n"))


def recorded(seq: int, body: bytes, *, target: str = CHAT, frames: tuple[Frame, ...] = FRAMES,
             ending: Ending = Ending.COMPLETE, response: bool = True) -> Exchange:
    """An exchange as the recorder stores one for ``request_bytes(target, body, JSON)``."""
    request = Request(b"POST", target.encode(), ((b"Host", b"127.0.0.1"),
                      (b"Content-Type", b"application/json"),
                      (b"Content-Length", str(len(body)).encode())), body)
    return Exchange(seq, 1, "openai", INFO.started_at_ns + seq, request,
                    Response(200, b"OK", SSE_HEADERS, frames) if response else None,
                    ending, 10_000_000 if response else None, 50_000_000,
                    None if response else "ConnectError: [Errno 111] Connection refused")


def tape(path: Path, *exchanges: Exchange) -> Path:
    run = RunFile.create(path, INFO)
    for exchange in exchanges:
        run.write_exchange(exchange)
    run.close(compact=True)
    return path


@dataclass
class Replaying:
    port: int
    replayer: Replayer
    stops: list[str]


@contextlib.asynccontextmanager
async def replaying(path: Path, mode: Mode, *, base: str = "/v1") -> AsyncIterator[Replaying]:
    """A replayer of the run at ``path`` in ``mode``, its log written to a
    folder of replay logs beside it."""
    run = open_run(path, replay_logs=path.parent / "replays")
    run.prepare_for_writes()
    stops: list[str] = []
    replayer = Replayer(run, run.exchanges(), Policy(mode=mode), on_stop=stops.append)
    run.start_replay(replayer.replay_id, mode.value, {})
    try:
        async with listening(lambda conn_id: replayer.handler("openai", conn_id),
                             error_body=error_body_for(base)) as (_, port):
            yield Replaying(port, replayer, stops)
        await replayer.finish()
    finally:
        run.close(compact=True)


def logged(path: Path, replay_id: str) -> list[tuple[int, str, int | None, bool, str]]:
    """The replay log as stored: (index, kind, seq, served, target) per request."""
    with open_run(path, replay_logs=path.parent / "replays") as run:
        return [(r["index"], r["kind"], r["seq"], r["served"], r["target"])
                for r in run.replay_requests(replay_id)]


SSE_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
            b"Transfer-Encoding: chunked\r\nX-Request-ID: req_rec\r\n"
            b"openai-processing-ms: 7\r\n\r\n")


@in_loop
async def test_replay_exact_serves_the_recorded_head_and_frames(tmp_path: Path) -> None:
    path = tape(tmp_path / "r.wtape", recorded(0, chat("hi")), recorded(1, chat("again")))
    async with replaying(path, Mode.STRICT) as rp, await RawClient.open(rp.port) as client:
        await client.send(request_bytes("POST", CHAT, chat("hi"), JSON))
        first = await client.response()
        await client.send(request_bytes("POST", CHAT, chat("again"), JSON))  # same connection
        second = await client.response()
    for got in (first, second):
        assert got.head == SSE_HEAD
        assert got.chunks == [f.data for f in FRAMES]  # one chunk per recorded frame
    assert rp.stops == []
    assert logged(path, rp.replayer.replay_id) == [
        (0, "exact", 0, True, CHAT), (1, "exact", 1, True, CHAT)]


@in_loop
async def test_replay_answers_before_its_log_row_is_stored(tmp_path: Path) -> None:
    """The log rows are written off the client's path, in order: a request
    is answered while the row before it is still being written, and
    ``finish`` stores them all, each with the time it was decided."""
    big = chat("x" * 10_000)  # decided off the loop
    path = tape(tmp_path / "r.wtape", recorded(0, chat("hi")), recorded(1, big),
                recorded(2, chat("again")))
    writing = threading.Event()
    async with replaying(path, Mode.STRICT) as rp, await RawClient.open(rp.port) as client:
        run = rp.replayer._run
        store = run.add_replay_request

        def held(*args: object, **kwargs: Any) -> None:
            writing.wait(30)
            store(*args, **kwargs)  # type: ignore[arg-type]

        run.add_replay_request = held  # type: ignore[method-assign]
        answers = []
        for body in (chat("hi"), big, chat("again")):
            await client.send(request_bytes("POST", CHAT, body, JSON))
            answers.append(await asyncio.wait_for(client.response(), 20))
            assert rp.replayer.rows[-1]["kind"] == "exact"
        assert logged(path, rp.replayer.replay_id) == []  # nothing stored yet
        released = time.time_ns()
        writing.set()
    assert [a.chunks for a in answers] == [[f.data for f in FRAMES]] * 3
    assert logged(path, rp.replayer.replay_id) == [
        (0, "exact", 0, True, CHAT), (1, "exact", 1, True, CHAT), (2, "exact", 2, True, CHAT)]
    with open_run(path, replay_logs=path.parent / "replays") as stored_run:
        times = [r["decided_at_ns"] for r in stored_run.replay_requests(rp.replayer.replay_id)]
    assert times == sorted(times) and times[-1] < released  # when decided, not written


def counted_hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the functions given to ``asyncio.to_thread`` from now on."""
    hops: list[str] = []
    real = asyncio.to_thread

    async def counted(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        hops.append(fn.__name__)
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    return hops


@in_loop
async def test_one_thread_hop_at_most_and_none_for_a_small_exact_request(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A small exact request is redacted and decided on the loop; a small
    one that is not exact takes one hop; a large one whose body is a
    recorded one the prescan saw redaction leave as it is, none (the
    prescan itself is one hop, once)."""
    hops = counted_hops(monkeypatch)
    big = chat("x" * 10_000)
    path = tape(tmp_path / "r.wtape", recorded(0, chat("hi")), recorded(1, big),
                recorded(2, chat("again")))
    async with replaying(path, Mode.DIAGNOSTIC) as rp, await RawClient.open(rp.port) as client:
        await rp.replayer.prescanned()
        for body in (chat("hi"), big, chat("other")):
            await client.send(request_bytes("POST", CHAT, body, JSON))
            await client.response()
    assert [row["kind"] for row in rp.replayer.rows] == ["exact", "exact", "diverged"]
    assert hops == ["_scan_recorded", "_judge"]


@in_loop
async def test_a_large_body_is_scanned_unless_its_recording_is_known_clean(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A large live body equal to a recorded one that redaction would change
    (a key left in it, as an older or imported run may have) is redacted
    off the loop as ever: the key is masked, so it diverges; one equal to a
    recorded body not looked at yet (the prescan stopped) is scanned too."""
    hops = counted_hops(monkeypatch)
    key = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2
    leaky = chat(f"use {key} " + "x" * 10_000)
    big = chat("y" * 10_000)
    path = tape(tmp_path / "r.wtape", recorded(0, leaky), recorded(1, big))
    async with replaying(path, Mode.DIAGNOSTIC) as rp, await RawClient.open(rp.port) as client:
        await rp.replayer.prescanned()
        assert list(rp.replayer._clean) == [1]  # the key would be masked in 0
        rp.replayer._clean.clear()  # as if the prescan had not reached 1
        for body in (leaky, big):
            await client.send(request_bytes("POST", CHAT, body, JSON))
            await client.response()
    assert [row["kind"] for row in rp.replayer.rows] == ["diverged", "exact"]
    assert hops == ["_scan_recorded", "_decide", "_decide"]


@in_loop
async def test_no_recorded_body_is_read_on_the_loop_before_the_prescan_looked_at_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Looking for masks in the recorded bodies reads them all: while the
    prescan has not done it, a small request goes off the loop (where that
    is done), so the loop never reads a recorded body."""
    looked: list[bool] = []  # per body looked at: on the loop's thread
    real_may_hold = Tape._may_hold_mask

    def may_hold(self: Tape, seq: int) -> bool:
        looked.append(threading.current_thread() is threading.main_thread())
        return real_may_hold(self, seq)

    release = threading.Event()
    real_look = Tape.look_for_masks

    def held_look(self: Tape, stop: Callable[[], bool] = lambda: False) -> None:
        release.wait(20)
        real_look(self, stop)

    monkeypatch.setattr(Tape, "_may_hold_mask", may_hold)
    monkeypatch.setattr(Tape, "look_for_masks", held_look)
    hops = counted_hops(monkeypatch)
    path = tape(tmp_path / "r.wtape", recorded(0, chat("hi")), recorded(1, chat("y" * 10_000)))
    async with replaying(path, Mode.DIAGNOSTIC) as rp, await RawClient.open(rp.port) as client:
        await client.send(request_bytes("POST", CHAT, chat("hi"), JSON))
        await client.response()
        release.set()
        await rp.replayer.prescanned()
    assert [row["kind"] for row in rp.replayer.rows] == ["exact"]
    assert hops == ["_scan_recorded", "_decide"]
    assert looked and not any(looked)


def test_the_redactor_sees_the_recorded_requests_only_when_one_holds_a_mask() -> None:
    """Secrets are learned only where the recording has a mask: with none
    left on a live request's route, the redactor is given none to search;
    else all that are left (and a route none is on: all)."""
    plain = [recorded(seq, chat(f"turn {seq}")) for seq in range(10)]
    masked = recorded(10, chat("key <redacted*****> here"))
    stars = recorded(11, chat("rule ****"))
    live = plain[0].request
    assert Tape.of(plain).recorded_for(live) == []
    assert Tape.of([*plain[:3], masked]).recorded_for(live) == [
        e.request for e in [*plain[:3], masked]]
    assert Tape.of([*plain[:3], stars]).recorded_for(live) != []
    tape_ = Tape.of([*plain, masked])
    assert tape_.recorded_for(live) == [e.request for e in [*plain, masked]]
    tape_.consume(10)
    assert tape_.recorded_for(live) == []
    other = Request(b"POST", b"/v1/embeddings", live.headers, live.body)
    assert Tape.of(plain).recorded_for(other) == [e.request for e in plain]


@pytest.mark.parametrize("before", [0, 7])
def test_a_secret_masked_in_the_recording_is_learned_from_the_live_request(before: int) -> None:
    """The live request carries the secret where the recorded one has its
    mask (after ``before`` recorded requests on the route without one): it
    is learned, masked, and the request is exact."""
    secret = b"tok-9f8e7d6c5b4a39281706"
    others = [recorded(seq, chat(f"turn {seq}")) for seq in range(before)]
    masked = recorded(before, chat("use " + "<redacted" + "*" * (len(secret) - 10) + ">"))
    replayer = Replayer(None, [*others, masked], Policy(mode=Mode.DIAGNOSTIC),  # type: ignore[arg-type]
                        redactor=LiveRedactor(prints={fingerprint(secret): "env:TOKEN"}))
    body = chat("use " + secret.decode())
    request = Request(b"POST", CHAT.encode(), masked.request.headers, body)
    live, decision, explanation = replayer._decide(request)
    assert live.body == masked.request.body
    assert decision is not None and (decision.kind, decision.seq) == ("exact", before)
    assert explanation is None


@in_loop
async def test_replay_diverged_in_strict_mode_is_rejected_and_stops(tmp_path: Path) -> None:
    path = tape(tmp_path / "r.wtape", recorded(0, chat("hi")), recorded(1, chat("again")))
    async with replaying(path, Mode.STRICT) as rp, await RawClient.open(rp.port) as client:
        await client.send(request_bytes("POST", CHAT, chat("hello"), JSON))
        rejected = await client.response()
        await client.send(request_bytes("POST", CHAT, chat("again"), JSON))  # exact, too late
        after = await client.response()
    assert (rejected.status, rejected.reason) == (400, b"Bad Request")
    assert rejected.headers == [
        (b"Content-Type", b"application/json"),
        (b"Content-Length", str(len(rejected.body)).encode()),
        (b"x-should-retry", b"false"), (b"x-wiretape-error", b"replay_diverged")]
    error = rejected.json()["error"]
    assert (error["type"], error["code"]) == ("wiretape_error", "replay_diverged")
    assert error["message"] == (f"wiretape replay: POST {CHAT} does not match recorded "
                                "exchange #0 (diverged: body differs)")
    assert rp.stops == [f"diverged request POST {CHAT}"]
    assert after.status == 400 and after.json()["error"]["code"] == "replay_stopped"
    assert logged(path, rp.replayer.replay_id) == [(0, "diverged", 0, False, CHAT)]
    [row] = rp.replayer.rows
    assert row["detail"]["fields"] == ["body"]
    assert [s["pointer"] for s in row["detail"]["explanation"]["spans"]] == ["/messages/0/content"]


@in_loop
async def test_replay_diverged_in_diagnostic_mode_is_served_and_labelled(tmp_path: Path) -> None:
    path = tape(tmp_path / "r.wtape", recorded(0, chat("hi")))
    async with replaying(path, Mode.DIAGNOSTIC) as rp, await RawClient.open(rp.port) as client:
        await client.send(request_bytes("POST", CHAT, chat("hello"), JSON))
        served = await client.response()
        await client.send(request_bytes("POST", CHAT, chat("hi"), JSON))  # #0 is used up
        missing = await client.response()
    assert served.head == SSE_HEAD and served.chunks == [f.data for f in FRAMES]
    assert missing.status == 400 and missing.header("x-should-retry") == b"false"
    assert missing.json()["error"]["code"] == "replay_missing"
    assert rp.stops == []  # diagnostic goes on
    assert logged(path, rp.replayer.replay_id) == [
        (0, "diverged", 0, True, CHAT), (1, "missing", None, False, CHAT)]
    explanation = rp.replayer.rows[0]["detail"]["explanation"]
    assert "at /messages/0/content" in explanation["first_line"]


@in_loop
async def test_replay_missing_gets_the_providers_error_shape_and_stops_strict(
        tmp_path: Path) -> None:
    path = tape(tmp_path / "r.wtape", recorded(0, chat("hi")))
    async with replaying(path, Mode.STRICT, base="") as rp, await RawClient.open(rp.port) as c:
        await c.send(request_bytes("POST", "/v1/messages", chat("hi"), JSON))
        got = await c.response()
    assert (got.status, got.header("x-should-retry")) == (400, b"false")
    assert got.json() == {"type": "error", "error": {
        "type": "invalid_request_error",
        "message": "wiretape replay: no recorded exchange left for POST /v1/messages (missing)"}}
    assert rp.stops == ["missing request POST /v1/messages"]
    assert logged(path, rp.replayer.replay_id) == [(0, "missing", None, False, "/v1/messages")]


@in_loop
async def test_replay_cuts_off_where_the_recording_was_cut_off(tmp_path: Path) -> None:
    path = tape(tmp_path / "r.wtape",
                recorded(0, chat("cut"), frames=FRAMES[:2], ending=Ending.ORIGIN_RESET),
                recorded(1, chat("down"), response=False, ending=Ending.ORIGIN_UNREACHABLE))
    async with replaying(path, Mode.STRICT) as rp, await RawClient.open(rp.port) as client:
        await client.send(request_bytes("POST", CHAT, chat("cut"), JSON))
        cut = await client.response()
        assert await client.ended()
        async with await RawClient.open(rp.port) as client:
            await client.send(request_bytes("POST", CHAT, chat("down"), JSON))
            down = await client.response()
    assert cut.head == SSE_HEAD
    assert (cut.chunks, cut.complete) == ([f.data for f in FRAMES[:2]], False)
    assert (down.status, down.header("x-wiretape-error")) == (502, b"origin_unreachable")
    assert "ConnectError: [Errno 111] Connection refused" in down.json()["error"]["message"]
    assert logged(path, rp.replayer.replay_id) == [
        (0, "exact", 0, True, CHAT), (1, "exact", 1, True, CHAT)]


@in_loop
async def test_record_then_replay_gives_the_client_the_same_bytes(tmp_path: Path) -> None:
    [reply] = case_replies(cases_dir() / "B01", time_scale=0.01)
    body = chat("Name the three primary colours.", stream=True)
    raw = request_bytes("POST", CHAT, body, JSON)
    with RawUpstream(reply) as up:
        async with (recording(tmp_path / "r.wtape", up.url + "/v1") as rec,
                    await RawClient.open(rec.port) as client):
            await client.send(raw)
            live = await client.response()
    async with (replaying(tmp_path / "r.wtape", Mode.STRICT) as rp,
                await RawClient.open(rp.port) as client):
        await client.send(raw)
        again = await client.response()
    assert (again.head, again.chunks) == (live.head, live.chunks)
    assert [k for k, *_ in logged(tmp_path / "r.wtape", rp.replayer.replay_id)] == [0]
    assert rp.replayer.rows[0]["kind"] == "exact"


@in_loop
async def test_replay_of_an_unreachable_origin_gives_the_recorded_502(tmp_path: Path) -> None:
    upstream = f"http://127.0.0.1:{unused_port()}/v1"
    raw = request_bytes("POST", CHAT, chat("hi"), JSON)
    async with (recording(tmp_path / "r.wtape", upstream) as rec,
                await RawClient.open(rec.port) as client):
        await client.send(raw)
        live = await client.response()
    async with (replaying(tmp_path / "r.wtape", Mode.STRICT) as rp,
                await RawClient.open(rp.port) as client):
        await client.send(raw)
        again = await client.response()
    assert rp.replayer.rows[0]["kind"] == "exact"
    assert (again.status, again.head, again.body) == (live.status, live.head, live.body)


@in_loop
async def test_replay_of_an_origin_that_timed_out_gives_the_recorded_504(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upstream, "DEFAULT_TIMEOUT", upstream.Timeouts(connect=5.0, read=0.3))
    held: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # reads the request, never answers

    origin = await asyncio.start_server(silent, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{origin.sockets[0].getsockname()[1]}/v1"
    raw = request_bytes("POST", CHAT, chat("hi"), JSON)
    try:
        async with (recording(tmp_path / "r.wtape", url) as rec,
                    await RawClient.open(rec.port) as client):
            await client.send(raw)
            live = await client.response()
    finally:
        for writer in held:
            writer.close()
        origin.close()
    [ex] = stored(tmp_path / "r.wtape")
    assert (ex.ending, ex.ttfb_ns) == (Ending.TIMEOUT, None)
    assert ex.error is not None and ex.error.startswith("ReadTimeout")
    assert (live.status, live.reason) == (504, b"Gateway Timeout")
    assert live.json()["error"]["code"] == "origin_timeout"
    assert live.json()["error"]["message"].startswith(f"wiretape: origin {url} did not answer")
    async with (replaying(tmp_path / "r.wtape", Mode.STRICT) as rp,
                await RawClient.open(rp.port) as client):
        await client.send(raw)
        again = await client.response()
        await client.send(raw)  # the connection was kept open, as when recorded
        missing = await client.response()
    assert (again.head, again.body) == (live.head, live.body)
    assert rp.replayer.rows[0]["kind"] == "exact"
    assert missing.json()["error"]["code"] == "replay_missing"


@in_loop
async def test_a_run_without_the_stored_502_names_the_recorded_upstream(tmp_path: Path) -> None:
    """Runs written before the 502 was stored: it is made again, naming the
    origin's upstream URL from the run's metadata, as the recording did."""
    path = tape(tmp_path / "r.wtape",
                recorded(0, chat("down"), response=False, ending=Ending.ORIGIN_UNREACHABLE))
    async with replaying(path, Mode.STRICT) as rp, await RawClient.open(rp.port) as client:
        await client.send(request_bytes("POST", CHAT, chat("down"), JSON))
        down = await client.response()
    assert down.json()["error"]["message"] == (
        "wiretape: origin http://127.0.0.1:9/v1 unreachable: "
        "ConnectError: [Errno 111] Connection refused")


# --- writes to the client -------------------------------------------------------------------


def writes_from(port: Callable[[], int], monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every write the proxy listening on ``port()`` makes to its clients
    (``StreamWriter.write`` on a socket bound to that port), in order."""
    writes: list[bytes] = []
    real = asyncio.StreamWriter.write

    def counted(self: asyncio.StreamWriter, data: Any) -> None:
        sockname = self.get_extra_info("sockname")
        if sockname is not None and sockname[1] == port():
            writes.append(bytes(data))
        real(self, data)

    monkeypatch.setattr(asyncio.StreamWriter, "write", counted)
    return writes


@in_loop
async def test_a_recorded_answer_of_known_length_reaches_the_client_in_one_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its head is held until its body is committed and sent with it: the
    client is woken once per answer, not once for the head and once more."""
    ports: list[int] = []
    writes = writes_from(lambda: ports[0] if ports else -1, monkeypatch)
    async with (AsyncFakeProvider([TextTurn("one"), TextTurn("two")]) as fp,
                recording(tmp_path / "r.wtape", fp.url + "/v1") as rec,
                await RawClient.open(rec.port) as client):
        ports.append(rec.port)
        replies = []
        for word in ("first", "second"):
            await client.send(request_bytes("POST", CHAT, chat(word), JSON))
            replies.append(await client.response())
    assert [r.status for r in replies] == [200, 200]
    assert [b"content-length" in r.head.lower() for r in replies] == [True, True]
    assert writes == [r.head + r.body for r in replies]


@in_loop
async def test_a_replayed_answer_due_at_once_goes_out_in_one_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Played fast, a recorded stream's head, every chunk and the
    terminating chunk are one write."""
    ports: list[int] = []
    writes = writes_from(lambda: ports[0] if ports else -1, monkeypatch)
    path = tape(tmp_path / "r.wtape", recorded(0, chat("hi")))
    async with replaying(path, Mode.STRICT) as rp, await RawClient.open(rp.port) as client:
        ports.append(rp.port)
        await client.send(request_bytes("POST", CHAT, chat("hi"), JSON))
        got = await client.response()
    assert got.head == SSE_HEAD and got.chunks == [f.data for f in FRAMES]
    assert writes == [SSE_HEAD + b"".join(b"%x\r\n%s\r\n" % (len(f.data), f.data)
                                          for f in FRAMES) + b"0\r\n\r\n"]


WS_KEY = "dGhlIHNhbXBsZSBub25jZQ=="


def ws_session(seq: int, *messages: Message) -> Exchange:
    """A recorded WebSocket session: the upgrade, the origin's 101, ``messages``."""
    request = Request(b"GET", b"/v1/realtime", (
        (b"Host", b"127.0.0.1"), (b"Upgrade", b"websocket"), (b"Connection", b"Upgrade"),
        (b"Sec-WebSocket-Key", WS_KEY.encode()), (b"Sec-WebSocket-Version", b"13")), b"")
    response = Response(101, b"Switching Protocols", (
        (b"Upgrade", b"websocket"), (b"Connection", b"Upgrade"),
        (b"Sec-WebSocket-Accept", accept_key(WS_KEY).encode())), ())
    return Exchange(seq, 1, "openai", INFO.started_at_ns + seq, request, response,
                    Ending.COMPLETE, 1_000_000, 90_000_000, None, messages)


class LockWatchingRedactor(LiveRedactor):
    """Notes, at each live message it redacts, whether the replay's lock
    was held and on which thread it ran."""

    def __init__(self) -> None:
        super().__init__()
        self.lock: asyncio.Lock | None = None
        self.seen: list[tuple[bytes, bool, bool]] = []

    def text(self, data: bytes, location: str, recorded: bytes | None = None,
             facts: Any = None, *, message: bool = False) -> bytes:
        assert self.lock is not None
        self.seen.append((data[:5], self.lock.locked(),
                          threading.current_thread() is threading.main_thread()))
        return super().text(data, location, recorded, facts, message=message)


@in_loop
async def test_a_replayed_websocket_message_is_redacted_holding_the_replay_s_lock(
        tmp_path: Path) -> None:
    """Redaction learns into rules the replay's HTTP exchanges share: each
    live message is redacted holding the replayer's lock, a small one on
    the loop, a large one on a worker thread (as an HTTP request is)."""
    big = b'{"type":"big","text":"' + b"y" * 10_000 + b'"}'
    path = tape(tmp_path / "r.wtape", ws_session(
        0, Message("server", Opcode.TEXT, b'{"type":"hello"}', 1_000),
        Message("client", Opcode.TEXT, b'{"type":"ping"}', 2_000),
        Message("server", Opcode.TEXT, b'{"type":"pong"}', 3_000),
        Message("client", Opcode.TEXT, big, 4_000),
        Message("server", Opcode.TEXT, b'{"type":"done"}', 5_000)))
    run = open_run(path, replay_logs=path.parent / "replays")
    run.prepare_for_writes()
    redactor = LockWatchingRedactor()
    replayer = Replayer(run, run.exchanges(), Policy(mode=Mode.DIAGNOSTIC), redactor=redactor)
    redactor.lock = replayer._lock
    run.start_replay(replayer.replay_id, "diagnostic", {})
    try:
        async with listening(lambda conn_id: replayer.handler("openai", conn_id),
                             error_body=error_body_for("/v1")) as (_, port):
            ws = await ws_connect(f"ws://127.0.0.1:{port}/v1/realtime", compression=None,
                                  open_timeout=5)
            got = [await ws.recv()]
            await ws.send(b'{"type":"ping"}'.decode())
            got.append(await ws.recv())
            await ws.send(big.decode())
            got.append(await ws.recv())
            await ws.close()
        await replayer.finish()
    finally:
        run.close(compact=True)
    assert got == ['{"type":"hello"}', '{"type":"pong"}', '{"type":"done"}']
    # (the client's close, decided after these, is redacted likewise)
    assert redactor.seen[:2] == [(b'{"typ', True, True), (b'{"typ', True, False)]
    assert all(locked for _, locked, _ in redactor.seen)
    decisions = replayer.rows[0]["detail"]["messages"]["decisions"]
    assert [d["kind"] for d in decisions][:2] == ["exact", "exact"]


@in_loop
async def test_rows_decided_while_a_request_is_answered_are_stored_once_none_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A row is not handed to the writer while the next request is being
    answered (an agent that asks again at once is answered first); once no
    request is, the rows go together, in order, without waiting for
    ``finish``."""
    monkeypatch.setattr(replay, "_WRITE_LATEST_S", 60.0)
    batches: list[list[int]] = []
    real_store = Replayer._store

    def store(self: Replayer, rows: list[Any]) -> None:
        batches.append([row["index"] for row, _, _ in rows])
        real_store(self, rows)

    monkeypatch.setattr(Replayer, "_store", store)
    gate = asyncio.Event()
    served = 0
    real_serve = Replayer._serve

    async def serve(self: Replayer, conn: Any, exchange: Exchange) -> None:
        nonlocal served
        served += 1
        if served == 2:
            await gate.wait()
        await real_serve(self, conn, exchange)

    monkeypatch.setattr(Replayer, "_serve", serve)
    path = tape(tmp_path / "r.wtape", recorded(0, chat("hi")), recorded(1, chat("again")))
    async with replaying(path, Mode.STRICT) as rp, await RawClient.open(rp.port) as client:
        # pipelined: the second is read as soon as the first is answered
        await client.send(request_bytes("POST", CHAT, chat("hi"), JSON)
                          + request_bytes("POST", CHAT, chat("again"), JSON))
        first = await asyncio.wait_for(client.response(), 20)
        await asyncio.sleep(0.2)  # the second is held mid-answer meanwhile
        assert [row["index"] for row in rp.replayer.rows] == [0, 1]
        assert batches == []
        gate.set()
        second = await asyncio.wait_for(client.response(), 20)
        for _ in range(400):
            if len(logged(path, rp.replayer.replay_id)) == 2:
                break
            await asyncio.sleep(0.05)
        stored_before_finish = logged(path, rp.replayer.replay_id)
    assert [first.chunks, second.chunks] == [[f.data for f in FRAMES]] * 2
    assert batches == [[0, 1]]
    assert stored_before_finish == [(0, "exact", 0, True, CHAT), (1, "exact", 1, True, CHAT)]


def test_the_head_redactor_gives_what_redact_request_gives() -> None:
    """Each target and header field is redacted once per rules: the same
    request head as ``redact_request`` of the request without its body,
    however often a field comes again, and by the new rules once they
    change (a secret learned during the replay)."""
    key = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2
    learned = b"learned-secret-value-42"
    heads = [
        Request(b"POST", b"/v1/chat/completions", (
            (b"Authorization", b"Bearer " + key.encode()), (b"Content-Type", b"application/json"),
            (b"X-Note", b"uses " + key.encode()), (b"Content-Length", b"12")), b'{"a":"b"}'),
        Request(b"GET", b"/v1/models?api_key=" + key.encode() + b"&limit=2", (
            (b"x-api-key", b"plain-looking-key"), (b"Cookie", b"session=abc"),
            (b"X-Trace", learned)), b""),
        Request(b"POST", b"/v1/chat/completions", (
            (b"Authorization", b"Bearer " + key.encode()), (b"Content-Type", b"application/json"),
            (b"X-Trace", learned), (b"Content-Length", b"99")), b"{}", b"1.0"),
        Request(b"POST", b"/form?token=abc&x=1", (
            (b"Content-Type", b"application/x-www-form-urlencoded"),
            (b"Proxy-Authorization", b"Basic dXNlcjpwYXNz"),
            (b"X-Goog-Api-Key", b"AIza" + b"B" * 35)), b"password=hunter2"),
    ]
    head = HeadRedactor()
    for rules in (STANDARD, STANDARD.with_literals([("learned:x", learned)])):
        for request in heads * 2:
            expected = redact_request(Request(request.method, request.target, request.headers,
                                              b"", request.http_version), rules)[0]
            assert head.redacted(request, rules) == expected
    assert head.redacted(heads[1], rules).headers[2] != (b"X-Trace", learned)
    assert head.redacted(heads[1], STANDARD).headers[2] == (b"X-Trace", learned)


def test_the_tape_s_counts_give_what_going_through_the_route_gives() -> None:
    """``masks_known`` and ``recorded_for`` answer from counts kept as the
    tape changes: the same answers as looking at every request left on the
    route, whatever the order in which requests are looked at for masks
    and consumed (the prescan and the decisions interleave)."""
    rng = random.Random(7)
    masked_body = chat("key <redacted:sk-proj> here")
    exchanges = []
    for seq in range(40):
        target = rng.choice([CHAT, "/v1/embeddings", "/v1/models?x=1"])
        body = masked_body if rng.random() < 0.2 else chat(f"turn {seq}")
        exchanges.append(recorded(seq, body, target=target))
    tape_ = Tape.of(exchanges)
    truth = {e.seq: b"<redacted" in e.request.body for e in exchanges}
    probes = [Request(b"POST", t.encode(), (), b"") for t in
              (CHAT, "/v1/embeddings", "/v1/models?x=2", "/v1/other")]

    def expected(probe: Request) -> tuple[bool, list[int]]:
        left = tape_.remaining.route(probe.method, probe.path)
        known = all(c.seq in tape_._masked for c in left)
        if left and known and not any(truth[c.seq] for c in left):
            return known, []
        if left and not known and not any(truth[c.seq] for c in left):
            return known, []
        return known, [c.seq for c in tape_.remaining]

    order = list(range(40))
    rng.shuffle(order)
    steps = 0
    while len(tape_.remaining):
        if order and rng.random() < 0.5:
            tape_._may_hold_mask(order.pop())
        else:
            tape_.consume(rng.choice(tape_.remaining.seqs()))
        for probe in probes:
            known, seqs = expected(probe)
            assert tape_.masks_known(probe) is known
            by_seq = {id(e.request): e.seq for e in exchanges}
            assert [by_seq[id(r)] for r in tape_.recorded_for(probe)] == seqs
        steps += 1
    assert steps > 40 and tape_._masked  # both kinds of step were taken


@in_loop
async def test_record_an_origin_falling_silent_mid_stream_ends_timeout_with_what_came(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames closer together than the read timeout keep the stream going
    for longer than it; then silence for that long cuts it."""
    monkeypatch.setattr(upstream, "DEFAULT_TIMEOUT", upstream.Timeouts(connect=5.0, read=0.3))
    events = [b"data: {\"n\": %d}\n\n" % i for i in range(8)]
    held: list[asyncio.StreamWriter] = []

    async def stalls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        for event in events:  # 0.8 s of frames 0.1 s apart
            await asyncio.sleep(0.1)
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()

    origin = await asyncio.start_server(stalls, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{origin.sockets[0].getsockname()[1]}/v1"
    try:
        async with (recording(tmp_path / "r.wtape", url) as rec,
                    await RawClient.open(rec.port) as client):
            await client.send(request_bytes("POST", CHAT, chat("hi", stream=True), JSON))
            got = await client.response()
    finally:
        for writer in held:
            writer.close()
        origin.close()
    assert got.status == 200 and not got.complete  # cut: no terminating chunk
    assert got.chunks == events
    [ex] = stored(tmp_path / "r.wtape")
    assert ex.ending is Ending.TIMEOUT
    assert ex.error is not None and ex.error.startswith("ReadTimeout"), ex.error
    assert ex.response is not None
    assert_frames(ex.response, events)


def test_an_origin_error_is_stored_in_plain_words() -> None:
    """Bytes shown as bytes, and a response that breaks HTTP/1.1's framing
    said to be one (not a reset); a cut or a refusal as before."""
    assert origin_error(httpx.RemoteProtocolError(
        "illegal chunk header: bytearray(b'zz\\r\\n')")) == (
        "RemoteProtocolError: illegal chunk header: b'zz\\r\\n' "
        "(the origin's response is not valid HTTP/1.1, RFC 9112)")
    cut = "peer closed connection without sending complete message body: incomplete chunked read"
    assert origin_error(httpx.RemoteProtocolError(cut)) == f"RemoteProtocolError: {cut}"
    assert origin_error(httpx.ConnectError("[Errno 111] Connection refused")) == (
        "ConnectError: [Errno 111] Connection refused")
