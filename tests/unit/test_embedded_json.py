"""Divergence kinds inside a JSON document carried in a string value, as
Claude Code's ``metadata.user_id`` (the text of ``{"device_id": <64 hex>,
"session_id": <uuid>}``): each value that differs inside is classified on
its own and placed by the string's pointer, ``#``, and a pointer inside."""

from __future__ import annotations

import json

import pytest

from wiretape.matching import explain
from wiretape.matching.kinds import SpanKind, embedded
from wiretape.matching.regions import Region
from wiretape.model import Request

DEVICE = "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"
OTHER_DEVICE = "a1fce4363854ff888cff4b8e7875d600c2682390412a8cf79b37d0b11148b0fa"
SESSION = "5b0c1e2a-9f3d-4c1b-8e2a-1234567890ab"
OTHER_SESSION = "7d9e2f10-1a2b-4c3d-9e8f-abcdefabcdef"


def messages_request(user_id: str, content: str = "hi") -> Request:
    body = json.dumps({"model": "claude-sonnet-4-5", "metadata": {"user_id": user_id},
                       "messages": [{"role": "user", "content": content}]},
                      separators=(",", ":"))
    return Request(b"POST", b"/v1/messages", ((b"content-type", b"application/json"),),
                   body.encode())


def user_id(device: str, session: str, **more: str) -> str:
    return json.dumps({"device_id": device, "account_uuid": "", "session_id": session, **more},
                      separators=(",", ":"))


def spans(recorded: Request, live: Request) -> list[tuple[str | None, str, str, str]]:
    return [(s.pointer, s.kind, s.recorded, s.live) for s in explain(recorded, live).spans]


def test_a_changed_session_id_is_a_uuid_inside_the_string() -> None:
    recorded, live = (messages_request(user_id(DEVICE, SESSION)),
                      messages_request(user_id(DEVICE, OTHER_SESSION)))
    explained = explain(recorded, live)
    assert spans(recorded, live) == [
        ("/metadata/user_id#/session_id", "uuid", SESSION, OTHER_SESSION)]
    assert explained.first_line == (
        f'UUID differs at /metadata/user_id#/session_id: "{SESSION}" -> "{OTHER_SESSION}"')
    assert explained.kind_summary == ("uuid",)


def test_another_machine_s_ids_are_two_values_of_their_own_kinds() -> None:
    """Replayed on another machine both ids change, close together: as
    bytes one region across the string's inner quotes, which no kind fits."""
    recorded, live = (messages_request(user_id(DEVICE, SESSION)),
                      messages_request(user_id(OTHER_DEVICE, OTHER_SESSION)))
    assert spans(recorded, live) == [
        ("/metadata/user_id#/device_id", "hex_id", DEVICE, OTHER_DEVICE),
        ("/metadata/user_id#/session_id", "uuid", SESSION, OTHER_SESSION)]


def test_the_token_is_placed_on_the_bytes_as_they_crossed_the_wire() -> None:
    """Escapes before the value (``\\u00e9``, ``\\"``) are counted as written."""
    inner = {"note": "café \"quoted\"", "session_id": SESSION}
    recorded = json.dumps({"user_id": json.dumps(inner)}).encode()
    live = json.dumps({"user_id": json.dumps({**inner, "session_id": OTHER_SESSION})}).encode()
    start = recorded.index(b'"', recorded.index(b":"))
    value = Region(start, len(recorded) - 1, start, len(live) - 1)
    ((region, token),) = embedded(recorded, live, value) or []
    assert token.kind is SpanKind.UUID and token.inner == "#/session_id"
    assert token.recorded is not None and token.live is not None
    assert recorded[slice(*token.recorded)] == SESSION.encode()
    assert live[slice(*token.live)] == OTHER_SESSION.encode()
    assert region.size <= len(SESSION)


def test_a_document_in_a_string_in_a_string_is_followed() -> None:
    def wrapped(session: str) -> str:
        return json.dumps({"trace": json.dumps({"session_id": session}), "n": 1})

    recorded, live = messages_request(wrapped(SESSION)), messages_request(wrapped(OTHER_SESSION))
    assert spans(recorded, live) == [
        ("/metadata/user_id#/trace#/session_id", "uuid", SESSION, OTHER_SESSION)]


def test_a_member_added_inside_is_named_where_it_is() -> None:
    recorded = messages_request(user_id(DEVICE, SESSION))
    live = messages_request(user_id(DEVICE, SESSION, org_id=OTHER_SESSION))
    assert spans(recorded, live) == [("/metadata/user_id#/org_id", "uuid", "", OTHER_SESSION)]


@pytest.mark.parametrize(("before", "after"), [
    ("{not json " + SESSION, "{not json " + OTHER_SESSION),  # not a document: as before
    ("plain " + SESSION, "plain " + OTHER_SESSION),
])
def test_a_string_that_is_no_document_is_classified_as_before(before: str, after: str) -> None:
    assert spans(messages_request(before), messages_request(after)) == [
        ("/metadata/user_id", "uuid", SESSION, OTHER_SESSION)]


def test_a_document_differing_only_in_spacing_is_left_to_the_bytes() -> None:
    recorded = messages_request(json.dumps({"session_id": SESSION}))
    live = messages_request(json.dumps({"session_id": SESSION}, separators=(",", ":")))
    assert [(p, k) for p, k, _, _ in spans(recorded, live)] == [
        ("/metadata/user_id", "whitespace")]
