"""HAR export and import (our own export round-trips exactly; a browser's
HAR is read and repaired), VCR cassettes (VCR.py, Ruby VCR, unsafe YAML
refused), and the origins an import plans."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

import pytest

from wiretape.errors import UsageError
from wiretape.inspect.har import export_har, import_har
from wiretape.inspect.interop import plan_origins, sse_frames
from wiretape.inspect.vcr import import_vcr
from wiretape.model import Ending, Exchange, Frame, Origin, Redaction, Request, Response, RunInfo
from wiretape.store.runfile import RunFile

INFO = RunInfo(
    "run_0123456789ab",
    "0.1.0",
    ("python", "agent.py"),
    "/home/user/project",
    ("OPENAI_BASE_URL",),
    (Origin("openai", "https://api.openai.com/v1", 8089, ("OPENAI_BASE_URL",)),),
    started_at_ns=1_700_000_000_000_000_000,
    exit_status=0,
    stdout=b"42\n\xff",
    stderr=b"tool add\n",
)
GZ = gzip.compress(b'{"choices":[]}', mtime=0)
EXCHANGES = [
    Exchange(
        0,
        1,
        "openai",
        INFO.started_at_ns + 5_000_000,
        Request(
            b"POST",
            b"/v1/chat/completions?x=1",
            ((b"Authorization", b"Bearer <redacted>"), (b"Content-Type", b"application/json")),
            b'{"model":"gpt-4o-mini","stream":true}',
        ),
        Response(
            200,
            b"OK",
            ((b"Content-Type", b"text/event-stream"), (b"Transfer-Encoding", b"chunked")),
            (Frame(30_000_000, b"data: {}\n\n"), Frame(45_500_000, b"data: [DONE]\n\n")),
        ),
        Ending.COMPLETE,
        30_000_000,
        46_000_000,
    ),
    Exchange(
        1,
        1,
        "openai",
        INFO.started_at_ns + 90_000_000,
        Request(b"POST", b"/v1/chat/completions", (), b"\x00\xffbinary"),
        Response(
            200,
            b"",
            ((b"content-encoding", b"gzip"), (b"content-length", str(len(GZ)).encode())),
            (Frame(7, GZ),),
        ),
        Ending.COMPLETE,
        7,
        9,
    ),
    Exchange(
        2,
        2,
        "openai",
        INFO.started_at_ns + 99_000_000,
        Request(b"GET", b"/v1/models", (), b""),
        None,
        Ending.ORIGIN_UNREACHABLE,
        None,
        3,
        "connection refused",
    ),
]
FACTS = [(0, Redaction("request-header", "Authorization", "6a926bef"))]


def test_our_har_round_trips_exactly(tmp_path: Path) -> None:
    har = export_har(INFO, iter(EXCHANGES), FACTS)
    log = har["log"]
    assert (log["version"], log["creator"]["name"]) == ("1.2", "wiretape")
    first, second, third = log["entries"]
    assert first["request"]["url"] == "https://api.openai.com/v1/chat/completions?x=1"
    assert first["request"]["queryString"] == [{"name": "x", "value": "1"}]
    assert first["timings"] | {} == {"blocked": -1, "dns": -1, "connect": -1, "ssl": -1,
                                     "send": 0, "wait": 30.0, "receive": 16.0}
    assert first["time"] == 46.0 and first["startedDateTime"] == "2023-11-14T22:13:20.005Z"
    assert first["_frames"] == [{"offset_ns": 30_000_000, "size": 10},
                                {"offset_ns": 45_500_000, "size": 14}]
    assert first["response"]["content"]["text"] == "data: {}\n\ndata: [DONE]\n\n"
    assert second["request"]["postData"]["_encoding"] == "base64"
    content = second["response"]["content"]
    assert (content["encoding"], base64.b64decode(content["text"])) == ("base64", GZ)
    assert content["size"] == 14 and content["compression"] == 14 - len(GZ)
    assert third["response"]["status"] == 0 and third["response"]["_error"] == "connection refused"
    source = tmp_path / "run.har"
    source.write_text(json.dumps(har))
    done = import_har(source, tmp_path / "back.wtape")
    with RunFile.open(done.path) as run:
        assert run.exchanges() == EXCHANGES
        assert run.redactions() == FACTS
        info = run.info()
    assert done.run_id != INFO.run_id and info.run_id == done.run_id
    assert (info.argv, info.cwd, info.env_names, info.origins, info.started_at_ns,
            info.exit_status, info.stdout, info.stderr) == (
        INFO.argv, INFO.cwd, INFO.env_names, INFO.origins, INFO.started_at_ns,
        INFO.exit_status, INFO.stdout, INFO.stderr)
    assert info.extra == {"imported_from": "har:run.har", "source_run_id": "run_0123456789ab"}


def test_a_browser_har_is_read_redacted_and_repaired(tmp_path: Path) -> None:
    body = (
        'event: message_start\ndata: {"type":"message_start"}\n\nevent: message_stop\ndata: {}\n\n'
    )
    har = {"log": {"version": "1.2", "creator": {"name": "Chrome", "version": "1"}, "entries": [{
        "startedDateTime": "2025-01-02T03:04:05.678Z", "time": 250.5,
        "request": {"method": "POST", "url": "https://api.anthropic.com/v1/messages?beta=true#x",
                    "httpVersion": "h2", "headers": [
                        {"name": ":authority", "value": "api.anthropic.com"},
                        {"name": "x-api-key", "value": "sk-ant-api03-abcdefghijklmnopqrstuvwxyz"},
                        {"name": "content-type", "value": "application/json"}],
                    "postData": {"mimeType": "application/json", "text": '{"stream":true}'}},
        "response": {"status": 200, "statusText": "", "httpVersion": "h2", "headers": [
            {"name": "content-type", "value": "text/event-stream"},
            {"name": "content-encoding", "value": "gzip"},
            {"name": "content-length", "value": "10"}],
            "content": {"size": len(body), "mimeType": "text/event-stream", "text": body}},
        "timings": {"send": 0.5, "wait": 100, "receive": 150}}]}}
    source = tmp_path / "chrome.har"
    source.write_text(json.dumps(har))
    done = import_har(source, tmp_path / "r.wtape")
    assert done.notes == ("entry 0: removed Content-Encoding gzip: the body was stored decoded",
                          f"entry 0: Content-Length 10 set to the body's {len(body)} bytes")
    with RunFile.open(done.path) as run:
        (ex,) = run.exchanges()
        info, facts = run.info(), run.redactions()
    assert ex.request.target == b"/v1/messages?beta=true"
    assert ex.request.headers == (
        (b"x-api-key", b"<redacted>"),
        (b"content-type", b"application/json"),
    )
    assert [f.name for _, f in facts] == ["x-api-key"]
    assert ex.response is not None and ex.response.body == body.encode()
    assert [f.data for f in ex.response.frames] == [
        b'event: message_start\ndata: {"type":"message_start"}\n\n',
        b"event: message_stop\ndata: {}\n\n",
    ]
    assert (ex.ttfb_ns, ex.duration_ns, ex.started_at_ns) == (100_500_000, 250_500_000,
                                                              1_735_787_045_678_000_000)
    assert info.origins == (
        Origin("anthropic", "https://api.anthropic.com", 0, ("ANTHROPIC_BASE_URL",)),
    )
    assert json.loads(info.extra["import_notes"]) == list(done.notes)


@pytest.mark.parametrize("text, why", [
    ("not json", "is not a HAR 1.2 file"),
    ('{"log": {"entries": [{"request": 3}]}}', "is not an object"),
])
def test_bad_har_is_one_usage_error(tmp_path: Path, text: str, why: str) -> None:
    source = tmp_path / "bad.har"
    source.write_text(text)
    with pytest.raises(UsageError, match=why):
        import_har(source, tmp_path / "r.wtape")
    assert not (tmp_path / "r.wtape").exists()


VCRPY = """\
interactions:
- request:
    body: '{{"model":"gpt-4o-mini"}}'
    headers:
      Authorization:
      - Bearer sk-proj-abcdefghijklmnopqrstuvwxyz0123
      Content-Type:
      - application/json
    method: POST
    uri: https://api.groq.com/openai/v1/chat/completions
  response:
    body:
      string: !!binary |
        {gz}
    headers:
      Content-Encoding:
      - gzip
      Set-Cookie:
      - __cf_bm=secret; path=/
    status:
      code: 200
      message: OK
