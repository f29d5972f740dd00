"""WebSocket sessions that end abruptly, recorded and replayed end to end
(DESIGN.md, "WebSockets"): real ``websockets`` clients in their own
processes, through ``wiretape record`` to a scriptable origin on 127.0.0.1
(``support.ws_origin``) or the fake provider, then ``wiretape replay`` with
the origin gone.

* an origin that vanishes mid-session: the close wiretape sent the client
  (1014) is kept as what the client received, and a replay ends the session
  with it;
* a client that vanishes mid-session: what the origin sent after that (its
  answer to wiretape's 1001 among it) is not kept as the client's messages,
  and a replay ends the session where the client left, with one verdict
  every time;
* the verdict's message counts: live client messages decided, recorded
  client messages unused, recorded server messages not sent reported apart,
  each named by its index in the session;
* an origin whose 101 carries a wrong ``Sec-WebSocket-Accept``: a replay
  gives the client the same one, which it refuses again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.ws_origin import WsOrigin
from support.wt import stored_verdict, verdict_line
from wiretape.model import Ending, Opcode
from wiretape.store.runfile import open_run
from wiretape.testing import FakeProvider, TextTurn, ToolCall, ToolCallTurn

HERE = Path(__file__).resolve().parent
ENDING = str(HERE / "clients_ws" / "ending_client.py")
CLIENT = str(HERE / "clients_ws" / "ws_client.py")
#: Each replay of a session that ends abruptly is run this many times: its
#: verdict must be the same every time.
TIMES = 5

_SCRUB = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY",
          "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "WIRETAPE_HOME")


def wiretape(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(OPENAI_API_KEY="sk-ws-test", PYTHONUNBUFFERED="1", NO_PROXY="127.0.0.1",
               WIRETAPE_WS_CLOSE_TIMEOUT="2")
    return subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def record_with(origin_url: str, cwd: Path, name: str, *client: str
                ) -> subprocess.CompletedProcess[str]:
    return wiretape("record", "-o", name, "--no-snapshot", "--upstream",
                    f"openai={origin_url}/v1", "--", sys.executable, *client, cwd=cwd)


def session(path: Path) -> Any:
    with open_run(path) as rf:
        (exchange,) = rf.exchanges()
    return exchange


def shape(exchange: Any) -> list[tuple[str, Opcode, bytes, int | None]]:
    return [(m.direction, m.opcode, m.payload, m.close_code) for m in exchange.messages
            if m.opcode not in (Opcode.PING, Opcode.PONG)]


@pytest.mark.slow  # a long scenario: make test-slow
def test_an_origin_that_vanishes_mid_session_replays_its_ending(tmp_path):
    with WsOrigin("vanishes") as origin:
        rec = record_with(origin.url, tmp_path, "gone.wtape", ENDING, "--until-close")
    assert rec.returncode == 0, rec.stderr
    # the client got the echo, then wiretape's own close for the vanished origin
    assert rec.stdout.splitlines() == ["got echo: hello", "closed ConnectionClosedError",
                                       "close 1014 wiretape: the origin went away"]
    assert origin.events == ["text hello", "abort"]
    exchange = session(tmp_path / "gone.wtape")
    assert exchange.ending is Ending.ORIGIN_RESET
    reason = b"wiretape: the origin went away"
    # wiretape's close is kept as what the client received, the client's echo after it
    assert shape(exchange) == [("client", Opcode.TEXT, b"hello", None),
                               ("server", Opcode.TEXT, b"echo: hello", None),
                               ("server", Opcode.CLOSE, reason, 1014),
                               ("client", Opcode.CLOSE, reason, 1014)]
    # the origin is gone; the replay ends the session as the recording did
    rep = wiretape("replay", "gone.wtape", "--", sys.executable, ENDING, "--until-close",
                   cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    assert rep.stdout == rec.stdout
    line = verdict_line(rep.stderr)
    assert line.startswith("wiretape: verdict PASS (strict)"), line
    assert "messages: exact 2, diverged 0, missing 0, unused 0;" in line, line
    (row,) = stored_verdict(tmp_path / "gone.wtape")["requests"]
    result = row["detail"]["messages"]
    assert [(d["kind"], d["recorded"]) for d in result["decisions"]] == [("exact", 0),
                                                                          ("exact", 3)]
    assert (result["unused"], result["not_sent"]) == ([], [])


def replays(run: Path, *client: str) -> list[tuple[int, str, str]]:
    """``TIMES`` replays of ``run``: each one's exit status, stdout and verdict line."""
    out = []
    for n in range(TIMES):
        copy = run.parent / f"again-{n}.wtape"
        copy.write_bytes(run.read_bytes())
        rep = wiretape("replay", copy.name, "--", sys.executable, *client, cwd=run.parent)
        out.append((rep.returncode, rep.stdout, verdict_line(rep.stderr)))
    return out


