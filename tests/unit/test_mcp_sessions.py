"""Stdio MCP sessions (DESIGN.md, "MCP servers"): the shim's name and how
it finds wiretape, the hub's link over a real loopback socket, JSON-RPC ids
learned as a correspondence, the verdict's ``mcp`` counts, and MCP calls
paired with the model's tool calls."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest

from wiretape.inspect.ledger import Ledger, LedgerEntry
from wiretape.inspect.mcpcalls import mcp_calls
from wiretape.launch.mcp_shim import default_name, find_address
from wiretape.model import (
    Ending,
    Exchange,
    Message,
    MessagesJSON,
    Opcode,
    ReplayRow,
    Request,
    Response,
)
from wiretape.playback.messages import SessionScript
from wiretape.playback.verdict import compute
from wiretape.proxy import mcp
from wiretape.proxy.mcp_replay import Ids


def line(**obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


# --- the shim ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "name"), [
    (["python", "notes_server.py"], "notes_server"),
    (["npx", "-y", "@modelcontextprotocol/server-filesystem@1.2", "./data"], "server-filesystem"),
    (["uvx", "mcp-server-git", "--repository", "."], "mcp-server-git"),
    (["/usr/local/bin/files-mcp", "--root", "/srv"], "files-mcp"),
    (["node", "build/index.js"], "index"),
    (["python3.11", "-m", "pkg.server"], "pkg.server"),
    (["uv", "run", "server.py"], "server"),
])
def test_a_server_is_named_by_its_command(argv: list[str], name: str) -> None:
    assert default_name(argv) == name


def test_the_address_is_found_in_an_ancestors_environment() -> None:
    """An MCP client that starts its server with a reduced environment (the
    MCP SDK passes only HOME, PATH and a few) drops WIRETAPE_MCP: the shim
    reads it from the process above it that has it."""
    value = "tcp://127.0.0.1:5/abc"
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                              env={"WIRETAPE_MCP": value, "PATH": "/usr/bin"})
    try:
        # (the child's /proc entry shows its own environment once it has
        # started: looked at until then, under a load that may delay it)
        deadline = time.monotonic() + 20
        while find_address({}, parent.pid) != value and time.monotonic() < deadline:
            time.sleep(0.05)
        assert find_address({}, parent.pid) == value
        assert find_address({"WIRETAPE_MCP": "tcp://127.0.0.1:6/own"}, parent.pid) == (
            "tcp://127.0.0.1:6/own")
    finally:
        parent.kill()
        parent.wait()
    bare = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                            env={"PATH": "/usr/bin"})
    try:
        # (this test's own ancestors have no WIRETAPE_MCP either)
        assert find_address({}, bare.pid) is None
    finally:
        bare.kill()
        bare.wait()


def test_an_address_that_is_not_one_is_refused() -> None:
    assert mcp.parse_address("tcp://127.0.0.1:4711/tok") == ("127.0.0.1", 4711, "tok")
    for bad in ("http://127.0.0.1:4711/tok", "127.0.0.1:4711", "tcp://127.0.0.1/tok"):
        with pytest.raises(ValueError, match="WIRETAPE_MCP"):
            mcp.parse_address(bad)


# --- the hub -------------------------------------------------------------------------------------


def test_the_hub_answers_only_its_token() -> None:
    seen: list[tuple[str, tuple[str, ...], list[object]]] = []

    async def session(hello: mcp.Hello, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        got = []
        while (obj := await mcp.read(reader)) is not None:
            got.append(obj)
        seen.append((hello.origin, hello.command, got))

    async def scenario() -> list[dict[str, object] | None]:
        hub = mcp.Hub("record", session)
        host, port, token = mcp.parse_address(await hub.start())
        answers = []
        for hello in ({"hello": 1, "token": "wrong", "name": "a", "command": ["x"]},
                      {"hello": 1, "token": token, "name": "", "command": ["x"]},
                      {"hello": 1, "token": token, "name": "notes", "command": ["srv", "-v"]}):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(mcp.encode(hello))
            answer = await mcp.read(reader)
            answers.append(answer)
            if answer == {"mode": "record"}:
                writer.write(mcp.encode({"dir": "client", "t": 5, "line": "{}"}))
                writer.write_eof()
            await reader.read()  # the hub ends the link (the session when it is stored)
            writer.close()
        await hub.close()
        return answers

    answers = asyncio.run(scenario())
    assert answers == [{"error": "the WIRETAPE_MCP token is not this wiretape's"},
                       {"error": "a malformed hello (no name or command)"},
                       {"mode": "record"}]
    assert seen == [("mcp:notes", ("srv", "-v"), [{"dir": "client", "t": 5, "line": "{}"}])]


def test_a_line_that_is_not_utf8_travels_unchanged() -> None:
    raw = b'{"text":"caf\xe9"}\r\n'
    text = mcp.text_of(raw)
    assert json.loads(mcp.encode({"line": text}))["line"] == text
    assert mcp.bytes_of(text) == b'{"text":"caf\xe9"}'


def test_the_method_names_the_tool_it_calls() -> None:
    assert mcp.jsonrpc_method(line(jsonrpc="2.0", id=3, method="tools/call",
                                   params={"name": "read_note", "arguments": {}})) == (
        "tools/call read_note")
    assert mcp.jsonrpc_method(line(jsonrpc="2.0", method="notifications/initialized")) == (
        "notifications/initialized")
    assert mcp.jsonrpc_method(line(jsonrpc="2.0", id=3, result={})) is None
    assert mcp.jsonrpc_method(b"not json") is None


# --- JSON-RPC ids ---------------------------------------------------------------------------


def test_a_request_id_is_learned_and_its_answer_given_the_live_id() -> None:
    recorded_call = b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"id":2}}'
    live_call = b'{"jsonrpc":"2.0","id":"req-9","method":"tools/call","params":{"id":2}}'
    ids = Ids()
    note: dict[str, list[object]] = {}
    seen = ids.to_recorded(live_call, recorded_call, note)  # type: ignore[arg-type]
    assert seen == recorded_call  # only the top-level id was read as the recorded one
    assert note == {"rpc_id": [2, "req-9"]}
    answer = b'{"jsonrpc": "2.0", "id": 2, "result": {"id": 2}}'
    assert ids.to_live(answer) == b'{"jsonrpc": "2.0", "id": "req-9", "result": {"id": 2}}'
    # a server's own request (its id, not one learned) is sent as recorded
    assert ids.to_live(b'{"jsonrpc":"2.0","id":7,"method":"roots/list"}') == (
        b'{"jsonrpc":"2.0","id":7,"method":"roots/list"}')


def test_a_request_with_other_params_still_diverges() -> None:
    recorded = [Message("client", Opcode.TEXT, line(jsonrpc="2.0", id=1, method="tools/call",
                                                   params={"name": "read", "arguments": {"n": 1}}),
                        0),
                Message("server", Opcode.TEXT, line(jsonrpc="2.0", id=1, result={}), 5)]
    script = SessionScript(recorded)
    ids = Ids()
    note: dict[str, list[object]] = {}
    live = ids.to_recorded(line(jsonrpc="2.0", id=40, method="tools/call",
                                params={"name": "read", "arguments": {"n": 2}}),
                           recorded[0].payload, note)  # type: ignore[arg-type]
    step = script.receive(Message("client", Opcode.TEXT, live, 0))
    assert step.decision["kind"] == "diverged"
    assert step.decision["explanation"]["spans"][0]["pointer"] == "/params/arguments/n"
    assert note == {"rpc_id": [1, 40]}


# --- the verdict --------------------------------------------------------------------------------


def _session_row(index: int, seq: int | None, decisions: list[str],
                 unused: list[int] | None = None) -> ReplayRow:
    messages: MessagesJSON = {
        "decisions": [{"index": i, "kind": k, "recorded": i, "opcode": "text",  # type: ignore[typeddict-item]
                       "size": 10} for i, k in enumerate(decisions)],
        "unused": unused or [], "not_sent": []}
    return {"index": index, "kind": "exact" if seq is not None else "missing", "seq": seq,
            "served": seq is not None, "method": "MCP", "target": "notes",
            "detail": {"fields": [], "header_notes": [], "body_bytes_differ": 0,
                       "first_body_offset": None, "substitutions": [], "messages": messages}}


def _http_row(index: int, seq: int) -> ReplayRow:
    return {"index": index, "kind": "exact", "seq": seq, "served": True, "method": "POST",
            "target": "/v1/chat/completions",
            "detail": {"fields": [], "header_notes": [], "body_bytes_differ": 0,
                       "first_body_offset": None, "substitutions": []}}


def test_mcp_sessions_count_apart_from_requests() -> None:
    v = compute(run_id="run_x", replay_id="rpl_x", mode="strict", complete=True,
                recorded_seqs=[1, 2], mcp_seqs=[0],
                rows=[_http_row(0, 1), _session_row(1, 0, ["exact"] * 4), _http_row(2, 2)],
                outcome={"exit_status": {"same": True, "recorded": 0, "replayed": 0}})
    assert (v.recorded, v.exact, v.unused, v.messages) == (2, 2, 0, None)
    assert v.mcp is not None and (v.mcp.recorded, v.mcp.played, v.mcp.missing) == (1, 1, 0)
    assert v.passed
    assert "; mcp: sessions 1/1, exact 4, diverged 0, missing 0, unused 0;" in v.line()
    assert v.to_json()["mcp"]["sessions"] == {"recorded": 1, "played": 1, "missing": 0,
                                              "unused": 0}


@pytest.mark.parametrize(("rows", "mcp_seqs", "part"), [
    ([_session_row(0, 0, ["exact", "diverged"])], [0],
     "mcp: sessions 1/1, exact 1, diverged 1, missing 0, unused 0"),
    ([], [0], "mcp: sessions 0/1, exact 0, diverged 0, missing 0, unused 0"),
    ([_session_row(0, None, [])], [], "mcp: sessions 0/0 (missing 1), exact 0"),
    ([_session_row(0, 0, ["exact"], unused=[3])], [0], "missing 0, unused 1"),
])
def test_an_mcp_session_that_does_not_match_fails(rows: list[ReplayRow], mcp_seqs: list[int],
                                                  part: str) -> None:
    v = compute(run_id="run_x", replay_id="rpl_x", mode="strict", complete=True,
                recorded_seqs=[], mcp_seqs=mcp_seqs, rows=rows)
    assert not v.exchanges_pass
    assert part in v.line()


# --- MCP calls and the ledger ---------------------------------------------------------------------


def _mcp_exchange(seq: int, started: int, messages: list[Message]) -> Exchange:
    return Exchange(seq, 0, "mcp:notes", started, Request(b"MCP", b"stdio", (), b"{}"),
                    Response(101, b"MCP stdio", (), ()), Ending.COMPLETE, 0, 10, None,
                    tuple(messages))


def test_mcp_calls_pair_with_the_model_calls_that_caused_them() -> None:
    def call(rid: int, tool: str, args: dict[str, object], at: int) -> Message:
        return Message("client", Opcode.TEXT, line(jsonrpc="2.0", id=rid, method="tools/call",
                                                   params={"name": tool, "arguments": args}), at)

    def result(rid: int, text: str, at: int) -> Message:
        return Message("server", Opcode.TEXT, line(
            jsonrpc="2.0", id=rid, result={"content": [{"type": "text", "text": text}]}), at)

    session = _mcp_exchange(0, 1_000, [
        Message("client", Opcode.TEXT, line(jsonrpc="2.0", id=0, method="initialize"), 0),
        call(1, "read_note", {"name": "a"}, 3_000), result(1, "note a", 3_100),
        call(2, "read_note", {"name": "b"}, 6_000),
        Message("server", Opcode.TEXT, line(jsonrpc="2.0", id=2,
                                            error={"code": -1, "message": "no b"}), 6_100),
        call(3, "other", {}, 7_000)])
    model = Exchange(1, 1, "openai", 2_000, Request(b"POST", b"/v1/x", (), b""), None,
                     Ending.COMPLETE, 1, 1)
    later = Exchange(2, 1, "openai", 5_000, Request(b"POST", b"/v1/x", (), b""), None,
                     Ending.COMPLETE, 1, 1)
    # nanobot names an MCP tool mcp_<server>_<tool>; the calls come in the other order
    ledger = Ledger((LedgerEntry("c2", "mcp_notes_read_note", '{"name": "b"}', 2, None),
                     LedgerEntry("c1", "read_note", '{"name": "a"}', 1, None)))
    calls = mcp_calls([session, model, later], ledger)
    assert [(c.message, c.method, c.tool, c.result, c.error, c.caused_by) for c in calls] == [
        (1, "tools/call", "read_note", "note a", None, "c1"),
        (3, "tools/call", "read_note", None, "no b", "c2"),
        (5, "tools/call", "other", None, None, None)]



def test_calls_with_long_arguments_pair_by_their_whole_arguments() -> None:
    """Arguments longer than the shown excerpt (clipped) are compared whole:
    two calls of one tool made in the other order still pair each with
    the model's call that has its arguments."""
    a = {"path": "a.txt", "text": "x" * 200}
    b = {"path": "b.txt", "text": "y  y" * 50}  # (spaces the excerpt would collapse)

    def call(rid: int, args: dict[str, object], at: int) -> Message:
        return Message("client", Opcode.TEXT, line(jsonrpc="2.0", id=rid, method="tools/call",
                                                   params={"name": "write", "arguments": args}),
                       at)

    session = _mcp_exchange(0, 1_000, [call(1, b, 3_000), call(2, a, 4_000)])
    model = Exchange(1, 1, "openai", 2_000, Request(b"POST", b"/v1/x", (), b""), None,
                     Ending.COMPLETE, 1, 1)
    ledger = Ledger((LedgerEntry("ca", "write", json.dumps(a), 1, None),
                     LedgerEntry("cb", "write", json.dumps(b), 1, None)))
    calls = mcp_calls([session, model], ledger)
    assert all(c.arguments.endswith("...") for c in calls)
    assert [(c.message, c.caused_by) for c in calls] == [(0, "cb"), (1, "ca")]