- request:
    body: null
    headers: {{}}
    method: GET
    uri: https://api.groq.com/openai/v1/models
  response:
    body:
      parsed_body: {{"data": []}}
    headers: {{}}
    status:
      code: 200
      message: OK
version: 1
"""


def test_a_vcrpy_cassette_becomes_a_redacted_run(tmp_path: Path) -> None:
    answer = (
        b'{"object":"chat.completion","model":"llama","choices":[{"message":{"content":"hi"}}]}'
    )
    source = tmp_path / "c.yaml"
    source.write_text(VCRPY.format(gz=base64.b64encode(gzip.compress(answer, mtime=0)).decode()))
    done = import_vcr(source, tmp_path / "r.wtape")
    with RunFile.open(done.path) as run:
        first, second = run.exchanges()
        info = run.info()
        raw = done.path.read_bytes()
    assert b"sk-proj-abcdefghijklmnopqrstuvwxyz0123" not in raw and b"__cf_bm=secret" not in raw
    assert first.request.headers[0] == (b"Authorization", b"Bearer <redacted>")
    assert first.response is not None and gzip.decompress(first.response.body) == answer
    assert second.request.target == b"/openai/v1/models" and second.request.body == b""
    assert second.response is not None and second.response.body == b'{"data": []}'
    assert "interaction 1 response: parsed_body serialised back to JSON (not the wire bytes)" \
        in done.notes
    assert info.origins == (Origin("groq", "https://api.groq.com", 0, ()),)
    assert info.mode == "import" and info.extra["imported_from"] == "vcr:c.yaml"


def test_a_ruby_vcr_cassette(tmp_path: Path) -> None:
    source = tmp_path / "r.yml"
    source.write_text("""\
