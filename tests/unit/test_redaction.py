from __future__ import annotations

import gzip
import hashlib
import io
import json
import zlib

import pytest
import zstandard

from wiretape import codings
from wiretape.model import Ending, Exchange, Frame, Redaction, Request, Response
from wiretape.redaction import (
    REDACTED,
    STANDARD,
    LiveRedactor,
    credential_names,
    dotenv_values,
    fingerprint,
    fingerprints,
    is_credential_name,
    learn,
    redact_exchange,
    redact_json,
    redact_request,
    redact_response,
    redact_str,
    redact_text,
    secret_values,
)

OPENAI_KEY = b"sk-proj-" + b"A1b2C3d4" * 5
ANTHROPIC_KEY = b"sk-ant-api03-" + b"Z9y8X7w6" * 5


def test_request_secrets_are_replaced_and_fingerprinted() -> None:
    body = (
        b'{"note":"'
        + OPENAI_KEY
        + b'","other":"'
        + ANTHROPIC_KEY
        + b'","task-12345678901234567890":1}'
    )
    request = Request(b"POST", b"/v1/x?key=GKEY&api_key=AKEY&keep=1",
                      ((b"Authorization", b"Bearer " + OPENAI_KEY), (b"x-api-key", b"xk"),
                       (b"Cookie", b"a=b"), (b"Content-Type", b"application/json")), body)
    redacted, facts = redact_request(request)
    assert redacted.target == b"/v1/x?key=" + REDACTED + b"&api_key=" + REDACTED + b"&keep=1"
    assert redacted.headers[0] == (b"Authorization", b"Bearer " + REDACTED)
    assert redacted.headers[1:3] == ((b"x-api-key", REDACTED), (b"Cookie", REDACTED))
    assert len(redacted.body) == len(body)
    assert OPENAI_KEY not in redacted.body and ANTHROPIC_KEY not in redacted.body
    assert b"task-12345678901234567890" in redacted.body  # not a key shape: no false positive
    by_name = {(f.location, f.name): f.fingerprint for f in facts}
    assert (
        by_name[("request-header", "Authorization")] == hashlib.sha256(OPENAI_KEY).hexdigest()[:8]
    )
    assert by_name[("query", "key")] == hashlib.sha256(b"GKEY").hexdigest()[:8]
    assert ("request-body", "anthropic-key") in by_name and (
        "request-body",
        "openai-key",
    ) in by_name


def test_redaction_is_idempotent_so_live_requests_compare_equal() -> None:
    request = Request(b"POST", b"/v1/x?key=ONE", ((b"Authorization", b"Bearer one"),), b"{}")
    other = Request(b"POST", b"/v1/x?key=TWO", ((b"Authorization", b"Bearer two"),), b"{}")
    first, _ = redact_request(request)
    assert redact_request(first)[0] == first
    assert redact_request(other)[0].target == first.target


def test_response_set_cookie_and_body_keys_keep_frame_lengths() -> None:
    frames = (Frame(1, b'{"k":"' + OPENAI_KEY[:10]), Frame(2, OPENAI_KEY[10:] + b'"}'))
    response = Response(200, b"OK", ((b"Set-Cookie", b"sid=secret"),), frames)
    redacted, facts = redact_response(response)
    assert redacted.headers == ((b"Set-Cookie", REDACTED),)
    assert [len(f.data) for f in redacted.frames] == [len(f.data) for f in frames]
    assert OPENAI_KEY not in redacted.body
    assert {f.location for f in facts} == {"response-header", "response-body"}


def test_a_body_whose_coding_cannot_be_undone_is_looked_at_as_it_is() -> None:
    response = Response(
        200, b"OK", ((b"Content-Encoding", b"gzip"),), (Frame(0, b"\x1f\x8b" + OPENAI_KEY),)
    )
    redacted, facts = redact_response(response)
    assert OPENAI_KEY not in redacted.body and len(redacted.body) == len(response.body)
    assert [f.name for f in facts] == ["openai-key"]


