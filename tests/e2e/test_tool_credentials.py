"""A tool's credentials in a real recording (``record --tools``): the
header, query parameter and JSON member a search service's key travels
in are masked in the run file, and so is the key wherever the service
echoes it back (its answer, the agent's output); ``scan`` finds nothing
left, and the replay, with every server gone, still matches."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from test_sdk_clients import assert_closed, child_env, explain
from test_tool_fixtures import wiretape

from wiretape.intercept.ca import RunCA
from wiretape.store import open_run

pytestmark = pytest.mark.timeout(240)

HEADER_KEY = "HSECRET21zzzzzzzz"
QUERY_KEY = "QSECRET42yyyyyyyy"
BODY_KEY = "tvly-BSECRET63xxxxxxxx"


class EchoServer:
    """An HTTPS service that answers with what it was sent: headers,
    target and body, as JSON."""

    def __init__(self, ssl_context: Any) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                echo = json.dumps({"headers": dict(self.headers.items()), "target": self.path,
                                   "body": body.decode()}).encode() + b"\n"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(echo)))
                self.end_headers()
                self.wfile.write(echo)

            def log_message(self, *_args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = ssl_context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> EchoServer:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


COMMAND = ["curl", "-sS", "--fail-with-body",
           f"https://api.tool.test/search?access_token={QUERY_KEY}",
           "-H", f"X-Subscription-Token: {HEADER_KEY}", "-H", "Content-Type: application/json",
           "--data", json.dumps({"api_key": BODY_KEY, "query": "tides", "max_tokens": 5})]


def test_tool_credentials_are_masked_everywhere_the_run_keeps_them(
        tmp_path: Path, upstream_ca: tuple[RunCA, Path]) -> None:
    ca, pem = upstream_ca
    run = tmp_path / "h.wtape"
    with EchoServer(ca.server_context("api.tool.test")) as server:
        rec = wiretape(["record", "--tools", "--resolve",
                        f"api.tool.test=127.0.0.1:{server.port}", "--upstream-ca", str(pem),
                        "-o", str(run), "--no-snapshot", "--", *COMMAND], tmp_path)
        port = server.port
    assert_closed(port)
    assert rec.returncode == 0, explain(rec)
    # The agent itself saw the echo, every key in it.
    for key in (HEADER_KEY, QUERY_KEY, BODY_KEY):
        assert key.encode() in rec.stdout
    raw = run.read_bytes()
    with open_run(run) as rf:
        (exchange,) = rf.exchanges()
        stdout = rf.info().stdout
    assert exchange.kind == "tool"
    assert exchange.response is not None
    answer = b"".join(f.data for f in exchange.response.frames)
    for key in (HEADER_KEY, QUERY_KEY, BODY_KEY):
        assert key.encode() not in raw
        assert key.encode() not in exchange.request.target + exchange.request.body
        assert key.encode() not in answer
        assert key.encode() not in stdout
    headers = {k.lower(): v for k, v in exchange.request.headers}
    assert headers[b"x-subscription-token"] == b"<redacted>"
    assert b"access_token=<redacted>" in exchange.request.target
    assert json.loads(exchange.request.body)["max_tokens"] == 5
    scan = wiretape(["scan", str(run)], tmp_path)
    assert scan.returncode == 0, explain(scan)
    # The replay sends the same keys and compares equal, every server gone.
    rep = wiretape(["replay", str(run), "--", *COMMAND], tmp_path, child_env())
    assert rep.returncode == 0, explain(rep)
    assert "tools: recorded 1, exact 1" in rep.stderr.decode(), explain(rep)