http_interactions:
- request:
    method: post
    uri: https://api.openai.com/v1/responses
    body: {encoding: UTF-8, string: '{"model":"gpt-4o","input":"Hello!"}'}
    headers: {Content-Type: [application/json]}
  response:
    status: {code: 200, message: OK}
    headers: {Content-Type: [application/json], Content-Length: ['999']}
    body: {encoding: ASCII-8BIT, base64_string: eyJvYmplY3QiOiJyZXNwb25zZSJ9}
  recorded_at: Sat, 27 Apr 2024 10:00:00 GMT
recorded_with: VCR 6.2.0
""")
    done = import_vcr(source, tmp_path / "r.wtape")
    with RunFile.open(done.path) as run:
        (ex,) = run.exchanges()
        info = run.info()
    assert (ex.request.method, ex.request.target) == (b"POST", b"/v1/responses")
    assert ex.response is not None and ex.response.body == b'{"object":"response"}'
    assert (b"Content-Length", b"21") in ex.response.headers
    assert ex.started_at_ns == info.started_at_ns == 1_714_212_000_000_000_000
    assert info.origins[0] == Origin("openai", "https://api.openai.com/v1", 0,
                                     ("OPENAI_BASE_URL", "OPENAI_API_BASE"))


@pytest.mark.parametrize("text, why", [
    ("interactions:\n- request: !!python/object/apply:os.system ['touch pwned']\n",
     "not a cassette wiretape can read safely"),
    ("just: a mapping\n", "has no list of interactions"),
    ("interactions: [{request: {method: GET}}]\n", "interaction 0 has no request uri"),
])
def test_unsafe_or_wrong_cassettes_are_refused(tmp_path: Path, text: str, why: str) -> None:
    source = tmp_path / "bad.yaml"
    source.write_text(text)
    with pytest.raises(UsageError, match=why):
        import_vcr(source, tmp_path / "r.wtape")
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "r.wtape").exists()


def test_plan_origins_names_hosts_and_finds_client_base_paths() -> None:
    planned = plan_origins([
        ("https://api.openai.com", "/v1/chat/completions"),
        ("http://127.0.0.1:9000", "/api/v1/chat/completions"),
        ("https://openrouter.ai", "/api/v1/chat/completions"),
        ("https://generativelanguage.googleapis.com", "/v1beta/models/g:generateContent"),
        ("http://localhost:8080", "/v1/messages"),
        ("https://example.com", "/anything"),
    ])
    assert [(o.name, o.upstream, o.env_vars) for o in planned.values()] == [
        ("openai", "https://api.openai.com/v1", ("OPENAI_BASE_URL", "OPENAI_API_BASE")),
        ("origin", "http://127.0.0.1:9000", ()),  # openai's variables are taken
        ("openrouter", "https://openrouter.ai", ()),
        ("gemini", "https://generativelanguage.googleapis.com", ("GOOGLE_GEMINI_BASE_URL",)),
        ("anthropic", "http://localhost:8080", ("ANTHROPIC_BASE_URL",)),
        ("example", "https://example.com", ()),
    ]


def test_sse_bodies_become_one_frame_per_event() -> None:
    assert [f.data for f in sse_frames(b"data: 1\r\n\r\ndata: 2\n\ntail", 5)] == [
        b"data: 1\r\n\r\n", b"data: 2\n\n", b"tail"]
    assert sse_frames(b"", 0) == ()


def test_websocket_messages_round_trip_and_chrome_s_are_read(tmp_path: Path) -> None:
    from wiretape.model import Message, Opcode

    messages = (Message("client", Opcode.TEXT, b'{"type":"response.create"}', 1_000),
                Message("server", Opcode.BINARY, b"\x00\xff\x10", 2_345),
                Message("server", Opcode.PING, b"p", 3_000),
                Message("client", Opcode.CLOSE, b"bye", 4_000, 1000))
    session = Exchange(0, 1, "openai", 1_700_000_000_005_000_000,
                       Request(b"GET", b"/v1/responses", ((b"Upgrade", b"websocket"),), b""),
                       Response(101, b"Switching Protocols", ((b"Upgrade", b"websocket"),), ()),
                       Ending.COMPLETE, 2_000_000, 9_000_000, None, messages)
    har = export_har(INFO, iter([session]), [])
    (entry,) = har["log"]["entries"]
    assert entry["_resourceType"] == "websocket"
    sent = entry["_webSocketMessages"]
    assert [(m["type"], m["opcode"]) for m in sent] == [("send", 1), ("receive", 2),
                                                        ("receive", 9), ("send", 8)]
    assert sent[1]["data"] == base64.b64encode(b"\x00\xff\x10").decode()
    assert sent[3]["_closeCode"] == 1000
    source = tmp_path / "ws.har"
    source.write_text(json.dumps(har))
    with RunFile.open(import_har(source, tmp_path / "back.wtape").path) as run:
        assert run.exchanges() == [session]
    # as Chrome writes them: no exact offsets, times in epoch seconds
    for m in sent:
        del m["_offset_ns"]
    del entry["_wiretape"]
    source.write_text(json.dumps(har))
    with RunFile.open(import_har(source, tmp_path / "chrome.wtape").path) as run:
        (ex,) = run.exchanges()
    assert [(m.direction, m.opcode, m.payload) for m in ex.messages] == [
        (m.direction, m.opcode, m.payload) for m in messages]
    assert ex.messages[3].close_code == 1000
    assert all(abs(m.offset_ns - o.offset_ns) < 1_000_000
               for m, o in zip(ex.messages, messages, strict=True))


def _chrome_session(messages: object) -> dict[str, object]:
    """A browser's HAR of one WebSocket session with these messages."""
    return {"log": {"version": "1.2", "entries": [{
        "startedDateTime": "2026-01-01T00:00:00Z", "time": 5, "_resourceType": "websocket",
        "request": {"method": "GET", "url": "wss://api.openai.com/v1/responses", "headers": []},
        "response": {"status": 101, "statusText": "Switching Protocols", "headers": [],
                     "content": {"size": 0}},
        "_webSocketMessages": messages}]}}