def test_a_clean_coded_body_keeps_its_bytes() -> None:
    body = gzip.compress(b'{"text":"nothing secret here"}', mtime=1234)
    response = Response(200, b"OK", ((b"Content-Encoding", b"gzip"),), (Frame(0, body),))
    assert redact_response(response) == (response, [])


# -- compressed bodies --------------------------------------------------------------------------

CODERS = {
    "gzip": lambda data: gzip.compress(data, mtime=7),
    "deflate": zlib.compress,
    "zstd": lambda data: zstandard.ZstdCompressor(level=3).compress(data),
}


def _undo(coding: str, data: bytes) -> bytes:
    if coding == "gzip":
        return gzip.decompress(data)
    if coding == "deflate":
        return zlib.decompress(data)
    return zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()


@pytest.mark.parametrize("coding", sorted(CODERS))
def test_a_coded_request_body_is_redacted_decoded_and_coded_again_the_same_way(
        coding: str) -> None:
    plain = json.dumps({"messages": [{"role": "user", "content": "my key is "
                                      + OPENAI_KEY.decode()}]}).encode()
    coded = CODERS[coding](plain)
    request = Request(b"POST", b"/v1/chat/completions",
                      ((b"Content-Encoding", coding.encode()),
                       (b"Content-Length", str(len(coded)).encode())), coded)
    redacted, facts = redact_request(request)
    assert OPENAI_KEY not in redacted.body
    decoded = _undo(coding, redacted.body)  # a standard decoder reads it
    assert OPENAI_KEY not in decoded and len(decoded) == len(plain)
    assert decoded.replace(b"*", b"") == plain.replace(OPENAI_KEY, b"<redacted>")
    assert dict(redacted.headers)[b"Content-Length"] == str(len(redacted.body)).encode()
    assert {f.name for f in facts} == {"openai-key", f"recoded:{coding}"}
    # The same request coded otherwise (another library, another time)
    # redacts to the same bytes: a replay compares equal.
    otherwise = {"gzip": lambda d: gzip.compress(d, compresslevel=1, mtime=99),
                 "deflate": lambda d: zlib.compress(d, 1),
                 "zstd": lambda d: zstandard.ZstdCompressor(level=19).compress(d)}[coding](plain)
    assert otherwise != coded
    again = redact_request(Request(b"POST", b"/v1/chat/completions", request.headers,
                                   otherwise))[0]
    assert again.body == redacted.body
    assert redact_request(redacted)[0] == redacted  # idempotent


def test_a_coded_stream_keeps_its_frames_and_timing_and_a_cut_stays_cut() -> None:
    events = [b"data: {\"delta\": \"part %d\"}\n\n" % i for i in range(5)]
    events[2] = b"data: {\"delta\": \"" + OPENAI_KEY + b"\"}\n\n"
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
    frames = [compressor.compress(e) + compressor.flush(zlib.Z_SYNC_FLUSH) for e in events]
    frames[-1] += compressor.flush()
    response = Response(200, b"OK", ((b"Content-Encoding", b"gzip"),),
                        tuple(Frame(10 * i, f) for i, f in enumerate(frames)))
    redacted, _ = redact_response(response)
    assert [f.offset_ns for f in redacted.frames] == [0, 10, 20, 30, 40]
    d = zlib.decompressobj(31)
    per_frame = [d.decompress(f.data) for f in redacted.frames]
    assert [len(p) for p in per_frame] == [len(e) for e in events]
    assert d.eof and OPENAI_KEY not in b"".join(per_frame)
    cut = Response(200, b"OK", response.headers, response.frames[:3])
    redacted_cut, _ = redact_response(cut)
    d = zlib.decompressobj(31)
    assert OPENAI_KEY not in d.decompress(b"".join(f.data for f in redacted_cut.frames))
    assert not d.eof  # the recording was cut off: so is what is stored


