"""The correspondence engine (matching.correspond) in tables: what a run
may make for itself (ids, a clock shift, key order) and what it may not."""

from __future__ import annotations

import json

import pytest

from wiretape.matching.correspond import Learned, Rule, compare, parse_allowances
from wiretape.model import Request
from wiretape.playback.decide import Candidate, Kind, Mode, Policy, decide

A, B, C = ("0190b2a1-1111-7000-8000-000000000001", "0190b2a1-2222-7000-8000-000000000002",
           "0190b2a1-3333-7000-8000-000000000003")
DEVICE_REC, DEVICE_LIVE = "3f" * 32, "9c0d" * 16
T0 = 1_796_000_000.25


def doc(**members: object) -> str:
    return json.dumps(members)


def walk(pairs: list[tuple[str, str]], tolerance: float = 60.0) -> tuple[list[str | None], Learned]:
    """Each (recorded, live) in turn, holding what was learned: the problems."""
    learned, problems = Learned(tolerance), []
    for recorded, live in pairs:
        result = compare(recorded, live, learned)
        problems.append(result.problem)
        if result.equivalent:
            learned = result.learned
    return problems, learned


@pytest.mark.parametrize(("pairs", "expected"), [
    # a consistent renaming passes, across requests and places
    ([(doc(id=A), doc(id=B)), (doc(x=A, y=A), doc(x=B, y=B))], [None, None]),
    # A -> B, then A -> C: a break
    ([(doc(id=A), doc(id=B)), (doc(id=A), doc(id=C))], [None, "was"]),
    # B appearing where A was not (where C was): a break
    ([(doc(id=A), doc(id=B)), (doc(id=C), doc(id=B))], [None, "stood for"]),
    # A appearing as itself in a request that differs elsewhere: a break
    ([(doc(id=A), doc(id=B)), (doc(id=A, t="x"), doc(id=A, t="x "))], [None, "recorded"]),
    # an id in a URL and a client-made id with an embedded epoch
    ([(f"/v1/s/{A}?q=1", f"/v1/s/{B}?q=1")], [None]),
    ([(doc(name="read_file_1796000000123_0"), doc(name="read_file_1796000999456_0"))], [None]),
    # ids inside a JSON-in-a-string value, members in another order there too
    ([(doc(user_id=json.dumps({"device_id": DEVICE_REC, "session_id": A})),
       doc(user_id=json.dumps({"session_id": B, "device_id": DEVICE_LIVE})))], [None]),
    # ids by their label: a member named as an id, a short token after "ID:"
    ([(doc(call_id="read_file_1796000000123_0"), doc(call_id="read_file_1796000999456_0"))],
     [None]),
    ([(doc(call_id="fco_9b1deb4d3b7d4bad9bdd2b0d7b3dcb6d"),
       doc(call_id="fco_1c2f7a3e5d6b4c8f9e0a1b2c3d4e5f60"))], [None]),
    ([(doc(out="Chunk ID: 5a99c8\nok"), doc(out="Chunk ID: 6ffc03\nok"))], [None]),
    ([(doc(out="Chunk 5a99c8"), doc(out="Chunk 6ffc03"))], ["recorded"]),
    # words are not ids; other text is a real difference
    ([(doc(text="hello world"), doc(text="hello there"))], ["recorded"]),
    ([(doc(n=12), doc(n=13))], ["recorded"]),
    ([(doc(a=1), doc(a=1, b=2))], ["added"]),
    ([(doc(a=[1, 2]), doc(a=[1]))], ["elements"]),
])
def test_identifiers_form_a_bijection(pairs: list[tuple[str, str]],
                                      expected: list[str | None]) -> None:
    problems, _ = walk(pairs)
    assert len(problems) == len(expected)
    for problem, want in zip(problems, expected, strict=True):
        if want is None:
            assert problem is None
        else:
            assert problem is not None and want in problem, problem


def test_a_consistent_clock_shift_passes_and_a_changed_one_fails() -> None:
    day = 86_400.0
    problems, learned = walk([
        (doc(t=T0), doc(t=T0 + day)),
        (doc(t=T0 + 5), doc(t=T0 + day + 7)),  # 2 s of drift: within the tolerance
        (doc(at="2026-12-01T10:00:00Z"), doc(at="2026-12-02T10:00:03Z")),
        (doc(ms=int(T0 * 1000)), doc(ms=int((T0 + day) * 1000))),
    ])
    assert problems == [None, None, None, None]
    assert learned.shift_s == pytest.approx(day)
    problems, _ = walk([(doc(t=T0), doc(t=T0 + day)), (doc(t=T0 + 10), doc(t=T0 + 2 * day))])
    assert problems[0] is None
    assert problems[1] == ("/t: clock shift +1d 23h 59m 50s here, +1d learned earlier "
                           "(tolerance 1m)")


