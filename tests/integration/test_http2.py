"""HTTP/2 spoken to the proxy, with real clients in real processes and the
fake provider as the origin: curl ``--http2-prior-knowledge`` against
``wiretape serve --record`` then ``serve --replay``; httpx ``http2=True``
with 8 concurrent streams on one connection through ``wiretape record``
then ``wiretape replay``; and a malformed frame, which costs only its own
connection."""

from __future__ import annotations

import hashlib
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_proxy_edges import Conn, Wiretape, env, free_port, post

from support.h2wire import goaway_codes
from wiretape.store.runfile import open_run
from wiretape.testing import FakeProvider, TextTurn

CLIENTS = Path(__file__).resolve().parents[1] / "e2e" / "clients_modes"
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
H2_EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
CHAT = json.dumps({"model": "gpt-4o-mini", "stream": True,
                   "messages": [{"role": "user", "content": "Name three colours."}]})


def curl_h2(port: int) -> subprocess.CompletedProcess[bytes]:
    """curl with HTTP/2 prior knowledge: the body, then the version it used."""
    return subprocess.run(
        ["curl", "-sS", "-N", "--http2-prior-knowledge", "--fail-with-body",
         "-H", "content-type: application/json", "--data-binary", CHAT,
         "-w", "\nhttp_version %{http_version}\n",
         f"http://127.0.0.1:{port}/v1/chat/completions"],
        capture_output=True, timeout=30)


def test_curl_prior_knowledge_recorded_as_http2_and_replayed_exact(tmp_path: Path) -> None:
    port, run = free_port(), tmp_path / "h2c.wtape"
    with FakeProvider([TextTurn("Red, yellow and blue.")], delay=0.01) as fp:
        wt = Wiretape(tmp_path, "serve", "--record", "--upstream", f"{fp.url}/v1",
                      "--port", str(port), "-o", str(run))
        try:
            wt.read_urls()
            recorded = curl_h2(port)
            code, _, err = wt.stop(signal.SIGINT)
        finally:
            wt.kill()
    assert recorded.returncode == 0, recorded.stderr
    assert recorded.stdout.endswith(b"\nhttp_version 2\n")
    assert b"Red" in recorded.stdout and b"data: [DONE]" in recorded.stdout
    assert code == 0, err
    assert "1 exchange" in err and "NO EXCHANGE" not in err
    with open_run(run) as rf:
        [exchange] = rf.exchanges()
    assert exchange.request.http_version == b"2"
    assert exchange.response is not None
    assert exchange.response.http_version == b"1.1"  # the origin leg
    headers = dict(exchange.request.headers)
    assert headers[b"host"] == f"127.0.0.1:{port}".encode()
    assert headers[b"user-agent"].startswith(b"curl/")
    assert exchange.request.body == CHAT.encode()
    # what curl got is what was recorded, frame by frame
    assert recorded.stdout.startswith(exchange.response.body)
    assert len(exchange.response.frames) >= 3

    wt = Wiretape(tmp_path, "serve", "--replay", str(run), "--json")
    try:
        wt.read_urls()
        replayed = curl_h2(port)
        code, out, err = wt.stop(signal.SIGTERM)
    finally:
        wt.kill()
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == recorded.stdout
    assert code == 0, err
    verdict = json.loads(out[out.index("{"):])
    assert (verdict["recorded"], verdict["exact"], verdict["missing"], verdict["unused"]) == (
        1, 1, 0, 0)


