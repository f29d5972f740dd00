"""Credential-named headers, query parameters, form fields and JSON members
(a tool's service keys, not only a model provider's): which names count,
and that their values are masked where a request carries them and wherever
else the same exchange repeats them."""

from __future__ import annotations

from pathlib import Path

import pytest

from wiretape import redaction
from wiretape.model import Ending, Exchange, Frame, Request, Response, RunInfo
from wiretape.redaction import (
    REDACTED,
    fingerprint,
    is_credential_field,
    masked_values,
    redact_argument,
    redact_exchange,
    redact_request,
)
from wiretape.scrub.runs import scan_run
from wiretape.store.runfile import RunFile

#: Names a credential travels under, with the services that use them.
CREDENTIAL_NAMES = [
    "X-Subscription-Token",  # Brave Search
    "Ocp-Apim-Subscription-Key",  # Azure API Management
    "X-RapidAPI-Key", "X-Auth-Token", "Private-Token",  # RapidAPI, GitLab
    "apikey", "X-Api-Token", "X-Access-Token", "X-Amz-Security-Token",
    "access_token", "token", "apiKey", "api-key", "api_key", "client_secret", "password",
    "passwd", "X-Amz-Signature", "X-Amz-Credential", "sig", "secret", "private_token",
    "refreshToken", "id_token", "AccessKey", "credentials", "auth", "key",
]

#: Names that look alike and are not credentials.
OTHER_NAMES = [
    "max_tokens", "tokens", "input_tokens", "max_output_tokens", "Content-Length",
    "Sec-WebSocket-Key", "Sec-WebSocket-Accept", "Idempotency-Key", "page_token",
    "pageToken", "nextPageToken", "token_type", "x-ratelimit-remaining-tokens",
    "anthropic-ratelimit-tokens-limit", "signed", "X-Amz-SignedHeaders", "monkey",
    "keyboard", "keywords", "signal", "sigma", "design", "authors", "public_key",
    "model", "session_id", "x-stainless-os", "Content-Type", "q",
    "prompt_cache_key", "promptCacheKey", "partition_key", "sort_key", "object_key",
]


@pytest.mark.parametrize("name", CREDENTIAL_NAMES)
def test_credential_names_are_masked(name: str) -> None:
    assert is_credential_field(name)
    assert is_credential_field(name.encode())


@pytest.mark.parametrize("name", OTHER_NAMES)
def test_look_alike_names_are_not(name: str) -> None:
    assert not is_credential_field(name)


TOOL_HEADERS = ["X-Subscription-Token", "Ocp-Apim-Subscription-Key", "X-RapidAPI-Key",
                "X-Auth-Token", "Private-Token", "apikey", "X-Api-Token", "X-Access-Token",
                "X-Amz-Security-Token"]


@pytest.mark.parametrize("name", TOOL_HEADERS)
def test_a_tool_services_key_header_is_masked(name: str) -> None:
    secret = b"HSECRET21zzzzzzzz"
    request = Request(b"GET", b"/blob", ((b"Host", b"api.tool.test"), (name.encode(), secret),
                                         (b"Content-Length", b"0")), b"")
    stored, facts = redact_request(request)
    assert dict(stored.headers)[name.encode()] == REDACTED
    assert dict(stored.headers)[b"Content-Length"] == b"0"
    assert [(f.location, f.name, f.fingerprint) for f in facts] == [
        ("request-header", name, fingerprint(secret))]


QUERY_NAMES = ["access_token", "token", "apikey", "apiKey", "api-key", "client_secret",
               "password", "X-Amz-Signature", "X-Amz-Security-Token", "sig", "secret",
               "private_token", "key", "api_key", "x%2Dapi%2Dkey"]


@pytest.mark.parametrize("name", QUERY_NAMES)
def test_a_credential_query_parameter_is_masked(name: str) -> None:
    target = f"/search?q=tides&{name}=QSECRET42yyyyyyyy&max_tokens=5&page_token=p2".encode()
    stored, facts = redact_request(Request(b"GET", target, (), b""))
    assert stored.target == (f"/search?q=tides&{name}=".encode() + REDACTED
                             + b"&max_tokens=5&page_token=p2")
    assert [(f.location, f.name) for f in facts] == [("query", name)]


def test_json_members_and_form_fields_are_masked_in_place() -> None:
    body = (b'{"api_key": "tvly-BSECRET63xxxxxxxx", "query": "tides", "max_tokens": 5, '
            b'"token_type": "bearer", "key": "user:7", "nested": {"password":"pw0rd-123456"}}')
    stored, facts = redact_request(Request(
        b"POST", b"/search", ((b"Content-Type", b"application/json"),
                              (b"Content-Length", str(len(body)).encode())), body))
    assert stored.body == (
        b'{"api_key": "<redacted************>", "query": "tides", "max_tokens": 5, '
        b'"token_type": "bearer", "key": "user:7", "nested": {"password":"<redacted**>"}}')
    assert len(stored.body) == len(body)
    assert [f.name for f in facts] == ["api_key", "password"]
    form = b"grant_type=password&username=ann&password=hunter22&client_secret=s3cr3t-value"
    stored, facts = redact_request(Request(
        b"POST", b"/token", ((b"Content-Type", b"application/x-www-form-urlencoded"),), form))
    assert stored.body == (b"grant_type=password&username=ann&password=********"
                           b"&client_secret=<redacted**>")
    assert [f.name for f in facts] == ["password", "client_secret"]