@pytest.mark.parametrize(("recorded", "live", "pointers"), [
    ('{"a": 1, "b": 2}', '{"b": 2, "a": 1}', ["/"]),
    ('{"o": {"x": 1, "y": [{"p": 1, "q": 2}]}}', '{"o": {"y": [{"q": 2, "p": 1}], "x": 1}}',
     ["/o", "/o/y/0"]),
])
def test_key_order_on_one_level_and_nested(recorded: str, live: str, pointers: list[str]) -> None:
    result = compare(recorded, live, Learned())
    assert result.equivalent
    assert [where for rule, where, *_ in result.fired if rule is Rule.KEY_ORDER] == pointers
    assert result.rules == {Rule.KEY_ORDER}


def test_each_fired_rule_is_named_with_pointers_and_examples() -> None:
    recorded = doc(meta={"session": A, "at": T0}, messages=["hi"])
    live = doc(messages=["hi"], meta={"session": B, "at": T0 + 3600})
    summary = compare(recorded, live, Learned()).summary()
    assert [e["rule"] for e in summary] == ["ids", "clock", "key-order"]
    ids, clock, order = summary
    assert ids == {"rule": "ids", "count": 1, "pointers": ["/meta/session"],
                   "examples": [[A, B]]}
    assert clock["pointers"] == ["/meta/at"] and clock.get("shift_s") == 3600.0
    assert order["pointers"] == ["/"]


def test_jsonl_lines_and_plain_text() -> None:
    recorded = f'{{"id": "{A}"}}\n{{"id": "{A}", "n": 1}}\n'
    live = f'{{"id": "{B}"}}\n{{"id": "{B}", "n": 1}}\n'
    result = compare(recorded, live, Learned())
    assert result.equivalent and [w for _, w, *_ in result.fired] == ["line 1 /id", "line 2 /id"]
    assert compare(f"session {A} started", f"session {B} started", Learned()).equivalent
    assert not compare(f"session {A} started", f"session {B} ended", Learned()).equivalent


def test_unknown_allowance_is_named() -> None:
    assert parse_allowances("ids, clock", "--allow") == {"ids", "clock"}
    assert parse_allowances("none", "--allow") == frozenset()
    with pytest.raises(ValueError, match="unknown allowance 'uuids' in --allow: expected some "
                                         "of ids, clock, key-order, durations, paths"):
        parse_allowances("ids,uuids", "--allow")


def request(body: str, target: str = "/v1/chat/completions") -> Request:
    return Request(b"POST", target.encode(), ((b"content-type", b"application/json"),),
                   body.encode())


def test_decide_counts_equivalent_only_when_allowed_and_holds_what_it_learned() -> None:
    tape = [Candidate(0, request(doc(id=A))), Candidate(1, request(doc(id=A, n=2)))]
    strict = Policy(mode=Mode.STRICT)
    refused = decide(request(doc(id=B)), tape, strict)
    assert (refused.kind, refused.serve, refused.stop, refused.not_allowed) == (
        Kind.DIVERGED, False, True, ("ids",))
    allowed = Policy(mode=Mode.STRICT, allow=frozenset({"ids"}))
    first = decide(request(doc(id=B)), tape, allowed)
    assert (first.kind, first.seq, first.serve) == (Kind.EQUIVALENT, 0, True)
    assert first.learned is not None and first.learned.forward == {A: B}
    # the second request must keep the correspondence
    kept = decide(request(doc(id=B, n=2)), tape[1:], allowed, first.learned)
    assert kept.kind is Kind.EQUIVALENT
    broken = decide(request(doc(id=C, n=2)), tape[1:], allowed, first.learned)
    assert broken.kind is Kind.DIVERGED and broken.stop
    # byte-exact stays exact, with nothing learned
    exact = decide(request(doc(id=A)), tape, allowed)
    assert exact.kind is Kind.EXACT and exact.learned is None and exact.rules == ()