def test_httpx_eight_concurrent_streams_on_one_connection(tmp_path: Path) -> None:
    run = tmp_path / "streams.wtape"
    command = [sys.executable, str(CLIENTS / "h2_concurrent.py"), "8"]
    script = [TextTurn(f"Answer number {i}: red, yellow and blue.") for i in range(8)]
    with FakeProvider(script, delay=0.05) as fp:
        done = subprocess.run([sys.executable, "-m", "wiretape", "record", "-o", str(run),
                               "--upstream", f"openai={fp.url}/v1", "--", *command],
                              cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 8 and all(" HTTP/2 200 " in line for line in lines), lines
    with open_run(run) as rf:
        exchanges = rf.exchanges()
    assert len(exchanges) == 8
    assert len({e.connection_id for e in exchanges}) == 1  # one connection, 8 streams
    assert {e.request.http_version for e in exchanges} == {b"2"}
    assert all(e.ending.value == "complete" for e in exchanges)
    # they were in flight together
    spans = [(e.started_at_ns, e.started_at_ns + e.duration_ns) for e in exchanges]
    assert max(sum(1 for s, t in spans if s <= start < t) for start, _ in spans) >= 2
    # each stream's frames are its own, whole: the client's body is the recorded one
    by_stream = {json.loads(e.request.body)["messages"][0]["content"]: e for e in exchanges}
    assert sorted(by_stream) == [f"stream {i}" for i in range(8)]
    for i, line in enumerate(lines):
        response = by_stream[f"stream {i}"].response
        assert response is not None and len(response.frames) >= 3
        events = response.body.count(b"data: ")
        assert line == (f"stream {i}: HTTP/2 200 {events} events "
                        f"{hashlib.sha256(response.body).hexdigest()}")

    done = subprocess.run([sys.executable, "-m", "wiretape", "replay", str(run), "--json"],
                          cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[:8] == lines  # the same 8 streams, byte for byte
    verdict = json.loads("\n".join(out[8:]))
    assert (verdict["recorded"], verdict["exact"], verdict["missing"], verdict["unused"]) == (
        8, 8, 0, 0)
    assert verdict["pass"] is True


def test_a_malformed_frame_gets_goaway_and_one_line_the_run_goes_on(tmp_path: Path) -> None:
    port, run = free_port(), tmp_path / "bad.wtape"
    with FakeProvider([TextTurn("Red."), TextTurn("Blue.")], delay=0.01) as fp:
        wt = Wiretape(tmp_path, "serve", "--record", "--upstream", f"{fp.url}/v1",
                      "--port", str(port), "-o", str(run))
        try:
            wt.read_urls()
            with Conn(port, timeout=5) as conn:
                # a SETTINGS frame whose length is not a multiple of 6 (RFC 9113 §6.5)
                conn.send(H2_PREFACE + b"\x00\x00\x05\x04\x00\x00\x00\x00\x00" + b"12345")
                assert conn.closed_within(5), "the proxy kept a broken HTTP/2 connection open"
                wire = conn.buf
            good = curl_h2(port)
            with Conn(port) as conn:
                conn.send(post("/v1/chat/completions", {"model": "m", "messages": []}))
                http1 = conn.reply()
            time.sleep(0.2)
            code, _, err = wt.stop(signal.SIGINT)
        finally:
            wt.kill()
    assert goaway_codes(wire) == [0x6]  # FRAME_SIZE_ERROR
    assert good.returncode == 0 and good.stdout.endswith(b"http_version 2\n"), good.stderr
    assert http1.status == 200
    assert code == 0, err
    said = [line for line in err.splitlines() if "HTTP/2 protocol error" in line]
    assert len(said) == 1 and "GOAWAY" in said[0], err
    assert "Traceback" not in err
    assert "refused before forwarding (not recorded): 1 x 400 http2_protocol_error" in err
    with open_run(run) as rf:
        assert [e.request.http_version for e in rf.exchanges()] == [b"2", b"1.1"]

    # replaying: the broken connection is refused and said, the rest served exact
    wt = Wiretape(tmp_path, "serve", "--replay", str(run))
    try:
        wt.read_urls()
        with Conn(port, timeout=5) as conn:
            conn.send(H2_PREFACE + b"\x00\x00\x05\x04\x00\x00\x00\x00\x00" + b"12345")
            assert conn.closed_within(5)
        replayed = curl_h2(port)
        with Conn(port) as conn:
            conn.send(post("/v1/chat/completions", {"model": "m", "messages": []}))
            assert conn.reply().body == http1.body
        code, _, err = wt.stop(signal.SIGTERM)
    finally:
        wt.kill()
    assert replayed.stdout == good.stdout
    assert code == 0, err
    assert "exact 2" in err and "Traceback" not in err
    assert ("refused before any answer from the recording (not in the verdict's counts): "
            "1 x 400 http2_protocol_error") in err


def test_a_refused_http2_connection_alone_is_not_called_an_agent_that_never_called(
        tmp_path: Path) -> None:
    port, run = free_port(), tmp_path / "only-bad.wtape"
    with FakeProvider([], delay=0.01) as fp:
        wt = Wiretape(tmp_path, "serve", "--record", "--upstream", f"{fp.url}/v1",
                      "--port", str(port), "-o", str(run))
        try:
            wt.read_urls()
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(H2_PREFACE + b"\x00\x00\x01\x00\x01\x00\x00\x00\x00z")
                while sock.recv(65536):
                    pass
            code, _, err = wt.stop(signal.SIGINT)
        finally:
            wt.kill()
    assert code == 0, err
    assert "1 x 400 http2_protocol_error" in err
    assert "never called the proxy" not in err


def test_a_body_over_the_cap_gets_its_413_with_curl_and_httpx(tmp_path: Path) -> None:
    port, run = free_port(), tmp_path / "big.wtape"
    big = tmp_path / "big.json"
    big.write_bytes(json.dumps({"model": "m", "input": "x" * 3_000_000}).encode())
    with FakeProvider([TextTurn("Red.")], delay=0.01) as fp:
        wt = Wiretape(tmp_path, "serve", "--record", "--upstream", f"{fp.url}/v1",
                      "--port", str(port), "--max-body", "2000000", "-o", str(run))
        try:
            wt.read_urls()
            curl = subprocess.run(
                ["curl", "-sS", "--http2-prior-knowledge", "-H", "content-type: application/json",
                 "--data-binary", f"@{big}", "-w", "\n%{http_code} %{http_version}\n",
                 f"http://127.0.0.1:{port}/v1/chat/completions"],
                capture_output=True, timeout=30)
            httpx_run = subprocess.run(
                [sys.executable, str(CLIENTS / "h2_oversized.py"), "3000000"],
                env={**env(), "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1"},
                capture_output=True, text=True, timeout=60)
            code, _, err = wt.stop(signal.SIGINT)
        finally:
            wt.kill()
    # curl: the 413 whole, exit 0 (not "(92) Stream error in the HTTP/2 framing layer")
    assert curl.returncode == 0, curl.stderr
    body, _, tail = curl.stdout.rpartition(b"\n413 ")
    assert tail == b"2\n" and b'"request_too_large"' in body, curl.stdout
    # httpx: the 413 (not a timeout), then the connection serves the next request
    assert httpx_run.returncode == 0, httpx_run.stderr
    assert httpx_run.stdout.splitlines() == ["HTTP/2 413 request_too_large", "HTTP/2 200 -"]
    assert code == 0, err
    assert "refused before forwarding (not recorded): 2 x 413 request_too_large" in err
    assert "http2_protocol_error" not in err and "Traceback" not in err
    with open_run(run) as rf:
        [exchange] = rf.exchanges()
    assert exchange.request.http_version == b"2"


@pytest.mark.slow  # a long scenario: make test-slow
def test_the_http_versions_of_both_legs_in_har_and_show(tmp_path: Path) -> None:
    port, run = free_port(), tmp_path / "versions.wtape"
    with FakeProvider([TextTurn("Red, yellow and blue.")], delay=0.01) as fp:
        wt = Wiretape(tmp_path, "serve", "--record", "--upstream", f"{fp.url}/v1",
                      "--port", str(port), "-o", str(run))
        try:
            wt.read_urls()
            assert curl_h2(port).returncode == 0
            code, _, err = wt.stop(signal.SIGINT)
        finally:
            wt.kill()
    assert code == 0, err

    def wiretape(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=tmp_path, env=env(),
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    # HAR: the version on the wire the agent saw, both ways; the origin's kept aside
    [entry] = json.loads(wiretape("export", str(run), "--har", "-"))["log"]["entries"]
    assert entry["request"]["httpVersion"] == "HTTP/2"
    assert entry["response"]["httpVersion"] == "HTTP/2"
    assert entry["_wiretape"]["response_http_version"] == "1.1"
    har = tmp_path / "versions.har"
    har.write_text(json.dumps({"log": json.loads(wiretape("export", str(run), "--har", "-"))[
        "log"]}))
    wiretape("import", "--har", str(har), "-o", str(tmp_path / "back.wtape"))
    with open_run(tmp_path / "back.wtape") as rf:
        [back] = rf.exchanges()
    assert back.request.http_version == b"2"
    assert back.response is not None and back.response.http_version == b"1.1"

    # show: both legs, in text and JSON
    lines = wiretape("show", str(run), "--exchange", "0").splitlines()
    assert "  HTTP/2 with the agent, HTTP/1.1 with the origin" in lines
    shown = json.loads(wiretape("show", str(run), "--exchange", "0", "--json"))
    assert shown["http_version"] == {"agent": "HTTP/2", "origin": "HTTP/1.1"}