@pytest.mark.slow  # a long scenario: `make test-slow`
def test_a_client_that_vanishes_while_the_origin_talks_on_replays_stably(tmp_path):
    # The origin echoes, then ticks every 20 ms; the client reads one message
    # and exits (status 7) without a close. wiretape closes the origin's side
    # for it (1001), which the origin answers.
    with WsOrigin("chatty") as origin:
        rec = record_with(origin.url, tmp_path, "left.wtape", ENDING, "--drop-after", "1")
    assert rec.returncode == 7, rec.stderr
    assert rec.stdout == "got echo: hello\n"
    assert "close 1001 the client went away" in origin.events
    exchange = session(tmp_path / "left.wtape")
    assert exchange.ending is Ending.CLIENT_GONE
    kept = shape(exchange)
    assert kept[:2] == [("client", Opcode.TEXT, b"hello", None),
                        ("server", Opcode.TEXT, b"echo: hello", None)]
    # what the origin sent after the client was gone is not kept as received
    # by the client (ticks in flight when it left may be), nor is its answer
    # to wiretape's close: the error says what there was
    assert all(m[1] is Opcode.TEXT for m in kept), kept
    error = exchange.error or ""
    assert error.startswith("the client closed its connection without a WebSocket close "
                            "handshake; after that the origin sent "), error
    assert error.endswith("its close (1001 'the client went away'), which never reached the "
                          "client (not kept as its messages)"), error
    for status, stdout, line in replays(tmp_path / "left.wtape", ENDING, "--drop-after", "1"):
        # (the replay's own status: 0 for a pass; the agent's 7 is compared in the line)
        assert (status, stdout) == (0, rec.stdout), line
        assert line.startswith("wiretape: verdict PASS (strict)"), line
        assert "messages: exact 1, diverged 0, missing 0, unused 0" in line, line
        assert "outcome: exit_status same, stdout same" in line, line


def script() -> list[Any]:
    return [ToolCallTurn([ToolCall("add", {"a": 2, "b": 3})]), TextTurn("The sum is 5.")]


@pytest.mark.slow  # a long scenario: `make test-slow`
def test_a_client_that_vanishes_after_its_answer_replays_stably(tmp_path):
    # The Responses flow: the client cuts its socket once response.completed
    # came, and wiretape's 1001 to the provider is answered.
    with FakeProvider(script()) as fp:
        rec = record_with(fp.url, tmp_path, "cut.wtape", CLIENT, "--drop", "add 2 and 3")
    assert rec.returncode == 0, rec.stderr
    exchange = session(tmp_path / "cut.wtape")
    assert exchange.ending is Ending.CLIENT_GONE
    assert [m for m in exchange.messages if m.opcode is Opcode.CLOSE] == []
    assert (exchange.error or "").endswith(
        "after that the origin sent its close (1001 'the client went away'), which never "
        "reached the client (not kept as its messages)")
    for status, stdout, line in replays(tmp_path / "cut.wtape", CLIENT, "--drop",
                                        "add 2 and 3"):
        assert (status, stdout) == (0, rec.stdout), line
        assert line.startswith("wiretape: verdict PASS (strict)"), line
        assert "messages: exact 1, diverged 0, missing 0, unused 0;" in line, line