def played(script: SessionScript, lines: list[bytes],
           redact: Callable[[bytes, bytes | None], bytes] = lambda payload, _recorded: payload,
           lock: asyncio.Lock | None = None) -> list[object]:
    """The answers (JSON) the replay of ``script`` gives a shim that sends
    ``lines`` then its end, over a real 127.0.0.1 link."""
    from wiretape.playback.pacing import Pace
    from wiretape.proxy.mcp_replay import play

    async def scenario() -> list[object]:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await play(reader, writer, script, pace=Pace.FAST, redact=redact,
                       on_stop=lambda _s: "stop", lock=lock or asyncio.Lock())
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for text in lines:
            writer.write(mcp.encode({"line": text.decode()}))
        writer.write(mcp.encode({"eof": 1}))
        got = []
        while (obj := await mcp.read(reader)) is not None:
            got.append(json.loads(str(obj["line"])))
        writer.close()
        server.close()
        return got

    return asyncio.run(scenario())


def test_a_replayed_session_answers_a_new_request_id_with_it() -> None:
    """Over a real loopback link: the client's request ids differ from the
    recording's (its own numbering): the messages are exact, the learned
    pair is noted, and each recorded response is sent with the live id."""

    recorded = [
        Message("client", Opcode.TEXT, line(jsonrpc="2.0", id=0, method="initialize"), 0),
        Message("server", Opcode.TEXT, line(jsonrpc="2.0", id=0, result={"ok": 1}), 5),
        Message("client", Opcode.TEXT, line(jsonrpc="2.0", method="notifications/initialized"), 6),
        Message("client", Opcode.TEXT, line(jsonrpc="2.0", id=1, method="tools/call",
                                           params={"name": "read", "arguments": {"n": 1}}), 7),
        Message("server", Opcode.TEXT, line(jsonrpc="2.0", id=1, result={"text": "one"}), 9)]
    script = SessionScript(recorded)

    answers = played(script, [line(jsonrpc="2.0", id="a", method="initialize"),
                              line(jsonrpc="2.0", method="notifications/initialized"),
                              line(jsonrpc="2.0", id="b", method="tools/call",
                                   params={"name": "read", "arguments": {"n": 1}})])
    assert answers == [{"jsonrpc": "2.0", "id": "a", "result": {"ok": 1}},
                       {"jsonrpc": "2.0", "id": "b", "result": {"text": "one"}}]
    decisions = script.result()["decisions"]
    assert [d["kind"] for d in decisions] == ["exact"] * 3
    assert [d.get("rpc_id") for d in decisions] == [[0, "a"], None, [1, "b"]]
    assert [d.get("method") for d in decisions] == [
        "initialize", "notifications/initialized", "tools/call read"]



