"""The replay decision, by table (DESIGN.md, "Matching and the verdict")."""

from __future__ import annotations

import json

import pytest

from wiretape.matching import correspond
from wiretape.model import Request
from wiretape.playback import decide as decide_module
from wiretape.playback.decide import (
    Candidate,
    Comparison,
    Kind,
    Mode,
    Policy,
    Remaining,
    Substitution,
    compare,
    decide,
    exact,
)

BASE = Request(b"POST", b"/v1/chat/completions",
               ((b"Content-Type", b"application/json"), (b"User-Agent", b"sdk/1")),
               b'{"messages":[{"role":"user","content":"hi"}]}')


def req(**changes: object) -> Request:
    values = dict(method=BASE.method, target=BASE.target, headers=BASE.headers, body=BASE.body)
    values.update(changes)
    return Request(**values)  # type: ignore[arg-type]


OTHER = req(body=b'{"messages":[{"role":"user","content":"bye"}]}')
STRICT, DIAG = Policy(Mode.STRICT), Policy(Mode.DIAGNOSTIC)
SUB = Policy(Mode.STRICT, substitutions=(Substitution(old=b"/home/u", new=b"/tmp/a"),))
SUB_OK = Policy(Mode.STRICT, substitutions=SUB.substitutions, allow_substitutions=True)
WITH_PATH = req(body=b'{"p":"/home/u/x"}')
LIVE_PATH = req(body=b'{"p":"/tmp/a/x"}')

CASES = [
    # name, live, recorded (seq, request) in order, policy, kind, seq, serve, stop
    ("equal bytes", BASE, [(0, BASE)], STRICT, Kind.EXACT, 0, True, False),
    (
        "exact found past a differing one (reordered concurrency)",
        BASE,
        [(0, OTHER), (1, BASE)],
        STRICT,
        Kind.EXACT,
        1,
        True,
        False,
    ),
    (
        "identical repeats served in recorded order",
        BASE,
        [(3, BASE), (5, BASE)],
        STRICT,
        Kind.EXACT,
        3,
        True,
        False,
    ),
    (
        "non-semantic header differs: still exact",
        req(headers=((b"Content-Type", b"application/json"), (b"User-Agent", b"sdk/2"))),
        [(0, BASE)],
        STRICT,
        Kind.EXACT,
        0,
        True,
        False,
    ),
    (
        "semantic header differs: diverged",
        req(headers=((b"Content-Type", b"text/plain"),)),
        [(0, BASE)],
        STRICT,
        Kind.DIVERGED,
        0,
        False,
        True,
    ),
    (
        "body differs, strict: rejected and stops",
        OTHER,
        [(0, BASE)],
        STRICT,
        Kind.DIVERGED,
        0,
        False,
        True,
    ),
    (
        "body differs, diagnostic: served, goes on",
        OTHER,
        [(0, BASE)],
        DIAG,
        Kind.DIVERGED,
        0,
        True,
        False,
    ),
    (
        "query differs on the same path: diverged",
        req(target=b"/v1/chat/completions?x=1"),
        [(0, BASE)],
        DIAG,
        Kind.DIVERGED,
        0,
        True,
        False,
    ),
    (
        "other path: missing",
        req(target=b"/v1/embeddings"),
        [(0, BASE)],
        STRICT,
        Kind.MISSING,
        None,
        False,
        True,
    ),
    (
        "other method: missing",
        req(method=b"GET"),
        [(0, BASE)],
        DIAG,
        Kind.MISSING,
        None,
        False,
        False,
    ),
    ("nothing left: missing", BASE, [], DIAG, Kind.MISSING, None, False, False),
    (
        "substituted, strict without allow: stops",
        LIVE_PATH,
        [(0, WITH_PATH)],
        SUB,
        Kind.SUBSTITUTED,
        0,
        False,
        True,
    ),
    ("substituted, allowed", LIVE_PATH, [(0, WITH_PATH)], SUB_OK, Kind.SUBSTITUTED, 0, True, False),
    (
        "exact wins over substituted",
        WITH_PATH,
        [(0, WITH_PATH)],
        SUB_OK,
        Kind.EXACT,
        0,
        True,
        False,
    ),
]


@pytest.mark.parametrize(("name", "live", "recorded", "policy", "kind", "seq", "serve", "stop"),
                         CASES, ids=[c[0] for c in CASES])
def test_decide(name: str, live: Request, recorded: list[tuple[int, Request]], policy: Policy,
                kind: Kind, seq: int | None, serve: bool, stop: bool) -> None:
    decision = decide(live, [Candidate(s, r) for s, r in recorded], policy)
    assert (decision.kind, decision.seq, decision.serve, decision.stop) == (kind, seq, serve, stop)


def test_diverged_names_the_fields_and_counts_bytes() -> None:
    decision = decide(OTHER, [Candidate(0, BASE)], DIAG)
    assert decision.comparison.fields == ("body",)
    assert decision.comparison.first_body_offset == BASE.body.index(b"hi")
    assert decision.comparison.body_bytes_differ == 3  # "hi" -> "bye": 2 changed + 1 longer


def test_non_semantic_header_difference_is_listed_not_decisive() -> None:
    live = req(headers=((b"Content-Type", b"application/json"), (b"User-Agent", b"sdk/2")))
    decision = decide(live, [Candidate(0, BASE)], STRICT)
    assert decision.kind is Kind.EXACT
    assert decision.comparison.header_notes == ("user-agent",)


