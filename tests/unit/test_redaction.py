from __future__ import annotations

import hashlib

from wiretape.model import Frame, Request, Response
from wiretape.redaction import REDACTED, redact_request, redact_response

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


def test_encoded_response_bodies_are_left_alone() -> None:
    response = Response(
        200, b"OK", ((b"Content-Encoding", b"gzip"),), (Frame(0, b"\x1f\x8b" + OPENAI_KEY),)
    )
    assert redact_response(response)[0].body == response.body