def test_each_replayed_line_is_redacted_holding_the_replay_s_lock() -> None:
    """Redaction learns into rules the replay's requests share: each live
    client line is redacted holding the replayer's lock, a small one on
    the loop, a large one on a worker thread (as a WebSocket message is)."""

    big = line(jsonrpc="2.0", id=2, method="tools/call",
               params={"name": "write", "arguments": {"text": "y" * 10_000}})
    recorded = [
        Message("client", Opcode.TEXT, line(jsonrpc="2.0", id=1, method="ping"), 0),
        Message("server", Opcode.TEXT, line(jsonrpc="2.0", id=1, result={}), 5),
        Message("client", Opcode.TEXT, big, 7),
        Message("server", Opcode.TEXT, line(jsonrpc="2.0", id=2, result={"ok": 1}), 9)]
    script = SessionScript(recorded)
    lock = asyncio.Lock()
    seen: list[tuple[int, bool, bool]] = []

    def redact(payload: bytes, _recorded: bytes | None) -> bytes:
        seen.append((len(payload), lock.locked(),
                     threading.current_thread() is threading.main_thread()))
        return payload

    answers = played(script, [line(jsonrpc="2.0", id=1, method="ping"), big], redact, lock)
    assert answers == [{"jsonrpc": "2.0", "id": 1, "result": {}},
                       {"jsonrpc": "2.0", "id": 2, "result": {"ok": 1}}]
    assert seen == [(len(recorded[0].payload), True, True), (len(big), True, False)]
    assert [d["kind"] for d in script.result()["decisions"]] == ["exact", "exact"]
    assert [d.get("method") for d in script.result()["decisions"]] == [
        "ping", "tools/call write"]


