"""WebSocket sessions end to end (DESIGN.md, "WebSockets"): a raw
``websockets`` client in its own process speaks the Responses API over
WebSocket to the fake provider through ``wiretape record``; the session is
stored as its handshake and its messages, and ``wiretape replay`` serves it
with the fake provider gone: exact, a changed message diverged with its JSON
pointer, an extra message missing; an origin that refuses the upgrade and a
client that drops without a close handshake are stored as what crossed.
"""

from __future__ import annotations

import html as html_lib
import json
import os
import re
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

CLIENT = str(Path(__file__).resolve().parent / "clients_ws" / "ws_client.py")
PROMPTS = ("add 2 and 3", "thanks")

_SCRUB = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY",
          "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "WIRETAPE_HOME")


KEY = "sk-proj-" + "wsTest0123456789" * 3


def env(key: str = "sk-ws-test") -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    out.update(OPENAI_API_KEY=key, PYTHONUNBUFFERED="1", NO_PROXY="127.0.0.1")
    return out


def wiretape(*args: str, cwd: Path, timeout: float = 90, key: str = "sk-ws-test",
             extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=cwd,
                          env={**env(key), **(extra_env or {})},
                          capture_output=True, text=True, timeout=timeout)


def script() -> list[Any]:
    return [ToolCallTurn([ToolCall("add", {"a": 2, "b": 3})]), TextTurn("The sum is 5.")]


def record(base: Path, name: str, *client_args: str,
           key: str = "sk-ws-test") -> tuple[Path, dict[str, Any]]:
    with FakeProvider(script()) as fp:
        done = wiretape("record", "-o", name, "--upstream", f"openai={fp.url}/v1", "--",
                        sys.executable, CLIENT, *client_args, cwd=base, key=key)
    assert done.returncode == 0, done.stderr
    return base / name, seen(done.stdout)


def seen(stdout: str) -> dict[str, Any]:
    found = [line[3:] for line in stdout.splitlines() if line.startswith("WS ")]
    assert len(found) == 1, stdout
    return json.loads(found[0])


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    return record(tmp_path_factory.mktemp("ws"), "ws.wtape", *PROMPTS)


@pytest.fixture
def run(recorded: tuple[Path, dict[str, Any]], tmp_path: Path) -> Path:
    copy = tmp_path / "ws.wtape"
    copy.write_bytes(recorded[0].read_bytes())
    return copy


def test_record_stores_the_handshake_and_every_message(recorded):
    path, got = recorded
    # the client saw the whole Responses stream of both turns, and a clean close
    assert got["calls"] == [["add", '{"a": 2, "b": 3}']]
    assert got["text"] == "The sum is 5."
    assert got["types"].count("response.completed") == 2
    assert got["close"] == [1000, "done"]
    with open_run(path) as rf:
        (exchange,) = rf.exchanges()
    assert exchange.request.method == b"GET" and exchange.request.target == b"/v1/responses"
    assert exchange.response is not None and exchange.response.status == 101
    assert exchange.ending is Ending.COMPLETE
    messages = exchange.messages
    clients = [m for m in messages if m.direction == "client"]
    assert [m.opcode for m in clients] == [Opcode.TEXT, Opcode.TEXT, Opcode.CLOSE]
    assert json.loads(clients[0].payload)["input"][0]["content"] == "add 2 and 3"
    assert (clients[2].close_code, clients[2].payload) == (1000, b"done")
    servers = [m for m in messages if m.direction == "server"]
    events = [json.loads(m.payload)["type"] for m in servers if m.opcode is Opcode.TEXT]
    assert events == got["types"]
    # what the client saw is stored verbatim, in order, with rising offsets
    deltas = [json.loads(m.payload) for m in servers if m.opcode is Opcode.TEXT]
    assert "".join(d["delta"] for d in deltas
                   if d["type"] == "response.output_text.delta") == "The sum is 5."
    assert messages[0] == clients[0]
    offsets = [m.offset_ns for m in messages]
    assert offsets == sorted(offsets) and offsets[0] > 0
    assert servers[-1].opcode is Opcode.CLOSE
    # show lists the session's messages briefly
    shown = wiretape("show", str(path), cwd=path.parent)
    assert shown.returncode == 0, shown.stderr
    assert (f"exchange 0: WebSocket session, {len(messages)} messages (3 from the client, "
            f"{len(servers)} from the server)") in shown.stdout
    assert ('→ client text 103 B {"type": "response.create", "model": "gpt-test"'
            in shown.stdout)
    whole = wiretape("show", str(path), "--exchange", "0", cwd=path.parent)
    assert f"#{len(messages) - 1} +" in whole.stdout and "← server close 1000 4 B done" \
        in whole.stdout
    # the key in the handshake is not stored; secrets never reach the disk
    headers = {k.lower(): v for k, v in exchange.request.headers}
    assert b"sk-ws-test" not in headers[b"authorization"]