@pytest.mark.parametrize(("recorded", "live", "fired"), [
    (doc(out="Wall time: 0.0348 seconds"), doc(out="Wall time: 0.0001 seconds"), ["durations"]),
    (doc(latency_ms=12), doc(latency_ms=30), ["durations"]),
    (doc(started_at_ms=1_796_000_000_000), doc(started_at_ms=1_796_000_005_000), ["clock"]),
    (doc(text="took 5 apples"), doc(text="took 6 apples"), None),
    (doc(count=5), doc(count=6), None),
])
def test_durations_are_measured_times_only(recorded: str, live: str,
                                           fired: list[str] | None) -> None:
    result = compare(recorded, live, Learned())
    if fired is None:
        assert not result.equivalent
    else:
        assert result.equivalent and [r.value for r in result.rules] == fired


def test_a_diverged_request_names_what_no_rule_explains() -> None:
    tape = [Candidate(0, request(doc(id=A, text="hello")))]
    decision = decide(request(doc(id=B, text="bye")), tape,
                      Policy(mode=Mode.STRICT, allow=frozenset({"ids"})))
    assert decision.kind is Kind.DIVERGED and decision.not_allowed == ()
    assert decision.unexplained == "/text: 'hello' recorded, 'bye' live"


SPAN = (T0, T0 + 60)
LIVE = (T0 + 86_400, T0 + 86_400 + 60)


@pytest.mark.parametrize(("recorded", "live"), [
    # found by trying to make a changed request pass
    (doc(order="100000000042"), doc(order="100000000999")),         # a number is a quantity
    (doc(customer_id="alice.smith"), doc(customer_id="mallory.x")),  # a name, not an id
    (doc(cls="HTTPServerConfigV2"), doc(cls="HTTPServerConfigV3")),  # a version bump
    (doc(phone=2125551234), doc(phone=3125559876)),                 # not a clock reading then
    (doc(born="1990-05-01"), doc(born="1990-05-02")),
    (doc(timeout_ms=1000), doc(timeout_ms=60000)),                  # a setting, not a measure
    (doc(text="timeout 30 s"), doc(text="timeout 60 s")),
    # a tool's result: a digest there is what the tool said
    (doc(messages=[{"role": "tool", "content": "sha " + "ab" * 32}]),
     doc(messages=[{"role": "tool", "content": "sha " + "3f" * 32}])),
])
def test_real_changes_are_not_learned(recorded: str, live: str) -> None:
    learned = Learned(60.0, recorded_span=SPAN, live_span=LIVE)
    assert not compare(recorded, live, learned).equivalent


def test_ids_the_recording_served_come_back_unchanged() -> None:
    served = b'{"id": "chatcmpl-9b1deb4d3b7d4bad9bdd2b0d7b3dcb6d"}'
    learned = Learned(served=served)
    result = compare(doc(previous="chatcmpl-9b1deb4d3b7d4bad9bdd2b0d7b3dcb6d"),
                     doc(previous="chatcmpl-1c2f7a3e5d6b4c8f9e0a1b2c3d4e5f60"), learned)
    assert result.problem is not None and "was in the recording's answers" in result.problem


def test_clock_readings_lie_in_their_own_runs() -> None:
    learned = Learned(60.0, recorded_span=SPAN, live_span=LIVE)
    assert compare(doc(t=T0 + 5), doc(t=T0 + 86_405), learned).equivalent
    assert not compare(doc(t=T0 - 10 * 86_400), doc(t=T0 + 86_405), learned).equivalent


def test_the_outcome_learns_only_uuids_of_its_own() -> None:
    learned = Learned(uuids_only=True)
    assert compare(doc(uuid=A), doc(uuid=B), learned).equivalent
    assert not compare(doc(sha="ab" * 32), doc(sha="3f" * 32), learned).equivalent


def test_equal_values_in_other_bytes_are_not_equivalent() -> None:
    tape = [Candidate(0, request('{"x": 100}'))]
    every = Policy(mode=Mode.STRICT, allow=frozenset({"ids", "clock", "key-order", "durations"}))
    for live in ('{"x":100}', '{"x": 1e2}', '{"x": 1, "x": 100}'):
        assert decide(request(live), tape, every).kind is Kind.DIVERGED, live


def test_an_id_in_the_path_is_learned() -> None:
    tape = [Candidate(0, request(doc(q=1), f"/v1/sessions/{A}/chat"))]
    decision = decide(request(doc(q=1), f"/v1/sessions/{B}/chat"), tape,
                      Policy(mode=Mode.STRICT, allow=frozenset({"ids"})))
    assert (decision.kind, decision.seq) == (Kind.EQUIVALENT, 0)