def test_credential_named_members_of_a_message_are_found_and_masked() -> None:
    """What ``scan`` and the recorder run on a session: a ``tools/call``'s
    ``password`` and ``api_key`` are masked by their lengths and reported."""
    from wiretape.redaction import LiveRedactor, redact_exchange

    call = (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"login",'
            b'"arguments":{"password":"hunter2hunter2","api_key":"abc123def456","key":"k1"}}}')
    exchange = Exchange(0, 0, "mcp:s", 0, Request(mcp.METHOD, mcp.TARGET, (), b"{}"),
                        Response(101, b"MCP stdio", (), ()), Ending.COMPLETE, 0, 0, None,
                        (mcp.message("client", call.decode(), 5),))
    stored, facts = redact_exchange(exchange)
    payload = stored.messages[0].payload
    assert b"hunter2" not in payload and b"abc123def456" not in payload
    arguments = json.loads(payload)["params"]["arguments"]
    assert arguments == {"password": "<redacted****>", "api_key": "<redacted**>", "key": "k1"}
    assert sorted((f.location, f.name) for f in facts) == [
        ("client-message", "api_key"), ("client-message", "password")]
    # a live message at replay is masked alike (so it still matches exactly)
    assert LiveRedactor().text(call, "client-message", message=True) == payload