def test_malformed_websocket_messages_are_each_one_import_note(tmp_path: Path) -> None:
    """Each bad message of a browser's HAR is one note naming the entry, the
    message and what was done; the good ones are imported as they are, and
    no raw Python error text reaches the user."""
    start = 1_767_225_600.0  # the entry's start, in epoch seconds
    messages: list[object] = [
        {"type": "send", "time": start + 0.001, "opcode": 1, "data": "hello"},
        {"type": "receive", "time": start + 0.002, "opcode": 8, "data": None,
         "_closeCode": 1000},
        {"type": "receive", "time": start, "opcode": 99, "data": "x"},
        {"type": "sideways", "time": start, "opcode": 1, "data": "x"},
        {"type": "send", "time": start, "opcode": "text", "data": "x"},
        {"type": "send", "time": float("nan"), "opcode": 1, "data": "late"},
        {"type": "send", "time": float("inf"), "opcode": 1, "data": "later"},
        {"type": "receive", "time": start, "opcode": 2, "data": "not base64!"},
        {"type": "receive", "time": start, "opcode": 1, "data": 5},
        {"type": "send", "time": start, "opcode": 8, "data": "", "_closeCode": 99999},
        "a string",
    ]
    source = tmp_path / "bad.har"
    source.write_text(json.dumps(_chrome_session(messages)))
    done = import_har(source, tmp_path / "bad.wtape")
    assert list(done.notes) == [
        "entry 0, WebSocket message 1: its data is null; imported as an empty payload",
        "entry 0, WebSocket message 2: its opcode 99 is not one RFC 6455 names (1 text, "
        "2 binary, 8 close, 9 ping, 10 pong); the message was left out (fix it in the HAR "
        "and import again to keep it)",
        "entry 0, WebSocket message 3: its type \"sideways\" is neither send (client to "
        "server) nor receive; the message was left out (fix it in the HAR and import again "
        "to keep it)",
        "entry 0, WebSocket message 4: its opcode \"text\" is not one RFC 6455 names (1 text, "
        "2 binary, 8 close, 9 ping, 10 pong); the message was left out (fix it in the HAR "
        "and import again to keep it)",
        "entry 0, WebSocket message 5: its time NaN is not a number of seconds since the "
        "epoch; imported at the previous message's time",
        "entry 0, WebSocket message 6: its time Infinity is not a number of seconds since the "
        "epoch; imported at the previous message's time",
        "entry 0, WebSocket message 7: it is binary (opcode 2) but its data is not base64; "
        "the message was left out (fix it in the HAR and import again to keep it)",
        "entry 0, WebSocket message 8: its data is a number, not text; the message was left "
        "out (fix it in the HAR and import again to keep it)",
        "entry 0, WebSocket message 9: its close code 99999 is not one RFC 6455 allows (1000 "
        "to 4999); imported with no code",
        "entry 0, WebSocket message 10: it is a string, not an object; the message was left "
        "out (fix it in the HAR and import again to keep it)",
    ]
    with RunFile.open(done.path) as run:
        (ex,) = run.exchanges()
        assert run.info().extra["import_notes"] == json.dumps(list(done.notes))
    assert [(m.direction, m.opcode.value, m.payload, m.close_code) for m in ex.messages] == [
        ("client", "text", b"hello", None), ("server", "close", b"", 1000),
        ("client", "text", b"late", None), ("client", "text", b"later", None),
        ("client", "close", b"", None)]
    first, second, late, later = (m.offset_ns for m in ex.messages[:4])
    assert abs(first - 1_000_000) < 1_000 and abs(second - 2_000_000) < 1_000
    assert late == later == second  # (epoch seconds as a float: microsecond-exact at best)


@pytest.mark.parametrize("value", ["messages", {"0": {}}, 7])
def test_websocket_messages_that_are_not_a_list_are_one_note(tmp_path: Path,
                                                            value: object) -> None:
    source = tmp_path / "odd.har"
    source.write_text(json.dumps(_chrome_session(value)))
    done = import_har(source, tmp_path / "odd.wtape")
    (note,) = done.notes
    assert note.startswith("entry 0: its _webSocketMessages is a")
    assert note.endswith(", not a list of messages; no message of this session was imported "
                         "(fix it in the HAR and import again to keep them)")
    with RunFile.open(done.path) as run:
        assert run.exchanges()[0].messages == ()