def test_stored_coding_is_the_same_on_every_machine() -> None:
    decoded = codings.decode([gzip.compress(b"abc" * 30000)], [b"gzip"])
    assert decoded is not None
    coded = b"".join(codings.encode(decoded, [b"x" * 90000], [b"gzip"]))
    # stored blocks: a header, two blocks of at most 65535 bytes, the end
    assert coded[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    assert len(coded) == 10 + 2 * 5 + 90000 + 5 + 8
    assert gzip.decompress(coded) == b"x" * 90000


def test_a_body_that_would_inflate_past_the_limit_is_left_coded() -> None:
    bomb = gzip.compress(b"\0" * (1 << 20))
    assert codings.decode([bomb], [b"gzip"], limit=1000) is None
    assert codings.decode([bomb], [b"br"]) is None


# -- every other place ---------------------------------------------------------------------------


def test_text_places_use_the_same_rules_and_keep_lengths() -> None:
    text = b"line one\nexport OPENAI_API_KEY=" + OPENAI_KEY + b"\nline three\n"
    masked, facts = redact_text(text, "stdout")
    assert OPENAI_KEY not in masked and len(masked) == len(text)
    assert masked.count(b"\n") == 3
    assert facts == [Redaction("stdout", "openai-key", fingerprint(OPENAI_KEY))]
    arg = "--api-key=" + OPENAI_KEY.decode()
    assert OPENAI_KEY.decode() not in redact_str(arg, "argv")
    value = redact_json({"argv": [arg], "n": 3, arg: True}, "connect")
    assert OPENAI_KEY.decode() not in json.dumps(value)


def test_secret_named_variables_and_dotenv_values_become_literal_rules() -> None:
    env = {"MY_SERVICE_TOKEN": "tok3n-abcdef-12345", "PWD": "/home/someone/project",
           "PATH": "/usr/bin:/bin", "AUTH_MODE": "password", "DB_PASSWORD": "hunter2hunter2",
           "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock", "SHORT_KEY": "abc1"}
    values = dict(secret_values(env))
    assert values == {"env:MY_SERVICE_TOKEN": b"tok3n-abcdef-12345",
                      "env:DB_PASSWORD": b"hunter2hunter2"}
    dotenv = b"# comment\nexport API_BASE=https://example.com/v1\nSECRET='s3cr3t-value-9'\n" \
             b"DATABASE_URL=postgres://me:pw1234@db/app\n//registry.npmjs.org/:_authToken=npm_Ab12Cd34\n"
    found = dict(dotenv_values(dotenv, ".env"))
    assert found == {".env:SECRET": b"s3cr3t-value-9",
                     ".env:DATABASE_URL": b"postgres://me:pw1234@db/app",
                     ".env://registry.npmjs.org/:_authToken": b"npm_Ab12Cd34"}
    rules = STANDARD.with_literals(values.items())
    masked, facts = redact_text(b"token tok3n-abcdef-12345 and hunter2hunter2.", "stdout", rules)
    assert masked == b"token <redacted********> and <redacted****>."
    assert [f.name for f in facts] == ["env:MY_SERVICE_TOKEN", "env:DB_PASSWORD"]


def test_an_exchanges_error_text_is_redacted() -> None:
    request = Request(b"POST", b"/v1/x", (), b"{}")
    exchange = Exchange(0, 1, "openai", 0, request, None, Ending.ORIGIN_UNREACHABLE, None, 5,
                        "ConnectError: refused for key " + OPENAI_KEY.decode())
    stored, facts = redact_exchange(exchange)
    assert stored.error is not None and OPENAI_KEY.decode() not in stored.error
    assert ("error", "openai-key") in {(f.location, f.name) for f in facts}


# -- the replay side ------------------------------------------------------------------------------


SECRET = b"plain-secret-without-a-shape-42"


def test_a_replay_learns_a_masked_secret_by_its_fingerprint() -> None:
    rules = STANDARD.with_literals([("env:MY_TOKEN", SECRET)])
    recorded, facts = redact_request(Request(b"POST", b"/v1/x", (), b'{"t":"' + SECRET + b'"}'),
                                     rules)
    assert SECRET not in recorded.body
    live = Request(b"POST", b"/v1/x", (), b'{"t":"' + SECRET + b'"}')
    redactor = LiveRedactor(STANDARD, fingerprints(facts))
    assert redactor.request(live, [recorded]) == recorded
    # learned once, masked everywhere after
    assert SECRET not in redactor.text(b"echo " + SECRET, "stdout")
    # a different value at the same place is not learned
    other = Request(b"POST", b"/v1/x", (), b'{"t":"' + SECRET.upper() + b'"}')
    assert LiveRedactor(STANDARD, fingerprints(facts)).request(other, [recorded]).body != \
        recorded.body


def test_learning_finds_the_place_by_what_comes_before() -> None:
    recorded = b"prefix that moved <redacted*********************> rest"
    live = b"a longer prefix that moved " + SECRET + b" rest"
    assert learn(recorded, live, {fingerprint(SECRET): "match"}) == [("learned:match", SECRET)]


def test_a_replay_learns_from_its_environment() -> None:
    redactor = LiveRedactor(STANDARD, {fingerprint(SECRET): "env:MY_TOKEN"})
    redactor.learn_environment({"ANY_NAME": SECRET.decode(), "OTHER": "x=" + SECRET.decode()})
    assert redactor.text(b"it is " + SECRET, "stdout") == b"it is " + b"<redacted" + \
        b"*" * (len(SECRET) - 10) + b">"


def test_credential_names_are_the_set_key_variables_and_those_the_traffic_carried() -> None:
    gateway, unused = "gw-" + "7" * 30, "db-" + "8" * 30
    env = {"OPENAI_API_KEY": "sk-" + "a" * 40, "ANTHROPIC_API_KEY": "",
           "GATEWAY_API_TOKEN": gateway, "DB_PASSWORD": unused, "HOME": "/home/u",
           "LLM_ENDPOINT": gateway}  # same value, not a credential's name: never kept
    facts = [Redaction("request-header", "api-key", fingerprint(gateway.encode())),
             Redaction("request-body", "recoded:gzip", fingerprint(unused.encode()))]
    names = credential_names(env, facts, known=("OPENAI_API_KEY", "ANTHROPIC_API_KEY"))
    # ANTHROPIC_API_KEY is empty; DB_PASSWORD's print is only a recoded body's
    assert names == ["GATEWAY_API_TOKEN", "OPENAI_API_KEY"]
    assert credential_names({}, facts) == []


@pytest.mark.parametrize(("name", "credential"), [
    ("OPENAI_API_KEY", True), ("MY_SERVICE_TOKEN", True), ("AZURE_OPENAI_API_KEY", True),
    ("PATH", False), ("LD_PRELOAD", False), ("PYTHONPATH", False), ("OPENAI_BASE_URL", False),
    ("BAD NAME_KEY", False), ("1_KEY", False), ("", False)])
def test_only_credential_names_are_given_placeholders(name: str, credential: bool) -> None:
    assert is_credential_name(name) is credential


def test_a_replay_works_out_each_recorded_request_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from wiretape import redaction

    rules = STANDARD.with_literals([("env:MY_TOKEN", SECRET)])
    plain = b'{"t":"' + SECRET + b'","n":1}'
    coded = Request(b"POST", b"/v1/x", ((b"Content-Encoding", b"gzip"),),
                    gzip.compress(plain, mtime=1))
    recorded, facts = redact_request(coded, rules)
    clean = Request(b"POST", b"/v1/x", (), b'{"nothing":"masked"}')
    undone: list[Request] = []
    real_plain = redaction._plain

    def counting(request: Request) -> bytes:
        undone.append(request)
        return real_plain(request)

    monkeypatch.setattr(redaction, "_plain", counting)
    redactor = LiveRedactor(STANDARD, fingerprints(facts))
    for n in (2, 3, 4):  # differ elsewhere: nothing equal, so the route is looked at each time
        live = Request(b"POST", b"/v1/x", (), b'{"t":"' + SECRET + b'","n":%d}' % n)
        assert SECRET not in redactor.request(live, [recorded, clean]).body
    assert sum(r is recorded for r in undone) == 1
    assert sum(r is clean for r in undone) == 1