def test_substitutions_fired_are_counted() -> None:
    decision = decide(LIVE_PATH, [Candidate(0, WITH_PATH)], SUB_OK)
    assert decision.substitutions_fired == (("/home/u", "/tmp/a", 1),)


# -- the index of what is left: the same decisions as the list, without the work ----------


def _session() -> list[Request]:
    """Requests of a session with repeats (identical requests recorded
    twice), a route of its own, a semantic-header twin and UUIDs."""
    turn = [req(body=b'{"messages":[{"role":"user","content":"turn %d"}]}' % (i % 3))
            for i in range(6)]
    other_route = req(target=b"/v1/embeddings", body=b'{"input":"x"}')
    plain = req(headers=((b"Content-Type", b"text/plain"),))
    ids = [req(body=b'{"id":"0190b2a1-1111-7000-8000-00000000000%d","n":1}' % i) for i in (1, 2)]
    return [*turn, other_route, plain, BASE, *ids, BASE]


def test_the_index_decides_as_the_list_under_consume() -> None:
    recorded = _session()
    listed = [Candidate(seq, r) for seq, r in enumerate(recorded)]
    indexed = Remaining(listed)
    live_ids = [req(body=b'{"id":"0190b2a1-9999-7000-8000-00000000000%d","n":1}' % i)
                for i in (1, 2)]
    lives = [BASE, *reversed(recorded), *live_ids, OTHER, BASE, req(method=b"GET")]
    policy = Policy(Mode.DIAGNOSTIC, allow=frozenset({"ids"}))
    seen = []
    for live in lives:
        from_list = decide(live, listed, policy)
        from_index = decide(live, indexed, policy)
        assert from_index == from_list
        seen.append((from_index.kind, from_index.seq))
        if from_index.seq is not None:
            listed = [c for c in listed if c.seq != from_index.seq]
            indexed.consume(from_index.seq)
        assert [c.seq for c in indexed] == [c.seq for c in listed] == indexed.seqs()
    # identical requests are served in recorded order
    assert seen[:3] == [(Kind.EXACT, 8), (Kind.EXACT, 11), (Kind.EXACT, 10)]
    assert {kind for kind, _ in seen} >= {Kind.EXACT, Kind.DIVERGED, Kind.MISSING}


def test_repeated_identical_requests_are_served_in_recorded_order() -> None:
    indexed = Remaining([Candidate(3, BASE), Candidate(4, OTHER), Candidate(5, BASE),
                         Candidate(9, BASE)])
    served = []
    for _ in range(3):
        decision = decide(BASE, indexed, STRICT)
        assert decision.kind is Kind.EXACT
        assert decision.seq is not None
        served.append(decision.seq)
        indexed.consume(decision.seq)
    assert served == [3, 5, 9]
    assert decide(BASE, indexed, STRICT).kind is Kind.DIVERGED  # only OTHER is left
    assert indexed.route(BASE.method, BASE.path) == [Candidate(4, OTHER)]


def test_an_exact_match_is_decided_without_parsing_or_measuring(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*_args: object, **_kwargs: object) -> object:
        raise AssertionError("parsed or measured for an exact match")

    monkeypatch.setattr(decide_module, "differing_region", refused)
    monkeypatch.setattr(correspond, "document", refused)
    monkeypatch.setattr(json, "loads", refused)
    remaining = Remaining([Candidate(0, OTHER), Candidate(1, req(body=BASE.body + b" ")),
                           Candidate(2, BASE)])
    decision = decide(BASE, remaining, STRICT)
    assert (decision.kind, decision.seq, decision.comparison) == (Kind.EXACT, 2, Comparison())
    assert exact(BASE, remaining, STRICT) == decision


def test_only_the_chosen_request_is_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    measured: list[tuple[bytes, bytes]] = []
    real = decide_module.differing_region

    def counting(recorded: bytes, live: bytes) -> object:
        measured.append((recorded, live))
        return real(recorded, live)

    monkeypatch.setattr(decide_module, "differing_region", counting)
    others = [req(body=b'{"messages":[{"role":"user","content":"no %d"}]}' % i)
              for i in range(5)]
    decision = decide(OTHER, [Candidate(i, r) for i, r in enumerate(others)], DIAG)
    assert (decision.kind, decision.seq) == (Kind.DIVERGED, 0)
    assert measured == [(others[0].body, OTHER.body)]
    assert decision.comparison == compare(OTHER, others[0], DIAG)


def test_a_recorded_body_is_parsed_once_across_decisions(
        monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []
    real = correspond.document

    def counting(text: str) -> object:
        parsed.append(text)
        return real(text)

    monkeypatch.setattr(correspond, "document", counting)
    recorded = req(body=b'{"id":"0190b2a1-1111-7000-8000-000000000001","n":1}')
    remaining = Remaining([Candidate(0, recorded)])
    policy = Policy(Mode.DIAGNOSTIC, allow=frozenset({"ids"}))
    for i in range(3):
        live = req(body=b'{"id":"0190b2a1-1111-7000-8000-00000000000%d","n":2}' % (i + 2))
        decision = decide(live, remaining, policy)
        assert (decision.kind, decision.seq) == (Kind.DIVERGED, 0)  # n differs: not consumed
    assert parsed.count(recorded.body.decode()) == 1
    assert len(parsed) == 4  # the recorded body once, each live body once