def test_replay_serves_the_session_exact_with_the_provider_gone(recorded, run, tmp_path):
    done = wiretape("replay", str(run), "--json", "--", sys.executable, CLIENT, *PROMPTS,
                    cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert seen(done.stdout) == recorded[1]
    line = verdict_line(done.stderr)
    assert line.startswith("wiretape: verdict PASS (strict)")
    assert "messages: exact 3, diverged 0, missing 0, unused 0" in line
    verdict = stored_verdict(run)
    assert verdict["messages"] == {"exact": 3, "substituted": 0, "equivalent": 0, "diverged": 0,
                                   "missing": 0, "unused": 0, "not_sent": 0}
    assert verdict["exact"] == 1 and verdict["pass"] is True
    # the HTML report shows the session and the replay's message counts
    page = tmp_path / "report.html"
    done = wiretape("report", str(run), "-o", str(page), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    html = page.read_text()
    assert "WebSocket session: 25 messages (3 from the client, 22 from the server)" in html
    assert 'data-messages="3,0,0,0"' in html


def test_the_report_marks_each_message_on_the_session_s_bar(recorded, tmp_path):
    path, _ = recorded
    page = tmp_path / "report.html"
    done = wiretape("report", str(path), "-o", str(page), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    html = page.read_text()
    with open_run(path) as rf:
        (exchange,) = rf.exchanges()
    # one bar (the only exchange spans the whole scale), a tick per message
    # at its offset from the handshake's start, its class the direction
    bar = html[html.index('<div class="wf-row link" data-goto="0"'):]
    bar = bar[:bar.index('<div class="muted">')]
    ticks = re.findall(r'<span class="wf-msg (client|server)" data-msg="(\d+)" '
                       r'style="left:([0-9.]+)%" title="([^"]*)"></span>', bar)
    assert len(ticks) == len(exchange.messages) == 25
    for i, ((side, index, left, title), m) in enumerate(zip(ticks, exchange.messages,
                                                            strict=True)):
        assert (side, int(index)) == (m.direction, i)
        assert left == f"{100 * m.offset_ns / exchange.duration_ns:.3f}"
        arrow = "→ client" if m.direction == "client" else "← server"
        code = "" if m.close_code is None else f" {m.close_code}"
        assert html_lib.unescape(title).startswith(
            f"#0 message {i} at +{m.offset_ns / 1e6:.0f} ms: {arrow} {m.opcode.value}{code}, "
            f"{len(m.payload)} B")
    first = html_lib.unescape(ticks[0][3])
    assert first.endswith(': → client text, 103 B: {"type": "response.create", "model": '
                          '"gpt-test", "input": [{"role": "user", "con…')
    assert html_lib.unescape(ticks[-1][3]).endswith("← server close 1000, 4 B: done")
    assert [t[0] for t in ticks].count("client") == 3
    assert float(ticks[-1][2]) > float(ticks[1][2]) > float(ticks[0][2]) > 0


def test_a_changed_message_diverges_at_its_json_pointer(run, tmp_path):
    done = wiretape("replay", str(run), "--", sys.executable, CLIENT, "add 2 and 3",
                    "thank you", cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    line = verdict_line(done.stderr)
    assert line.startswith("wiretape: verdict FAIL (strict)")
    assert "messages: exact 1, diverged 1, missing 0" in line
    with open_run(run) as rf:
        (exchange,) = rf.exchanges()
    second = [i for i, m in enumerate(exchange.messages) if m.direction == "client"][1]
    assert f"stopped at diverged message #{second} (client text) of the WebSocket session " \
           "GET /v1/responses at /input/0/content" in line
    assert 'text differs at /input/0/content: "thanks" -> "thank you"' in done.stderr
    verdict = stored_verdict(run)
    (row,) = verdict["requests"]
    decisions = row["detail"]["messages"]["decisions"]
    assert [d["kind"] for d in decisions] == ["exact", "diverged"]
    spans = decisions[1]["explanation"]["spans"]
    assert spans[0]["pointer"] == "/input/0/content"
    assert (spans[0]["recorded"], spans[0]["live"]) == ("thanks", "thank you")
    assert verdict["pass"] is False


def test_a_message_the_recording_has_no_counterpart_for_is_missing(run, tmp_path):
    done = wiretape("replay", str(run), "--diagnostic", "--", sys.executable, CLIENT,
                    *PROMPTS, "and again", cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    got = seen(done.stdout)
    # the first two turns were served; the third ended the session with its reason
    assert got["text"] == "The sum is 5."
    assert got["close"] == [1008, "wiretape replay: a client text past the recorded ones "
                                  "(missing: nothing recorded answers it)"]
    line = verdict_line(done.stderr)
    assert "messages: exact 2, diverged 0, missing 1, unused 1 (server messages not sent: 1)" \
        in line
    # the recorded closing handshake was never played (the session ended
    # first): the client's close unused, the server's not sent
    (row,) = stored_verdict(run)["requests"]
    with open_run(run) as rf:
        (exchange,) = rf.exchanges()
    result = row["detail"]["messages"]
    assert [(exchange.messages[i].direction, exchange.messages[i].opcode)
            for i in (*result["unused"], *result["not_sent"])] == [
        ("client", Opcode.CLOSE), ("server", Opcode.CLOSE)]


def test_an_origin_that_refuses_the_upgrade_is_relayed_and_recorded(tmp_path):
    # The fake provider has no WebSocket route here: it answers 404.
    path, got = record(tmp_path, "refused.wtape", "--path", "/chat/completions", "hi")
    assert got["refused"] == 404
    with open_run(path) as rf:
        (exchange,) = rf.exchanges()
    assert exchange.response is not None and exchange.response.status == 404
    assert b"no route for GET" in exchange.response.body
    assert exchange.messages == ()
    done = wiretape("replay", str(path), "--", sys.executable, CLIENT, "--path",
                    "/chat/completions", "hi", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert seen(done.stdout)["refused"] == 404
    assert "messages:" not in verdict_line(done.stderr)


def test_a_client_that_drops_without_a_close_keeps_what_was_exchanged(tmp_path):
    path, got = record(tmp_path, "dropped.wtape", "--drop", "add 2 and 3")
    assert got["calls"] == [["add", '{"a": 2, "b": 3}']]
    with open_run(path) as rf:
        (exchange,) = rf.exchanges()
    assert exchange.response is not None and exchange.response.status == 101
    assert exchange.ending is Ending.CLIENT_GONE
    assert "without a WebSocket close handshake" in (exchange.error or "")
    kinds = [(m.direction, m.opcode) for m in exchange.messages]
    assert kinds[0] == ("client", Opcode.TEXT)
    assert ("client", Opcode.CLOSE) not in kinds
    events = [json.loads(m.payload)["type"] for m in exchange.messages
              if m.direction == "server" and m.opcode is Opcode.TEXT]
    assert events == got["types"]


def test_a_secret_in_a_client_message_is_redacted_and_still_replays_exact(tmp_path):
    path, got = record(tmp_path, "keyed.wtape", "--key-in-message", "add 2 and 3", key=KEY)
    assert got["calls"] == [["add", '{"a": 2, "b": 3}']]
    with open_run(path) as rf:
        (exchange,) = rf.exchanges()
        facts = rf.redactions()
    first = exchange.messages[0]
    assert first.direction == "client"
    assert KEY.encode() not in first.payload
    secret = json.loads(first.payload)["client_secret"]
    assert secret != KEY and len(secret) == len(KEY)
    assert any(seq == 0 and f.location == "client-message" for seq, f in facts)
    assert all(KEY.encode() not in m.payload for m in exchange.messages)
    done = wiretape("replay", str(path), "--", sys.executable, CLIENT, "--key-in-message",
                    "add 2 and 3", cwd=tmp_path, key=KEY)
    assert done.returncode == 0, done.stderr
    assert "messages: exact 2, diverged 0, missing 0, unused 0" in verdict_line(done.stderr)


def test_a_message_over_the_cap_closes_the_session_with_1009_and_keeps_the_rest(tmp_path):
    with FakeProvider(script()) as fp:
        done = wiretape("record", "-o", "big.wtape", "--max-body", "2000", "--upstream",
                        f"openai={fp.url}/v1", "--", sys.executable, CLIENT, "add 2 and 3",
                        "x" * 3000, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    got = seen(done.stdout)
    # the first turn went through; the oversized message closed the session
    assert got["calls"] == [["add", '{"a": 2, "b": 3}']]
    assert got["close"][0] == 1009
    with open_run(tmp_path / "big.wtape") as rf:
        (exchange,) = rf.exchanges()
    assert exchange.ending is Ending.CLIENT_GONE
    assert "the client sent what WebSocket forbids: PayloadTooBig" in (exchange.error or "")
    clients = [m for m in exchange.messages if m.direction == "client"]
    assert len(clients) == 1 and b"add 2 and 3" in clients[0].payload
    assert "\n" not in (exchange.error or "")


def test_an_origin_s_message_over_the_cap_closes_the_session_with_1009_and_keeps_the_rest(
        tmp_path):
    # The client's message is small; the origin's answer carries 3000 characters.
    with FakeProvider([TextTurn("z" * 3000)]) as fp:
        done = wiretape("record", "-o", "big.wtape", "--max-body", "2000", "--upstream",
                        f"openai={fp.url}/v1", "--", sys.executable, CLIENT, "hello",
                        cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    got = seen(done.stdout)
    # what came before the oversized message reached the client; then 1009
    assert got["types"] == ["response.created", "response.in_progress",
                            "response.output_item.added", "response.content_part.added"]
    assert got["close"] == [1009, "wiretape: the origin sent a message over the size limit"]
    with open_run(tmp_path / "big.wtape") as rf:
        (exchange,) = rf.exchanges()
    assert exchange.ending is Ending.ORIGIN_RESET
    error = exchange.error or ""
    assert error.startswith("the origin sent what WebSocket forbids: PayloadTooBig: ")
    assert error.endswith("(--max-body caps a WebSocket message too; raise it to record "
                          "larger ones)")
    assert "\n" not in error
    kinds = [(m.direction, m.opcode) for m in exchange.messages]
    # wiretape's own close is kept as what the client received; its echo follows
    assert kinds == [("client", Opcode.TEXT), *[("server", Opcode.TEXT)] * 4,
                     ("server", Opcode.CLOSE), ("client", Opcode.CLOSE)]
    assert (exchange.messages[5].close_code, exchange.messages[5].payload) == (
        1009, b"wiretape: the origin sent a message over the size limit")
    assert json.loads(exchange.messages[0].payload)["input"][0]["content"] == "hello"
    assert [json.loads(m.payload)["type"] for m in exchange.messages[1:5]] == got["types"]
    # one line says it
    said = [line for line in done.stderr.splitlines() if "PayloadTooBig" in line]
    assert said == [f"wiretape: exchange #0 origin_reset: {error}"], done.stderr


RAW = str(Path(__file__).resolve().parent / "clients_ws" / "raw_close_client.py")
#: A short closing-handshake timeout (seconds), so the tests need not wait 10 s.
SHORT = {"WIRETAPE_WS_CLOSE_TIMEOUT": "0.5"}


@pytest.mark.slow  # a long scenario: make test-slow
def test_a_client_that_never_answers_the_origin_s_close_is_closed_and_kept(tmp_path):
    # The origin answers "hello" and closes (1000 bye); the client never
    # answers the close, keeping its connection open and silent, until
    # wiretape closes it: then it prints what it saw and exits.
    rec = tmp_path / "rec"
    rec.mkdir()
    with WsOrigin("closes") as origin:
        done = wiretape("record", "-o", "silent.wtape", "--upstream",
                        f"openai={origin.url}/v1", "--", sys.executable, RAW, "--silent",
                        cwd=rec, timeout=60, extra_env=SHORT)
    assert done.returncode == 0, done.stderr
    got = seen(done.stdout)
    assert got == {"received": ["text echo: hello", "close 1000 bye"], "eof": True}
    # wiretape answered the origin's close itself (its own code echoed)
    assert origin.events == ["text hello", "close 1000 bye", "eof"]
    with open_run(rec / "silent.wtape") as rf:
        (exchange,) = rf.exchanges()
    assert exchange.response is not None and exchange.response.status == 101
    assert exchange.ending is Ending.TIMEOUT
    assert exchange.error == ("the client did not answer the origin's WebSocket close "
                              "(1000 'bye') within 0.5 s (WIRETAPE_WS_CLOSE_TIMEOUT); "
                              "wiretape closed the connection")
    assert [(m.direction, m.opcode, m.payload, m.close_code) for m in exchange.messages] == [
        ("client", Opcode.TEXT, b"hello", None), ("server", Opcode.TEXT, b"echo: hello", None),
        ("server", Opcode.CLOSE, b"bye", 1000)]
    said = [line for line in done.stderr.splitlines() if "did not answer" in line]
    assert said == [f"wiretape: exchange #0 timeout: {exchange.error}"], done.stderr
    # Replayed with the origin gone, the same client gets the recorded close
    # and again never answers: wiretape closes its connection after the
    # timeout, and the session's decisions say so.
    rep = wiretape("replay", "silent.wtape", "--", sys.executable, RAW, "--silent", cwd=rec,
                   timeout=60, extra_env=SHORT)
    assert rep.returncode == 0, rep.stderr
    assert seen(rep.stdout) == got
    assert "messages: exact 1, diverged 0, missing 0, unused 0" in verdict_line(rep.stderr)
    verdict = stored_verdict(rec / "silent.wtape")
    assert verdict["pass"] is True
    assert verdict["requests"][0]["detail"]["messages"] == {
        "decisions": [{"index": 0, "kind": "exact", "recorded": 0, "opcode": "text",
                       "size": 5}],
        "unused": [],
        "not_sent": [],
        "ending": "the client did not answer the recorded server's WebSocket close "
                  "(1000 'bye') within 0.5 s (WIRETAPE_WS_CLOSE_TIMEOUT); wiretape closed "
                  "the connection"}


def test_an_origin_that_never_answers_the_client_s_close_is_closed_and_kept(tmp_path):
    # The client says "hello", then closes (1000 done): wiretape answers it
    # at once, passes it on, and the origin never answers, keeping its
    # connection open and silent. The client stays until the origin saw its
    # connection closed (the marker file), so the run outlives the timeout.
    rec = tmp_path / "rec"
    rec.mkdir()
    marker = tmp_path / "origin-saw-eof"
    with WsOrigin("mute", eof_file=marker) as origin:
        done = wiretape("record", "-o", "mute.wtape", "--upstream", f"openai={origin.url}/v1",
                        "--", sys.executable, RAW, "--close", "--wait-for", str(marker),
                        cwd=rec, timeout=60, extra_env=SHORT)
    assert done.returncode == 0, done.stderr
    got = seen(done.stdout)
    assert got == {"received": ["text echo: hello", "close 1000 done"], "eof": True}
    assert origin.events == ["text hello", "close 1000 done", "eof"]
    with open_run(rec / "mute.wtape") as rf:
        (exchange,) = rf.exchanges()
    assert exchange.ending is Ending.TIMEOUT
    assert exchange.error == ("the origin did not answer the client's WebSocket close "
                              "(1000 'done') within 0.5 s (WIRETAPE_WS_CLOSE_TIMEOUT); "
                              "wiretape closed the connection")
    assert [(m.direction, m.opcode, m.payload, m.close_code) for m in exchange.messages] == [
        ("client", Opcode.TEXT, b"hello", None), ("server", Opcode.TEXT, b"echo: hello", None),
        ("client", Opcode.CLOSE, b"done", 1000)]
    said = [line for line in done.stderr.splitlines() if "did not answer" in line]
    assert said == [f"wiretape: exchange #0 timeout: {exchange.error}"], done.stderr


@pytest.mark.parametrize("trusted", [True, False], ids=["trusted", "untrusted"])
def test_an_https_upstream_is_reached_over_wss_with_its_certificate_verified(
        upstream_ca, tmp_path, trusted):
    ca, pem = upstream_ca
    host = "ws.provider.test"
    trust = ["--upstream-ca", str(pem)] if trusted else []
    with FakeProvider(script(), ssl_context=ca.server_context(host)) as fp:
        done = wiretape("record", "-o", "wss.wtape", *trust, "--resolve",
                        f"{host}=127.0.0.1:{fp.port}", "--upstream", f"openai=https://{host}/v1",
                        "--", sys.executable, CLIENT, "add 2 and 3", cwd=tmp_path)
        asked = len(fp.requests)
    assert done.returncode == 0, done.stderr
    got = seen(done.stdout)
    with open_run(tmp_path / "wss.wtape") as rf:
        (exchange,) = rf.exchanges()
    if trusted:
        assert got["calls"] == [["add", '{"a": 2, "b": 3}']] and asked == 1
        assert exchange.response is not None and exchange.response.status == 101
        assert exchange.ending is Ending.COMPLETE and len(exchange.messages) > 2
    else:
        # the certificate is refused as for HTTP: a 502 named, nothing reached the origin
        assert got["refused"] == 502 and asked == 0
        assert exchange.ending is Ending.ORIGIN_UNREACHABLE
        assert "CERTIFICATE_VERIFY_FAILED" in (exchange.error or "")


def test_a_session_inside_an_intercepted_tunnel_records_and_replays(upstream_ca, tmp_path):
    """The client keeps its own origin (wss://api.openai.com) and reaches it
    through wiretape as an HTTPS proxy (``--intercept``)."""
    ca, pem = upstream_ca
    host = "api.openai.com"
    base = {k: v for k, v in env().items() if k != "OPENAI_BASE_URL"}
    command = ["sh", "-c", f"OPENAI_BASE_URL=https://{host}/v1 exec {sys.executable} {CLIENT} "
                           "'add 2 and 3'"]
    with FakeProvider(script(), ssl_context=ca.server_context(host)) as fp:
        rec = subprocess.run(
            [sys.executable, "-m", "wiretape", "record", "--intercept", "-o", "i.wtape",
             "--no-snapshot", "--upstream-ca", str(pem), "--resolve",
             f"{host}=127.0.0.1:{fp.port}", "--", *command],
            cwd=tmp_path, env=base, capture_output=True, text=True, timeout=90)
    assert rec.returncode == 0, rec.stderr
    assert seen(rec.stdout)["calls"] == [["add", '{"a": 2, "b": 3}']]
    with open_run(tmp_path / "i.wtape") as rf:
        (exchange,) = rf.exchanges()
        assert host in rf.info().intercept
    assert exchange.response is not None and exchange.response.status == 101
    assert [m.opcode for m in exchange.messages if m.direction == "client"] == [
        Opcode.TEXT, Opcode.CLOSE]
    rep = subprocess.run([sys.executable, "-m", "wiretape", "replay", "i.wtape", "--", *command],
                         cwd=tmp_path, env=base, capture_output=True, text=True, timeout=90)
    assert rep.returncode == 0, rep.stderr
    assert seen(rep.stdout) == seen(rec.stdout)
    assert "messages: exact 2, diverged 0, missing 0, unused 0" in verdict_line(rep.stderr)


REALTIME = str(Path(__file__).resolve().parent / "clients_ws" / "realtime_client.py")


def realtime_seen(stdout: str) -> dict[str, Any]:
    found = [line[3:] for line in stdout.splitlines() if line.startswith("RT ")]
    assert len(found) == 1, stdout
    return json.loads(found[0])


@pytest.mark.slow  # a long scenario: `make test-slow`
def test_the_openai_sdk_realtime_client_records_and_replays_a_function_call_session(tmp_path):
    with FakeProvider(script()) as fp:
        rec = wiretape("record", "-o", "rt.wtape", "--upstream", f"openai={fp.url}/v1", "--",
                       sys.executable, REALTIME, "add 2 and 3", cwd=tmp_path)
    assert rec.returncode == 0, rec.stderr
    got = realtime_seen(rec.stdout)
    assert got["calls"] == [["add", '{"a": 2, "b": 3}']] and got["text"] == "The sum is 5."
    assert got["types"][0] == "session.created" and got["types"].count("response.done") == 2
    run = tmp_path / "rt.wtape"
    with open_run(run) as rf:
        (exchange,) = rf.exchanges()
    assert exchange.request.target == b"/v1/realtime?model=gpt-realtime"
    sent = [json.loads(m.payload)["type"] for m in exchange.messages
            if m.direction == "client" and m.opcode is Opcode.TEXT]
    assert sent == ["session.update", "conversation.item.create", "response.create",
                    "conversation.item.create", "response.create"]
    # the provider is gone: the session is served from the run, exact
    rep = wiretape("replay", str(run), "--", sys.executable, REALTIME, "add 2 and 3",
                   cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    assert realtime_seen(rep.stdout) == got
    assert "messages: exact 6, diverged 0, missing 0, unused 0" in verdict_line(rep.stderr)
    # a changed prompt diverges at its pointer inside the conversation item
    changed = wiretape("replay", str(run), "--", sys.executable, REALTIME, "add 2 and 4",
                       cwd=tmp_path)
    assert changed.returncode == 3, changed.stderr
    line = verdict_line(changed.stderr)
    assert "messages: exact 1, diverged 1" in line
    assert "at /item/content/0/text" in line


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A session whose every message carries ids and a clock reading of its run's own."""
    return record(tmp_path_factory.mktemp("ws-fresh"), "fresh.wtape", "--fresh", *PROMPTS)


def test_fresh_ids_and_clock_readings_pass_strict_with_their_allowances(fresh, tmp_path):
    copy = tmp_path / "fresh.wtape"
    copy.write_bytes(fresh[0].read_bytes())
    done = wiretape("replay", str(copy), "--allow", "ids,clock", "--", sys.executable, CLIENT,
                    "--fresh", *PROMPTS, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert seen(done.stdout) == fresh[1]
    line = verdict_line(done.stderr)
    assert line.startswith("wiretape: verdict PASS (strict)")
    # the two response.create events are equivalent; the close is exact
    assert "equivalent 0, diverged 0" in line  # no request needed a rule
    assert "messages: exact 1, equivalent 2 (ids, clock " in line
    assert "), diverged 0, missing 0, unused 0" in line
    verdict = stored_verdict(copy)
    assert verdict["messages"] == {"exact": 1, "substituted": 0, "equivalent": 2,
                                   "diverged": 0, "missing": 0, "unused": 0, "not_sent": 0}
    (row,) = verdict["requests"]
    decisions = row["detail"]["messages"]["decisions"]
    assert [d["kind"] for d in decisions] == ["equivalent", "equivalent", "exact"]
    rules = {e["rule"]: e for e in verdict["rules"]}
    assert set(rules) == {"ids", "clock"}
    # session_id met once and held: the second message maps it the same way
    assert rules["ids"]["pointers"] == ["/metadata/session_id", "/metadata/request_id"]
    assert rules["ids"]["count"] == 4 and rules["clock"]["pointers"] == ["/metadata/sent_at"]
    assert "learned correspondences (allowed: clock, ids):" in done.stderr
    assert "message #10 (client text), 267 B: equivalent" in done.stderr


def test_fresh_ids_diverge_without_the_allowances_naming_the_pointer(fresh, tmp_path):
    copy = tmp_path / "fresh.wtape"
    copy.write_bytes(fresh[0].read_bytes())
    done = wiretape("replay", str(copy), "--", sys.executable, CLIENT, "--fresh", *PROMPTS,
                    cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    line = verdict_line(done.stderr)
    assert line.startswith("wiretape: verdict FAIL (strict)")
    assert "messages: exact 0, diverged 1, missing 0" in line
    assert "stopped at diverged message #0 (client text) of the WebSocket session " \
           "GET /v1/responses at /metadata/session_id" in line
    assert "equal up to clock,ids (not allowed; --allow clock,ids accepts it):" in done.stderr
    (row,) = stored_verdict(copy)["requests"]
    (decision,) = row["detail"]["messages"]["decisions"]
    assert decision["not_allowed"] == ["clock", "ids"]
    pointers = [span["pointer"] for span in decision["explanation"]["spans"]]
    assert pointers[0] == "/metadata/session_id" and "/metadata/sent_at" in pointers


@pytest.mark.slow  # a long scenario: `make test-slow`
def test_an_id_learned_in_a_request_holds_in_the_session_s_messages(tmp_path):
    """One replay learns once: the run's session id, met first in an HTTP request
    (``/user`` of an embeddings call), maps the same in the WebSocket messages
    after it. A replay whose messages carry another session id than its request
    did diverges, though each on its own would correspond."""
    path, got = record(tmp_path, "shared.wtape", "--fresh", "--embed-first", *PROMPTS)
    args = ("--", sys.executable, CLIENT, "--fresh", "--embed-first", *PROMPTS)
    copy = tmp_path / "again.wtape"
    copy.write_bytes(path.read_bytes())
    done = wiretape("replay", str(copy), "--allow", "ids,clock", *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert seen(done.stdout) == got
    line = verdict_line(done.stderr)
    # the replay's rules are named once, with the requests' count
    assert "recorded 2, exact 1, substituted 0, equivalent 1 (ids, clock " in line, line
    assert "messages: exact 1, equivalent 2, diverged 0" in line, line
    verdict = stored_verdict(copy)
    embed, session = verdict["requests"]
    (user,) = [e for e in embed["detail"]["learned"] if e["rule"] == "ids"]
    assert user["pointers"] == ["/user"]
    recorded_id, live_id = user["examples"][0]
    first = session["detail"]["messages"]["decisions"][0]
    ids = next(e for e in first["learned"] if e["rule"] == "ids")
    assert [recorded_id, live_id] in ids["examples"]

    split = tmp_path / "split.wtape"
    split.write_bytes(path.read_bytes())
    done = wiretape("replay", str(split), "--allow", "ids,clock", *args[:-2],
                    "--split-session", *PROMPTS, cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    line = verdict_line(done.stderr)
    assert "stopped at diverged message #0 (client text) of the WebSocket session " \
           "GET /v1/responses at /metadata/session_id" in line, line
    (_, session) = stored_verdict(split)["requests"]
    (decision,) = session["detail"]["messages"]["decisions"]
    assert decision["kind"] == "diverged" and "not_allowed" not in decision
    assert "earlier in this replay" in decision["unexplained"]
