"""Outcome comparison with timestamps and timings set aside, and added
conversation elements named in one sentence."""

from __future__ import annotations

import json

import pytest

from wiretape.matching import explain
from wiretape.matching.elements import describe
from wiretape.matching.volatile import compare_volatile
from wiretape.model import Request

SESSION = (
    b'{"_type": "metadata", "updated_at": "2026-11-29T14:55:07.397596", '
    b'"metadata": {"_last_usage": {"input_tokens": 27923, "ttft_ms": 16, "generation_ms": 95}}}\n'
    b'{"role": "user", "content": "hi", "timestamp": "2026-11-29T14:55:02.230532"}\n'
    b'{"role": "assistant", "content": "hello", "timestamp": "2026-11-29T14:55:03.889108", '
    b'"latency_ms": 1661}\n'
)


def test_a_session_log_differing_in_its_clock_is_the_same() -> None:
    other = (SESSION.replace(b"14:55:0", b"09:01:4").replace(b'"ttft_ms": 16', b'"ttft_ms": 31')
             .replace(b'"latency_ms": 1661', b'"latency_ms": 12'))
    result = compare_volatile(SESSION, other)
    assert result.same
    assert result.volatile == {"timestamp": 3, "duration": 2}
    assert result.summary() == "2 durations, 3 timestamps"
    assert result.examples[0] == ("line 1 /updated_at", "2026-11-29T14:55:07.397596",
                                  "2026-11-29T09:01:47.397596")


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ((b'"content": "hello"', b'"content": "hullo"'), "line 3 /content"),
        ((b'"input_tokens": 27923', b'"input_tokens": 27924'),
         "line 1 /metadata/_last_usage/input_tokens"),
        ((b'"role": "user", ', b""), "line 2 /role"),
        ((b"\n{\"role\": \"assistant\"", b"\n\n{\"role\": \"assistant\""), "lines"),
    ],
)
def test_anything_else_is_a_real_difference(change: tuple[bytes, bytes], where: str) -> None:
    result = compare_volatile(SESSION, SESSION.replace(*change))
    assert not result.same
    assert result.real[0][0] == where


def test_plain_text_and_binary() -> None:
    assert compare_volatile(b"done at 2026-11-29 14:55:02\nok\n",
                            b"done at 2026-11-30 08:00:00\nok\n").summary() == "1 timestamp"
    assert not compare_volatile(b"12 files\n", b"13 files\n").same
    assert not compare_volatile(b"\x00\x01", b"\x00\x02").same
    assert compare_volatile(b"same", b"same").same
    # An epoch time under any name is a timestamp; a count is not.
    assert compare_volatile(b'{"created": 1732890000}', b'{"created": 1732899999}').same
    assert not compare_volatile(b'{"count": 3}', b'{"count": 4}').same


def test_elements_are_described_per_provider_shape() -> None:
    assert describe({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]}
    ) == "assistant -> read_file"
    assert describe({"role": "tool", "name": "read_file", "content": "1| Launch"}) == \
        'tool read_file "1| Launch"'
    assert describe({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}]}) == "user toolu_1"
    assert describe({"type": "function_call", "name": "ls", "call_id": "c", "arguments": "{}"}) == \
        "function_call -> ls"
    assert describe({"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {}}}]}) == \
        "model -> ls"
    assert describe(3) == "3"


def _request(messages: list[dict[str, object]]) -> Request:
    body = json.dumps({"model": "m", "messages": messages}).encode()
    return Request(
        b"POST", b"/v1/chat/completions", ((b"content-type", b"application/json"),), body
    )


def test_added_messages_are_named_in_the_first_line() -> None:
    base = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Hi there"}]
    extra = [{"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Again"}]
    found = explain(_request(base), _request(base[:1] + extra + base[1:]))
    assert found.first_line == ('2 messages added at /messages/1-/messages/2: '
                                'assistant "Hello!"; user "Again"')
    assert [s.element for s in found.spans] == ['assistant "Hello!"', 'user "Again"']
    gone = explain(_request(base + extra), _request(base))
    assert gone.first_line.startswith("2 messages removed at /messages/2-/messages/3")


def test_only_clock_readings_of_the_runs_are_timestamps() -> None:
    since = 1_795_900_000.0  # 2026-11-28
    # Dates that are data, not clock readings: real differences.
    for old, new in (
        (b'{"due": "2024-05-01"}', b'{"due": "2024-06-01"}'),
        (b'{"birthday": "1985-07-09T00:00:00"}', b'{"birthday": "1990-01-02T00:00:00"}'),
        (b'{"at": "2999-01-01T10:00:00"}', b'{"at": "2999-01-01T11:00:00"}'),
    ):
        assert not compare_volatile(old, new, since=since).same, old
    # Readings taken around the runs (ISO, epoch ms, log format) are set aside.
    now = compare_volatile(b'{"t": "2026-11-29T09:00:00Z", "e": 1795950000000}',
                           b'{"t": "2026-11-29T10:30:00Z", "e": 1795953000000}', since=since)
    assert now.same and now.volatile == {"timestamp": 2}
    assert compare_volatile(b'[29/Nov/2026:09:00:00 +0000] GET /\n',
                            b'[29/Nov/2026:10:00:00 +0000] GET /\n', since=since).same


def test_timings_in_text_carry_their_unit() -> None:
    took = compare_volatile(b"took 88.1 ms\n", b"took 52.8 ms\n")
    assert took.same and took.volatile == {"duration": 1}
    assert not compare_volatile(b"took 88 files\n", b"took 52 files\n").same


@pytest.mark.parametrize(("recorded", "replayed", "said"), [
    (b"hello\n", b"", ("1 line", "no lines")),
    (b"a\nb\n", b"a\nb\nc\n", ("2 lines", "3 lines")),
    (b"a\n", b"a\nb\nc", ("1 line", "3 lines")),
])
def test_line_counts_count_lines(recorded: bytes, replayed: bytes,
                                 said: tuple[str, str]) -> None:
    assert compare_volatile(recorded, replayed).real == (("lines", *said),)