def test_message_counts_decide_client_messages_and_report_server_ones_not_sent(tmp_path):
    with FakeProvider(script()) as fp:
        rec = record_with(fp.url, tmp_path, "two.wtape", CLIENT, "add 2 and 3", "thanks")
    assert rec.returncode == 0, rec.stderr
    exchange = session(tmp_path / "two.wtape")
    clients = [i for i, m in enumerate(exchange.messages) if m.direction == "client"]
    second, close = clients[1], clients[2]
    after = [i for i, m in enumerate(exchange.messages) if i > second
             and m.direction == "server"]
    rep = wiretape("replay", "two.wtape", "--", sys.executable, CLIENT, "add 2 and 3",
                   "thank you", cwd=tmp_path)
    assert rep.returncode == 3, rep.stderr
    line = verdict_line(rep.stderr)
    # the client's messages: one exact, one diverged; its recorded close
    # never matched is the one unused; the server messages after the
    # diverged one were not sent (reported, apart)
    assert (f"messages: exact 1, diverged 1, missing 0, unused 1 (server messages not sent: "
            f"{len(after)});") in line, line
    # each message named by its index in the session, as show lists it
    assert (f"stopped at diverged message #{second} (client text) of the WebSocket session "
            "GET /v1/responses at /input/0/content") in line, line
    assert f"  message #{second} (client text), " in rep.stderr
    assert f"  recorded client messages never matched: #{close}\n" in rep.stderr
    assert "  recorded server messages not sent: #" in rep.stderr
    verdict = stored_verdict(tmp_path / "two.wtape")
    assert verdict["messages"] == {"exact": 1, "substituted": 0, "equivalent": 0,
                                   "diverged": 1, "missing": 0, "unused": 1,
                                   "not_sent": len(after)}
    (row,) = verdict["requests"]
    result = row["detail"]["messages"]
    assert (result["unused"], result["not_sent"]) == ([close], after)
    shown = wiretape("show", "two.wtape", "--exchange", "0", cwd=tmp_path)
    assert f"  #{second} +" in shown.stdout and "→ client text" in shown.stdout


def test_a_wrong_accept_is_given_again_in_the_replay(tmp_path):
    with WsOrigin("bad-accept") as origin:
        rec = record_with(origin.url, tmp_path, "accept.wtape", ENDING, "--connect")
    assert rec.returncode == 0, rec.stderr
    # The library refuses the handshake for its accept field, nothing else.
    assert rec.stdout == "refused InvalidHeaderValue\n", rec.stdout
    exchange = session(tmp_path / "accept.wtape")
    assert exchange.response is not None and exchange.response.status == 101
    accepts = [v for k, v in exchange.response.headers if k.lower() == b"sec-websocket-accept"]
    assert accepts == [b"bm90IHRoZSByaWdodCBvbmU="]
    rep = wiretape("replay", "accept.wtape", "--", sys.executable, ENDING, "--connect",
                   cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    assert rep.stdout == rec.stdout
    line = verdict_line(rep.stderr)
    assert line.startswith("wiretape: verdict PASS (strict)"), line


def test_a_replay_answers_a_valid_accept_for_the_live_key(tmp_path):
    # (the common case, unchanged: the client's own key gets its accept)
    with WsOrigin("mute") as origin:
        rec = record_with(origin.url, tmp_path, "ok.wtape", ENDING, "--connect")
    assert rec.stdout == "connected\n", rec.stderr
    assert rec.returncode == 0, rec.stderr
    rep = wiretape("replay", "ok.wtape", "--", sys.executable, ENDING, "--connect",
                   cwd=tmp_path)
    assert rep.stdout == "connected\n", rep.stderr
    assert rep.returncode == 0, rep.stderr
    assert verdict_line(rep.stderr).startswith("wiretape: verdict PASS (strict)"), rep.stderr
