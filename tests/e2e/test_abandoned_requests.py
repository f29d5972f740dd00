"""A request the agent abandons while the origin keeps it waiting (a
hanging tool server, a model call given up on): the recorder cancels the
request to the origin, so its connection is released, and stores the
exchange as the agent saw it, unanswered (``client_gone``); a replay then
gives no answer either, with the server gone.

The agent is a shell script running curl (``--max-time``) through the
recorder; the origin is a local server that reads a request and never
answers, noting when the recorder closes its side.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from test_sdk_clients import child_env, explain
from test_tool_fixtures import wiretape

from wiretape.model import Ending
from wiretape.store import open_run

pytestmark = pytest.mark.timeout(240)


class HangingServer:
    """Accepts connections and reads their requests, answers none; when
    the other side closes a connection, touches ``released``."""

    def __init__(self, released: Path) -> None:
        self.released = released
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.requests: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn: socket.socket) -> None:
        with conn:
            data = conn.recv(65536)
            self.requests.append(data)
            while data:
                try:
                    data = conn.recv(65536)
                except OSError:
                    break
            self.released.touch()

    def __enter__(self) -> HangingServer:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.sock.close()


#: curl gives up after 2 s; then (recording) the script waits up to 60 s for
#: the server to see its connection closed, and says whether it did.
AGENT = ('curl -sS --max-time 2 http://hang.test:8080/slow; echo "rc=$?"; '
         'if [ -n "$RELEASED" ]; then i=0; while [ ! -e "$RELEASED" ] && [ $i -lt 600 ]; do '
         'sleep 0.1; i=$((i+1)); done; [ -e "$RELEASED" ] && echo released || echo held; fi')


def test_an_abandoned_tool_request_is_released_stored_and_replayed_unanswered(
        tmp_path: Path) -> None:
    released = tmp_path / "released"
    run = tmp_path / "run.wtape"
    env = {**child_env(), "RELEASED": str(released)}
    with HangingServer(released) as server:
        rec = wiretape(["record", "--tools", "--resolve", f"hang.test=127.0.0.1:{server.port}",
                        "-o", str(run), "--no-snapshot", "--", "sh", "-c", AGENT], tmp_path, env)
        requests = list(server.requests)
    assert rec.returncode == 0, explain(rec)
    # curl timed out (28); the server saw its request, then its connection
    # closed while the agent was still running: the recorder let it go.
    assert rec.stdout.splitlines()[-2:] == [b"rc=28", b"released"], explain(rec)
    assert len(requests) == 1 and requests[0].startswith(b"GET /slow HTTP/1.1")
    with open_run(run) as rf:
        (exchange,) = rf.exchanges()
    assert exchange.origin == "tool:http://hang.test:8080"
    assert exchange.ending is Ending.CLIENT_GONE and exchange.response is None
    assert exchange.request.target == b"/slow"
    assert exchange.error == ("the client closed the connection before the response's head "
                              "arrived")
    # The replay answers nothing either: curl times out as it did (the
    # file the script waits for is there already).
    rep = wiretape(["replay", str(run), "--", "sh", "-c", AGENT], tmp_path, env)
    assert rep.returncode == 0, explain(rep)
    assert rep.stdout == rec.stdout, explain(rep)
    assert "tools: recorded 1, exact 1" in rep.stderr.decode(), explain(rep)