def test_a_model_request_body_is_untouched() -> None:
    body = (b'{"model": "gpt-4o", "max_tokens": 64, "messages": [{"role": "user", '
            b'"content": "{\\"token\\": \\"not-a-member\\"}"}], '
            b'"tools": [{"name": "login", "parameters": {"properties": {"password": '
            b'{"type": "string"}}}}]}')
    stored, facts = redact_request(Request(b"POST", b"/v1/chat/completions",
                                           ((b"Content-Type", b"application/json"),), body))
    assert stored.body == body and facts == []


def test_a_masked_value_echoed_back_is_masked_in_the_response_too() -> None:
    secret, query = b"HSECRET21zzzzzzzz", b"QSECRET42yyyyyyyy"
    request = Request(b"GET", b"/echo?access_token=" + query,
                      ((b"X-Subscription-Token", secret),), b"")
    echo = b'{"headers": {"x-subscription-token": "' + secret + b'"}, "q": "' + query + b'"}'
    exchange = Exchange(seq=0, connection_id=1, origin="tool:https://api.tool.test",
                        started_at_ns=0, request=request,
                        response=Response(200, b"OK", ((b"X-Echo", secret),), (Frame(0, echo),)),
                        ending=Ending.COMPLETE, ttfb_ns=1, duration_ns=1,
                        error=f"echoed {secret.decode()}")
    stored, facts = redact_exchange(exchange)
    assert stored.response is not None
    data = b"".join(f.data for f in stored.response.frames)
    assert secret not in data and query not in data and len(data) == len(echo)
    assert dict(stored.response.headers)[b"X-Echo"] == b"<redacted*******>"
    assert stored.error is not None and secret.decode() not in stored.error
    assert {(f.location, f.name) for f in facts} >= {
        ("response-body", "echo:X-Subscription-Token"), ("response-body", "echo:access_token")}
    # Only values that look like secrets are looked for elsewhere.
    short = Request(b"GET", b"/?token=1", ((b"X-Auth-Token", b"yes"),), b"")
    assert masked_values(short) == []


def test_scan_finds_a_tool_credential_an_older_recording_left(tmp_path: Path) -> None:
    """A run recorded before these names were masked: the key in its
    header, its echo in the answer, the command line and the output."""
    secret = b"HSECRET21zzzzzzzz"
    path = tmp_path / "old.wtape"
    info = RunInfo(run_id="run_0123456789ab", wiretape_version="0.0.1",
                   argv=("curl", "-H", f"X-Subscription-Token: {secret.decode()}",
                         "https://api.tool.test/blob"),
                   cwd="/tmp/project", env_names=(), origins=(), started_at_ns=1)
    run = RunFile.create(path, info)
    request = Request(b"GET", b"/blob", ((b"X-Subscription-Token", secret),), b"")
    run.write_exchange(Exchange(0, 1, "tool:https://api.tool.test", 1, request,
                                Response(200, b"OK", (), (Frame(1, b"echo " + secret),)),
                                Ending.COMPLETE, 1, 2))
    run.finish(0, b"echo " + secret + b"\n", b"")
    run.close(compact=True)
    report = scan_run(path)
    where = sorted({(f.location, f.name) for f in report.facts})
    assert where == [("argv", "X-Subscription-Token"),
                     ("request-header", "X-Subscription-Token"),
                     ("response-body", "echo:X-Subscription-Token")], where
    assert all(f.fingerprint == fingerprint(secret) for f in report.facts)


@pytest.mark.parametrize(("arg", "stored"), [
    ("X-Subscription-Token: HSECRET21zzzzzzzz", "X-Subscription-Token: <redacted*******>"),
    ("https://api.tool.test/s?q=1&access_token=QSECRET42y", "https://api.tool.test/s?q=1"
                                                            "&access_token=<redacted>"),
    ('{"api_key": "tvly-BSECRET63x", "max_tokens": 5}',
     '{"api_key": "<redacted*****>", "max_tokens": 5}'),
    ("password=hunter22&user=ann", "password=********&user=ann"),
    ("Content-Type: application/json", "Content-Type: application/json"),
    ("max_tokens=500", "max_tokens=500"),
    ("hello world", "hello world"),
])
def test_a_command_line_argument_is_redacted_as_what_it_may_be(arg: str, stored: str) -> None:
    assert redact_argument(arg, "argv") == stored


def test_json_members_are_found_the_same_without_re2(monkeypatch: pytest.MonkeyPatch) -> None:
    body = (b'{"a": {"x": 1, "apiKey":"k-0123456789abc"}, "q": "say \\"token\\": \\"no\\"", '
            b'"token" : "t-0123456789", "tokens": "12", "key": "user:7"}')
    request = Request(b"POST", b"/s", ((b"Content-Type", b"application/json"),), body)
    with_re2 = redact_request(request)[0].body
    monkeypatch.setattr(redaction, "_member_start_re2", None)
    assert redact_request(request)[0].body == with_re2 == (
        b'{"a": {"x": 1, "apiKey":"<redacted*****>"}, "q": "say \\"token\\": \\"no\\"", '
        b'"token" : "<redacted**>", "tokens": "12", "key": "user:7"}')
