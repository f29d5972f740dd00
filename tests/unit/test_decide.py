"""The replay decision, by table (DESIGN.md, "Matching and the verdict")."""

from __future__ import annotations

import pytest

from wiretape.model import Request
from wiretape.playback.decide import Candidate, Kind, Mode, Policy, Substitution, decide

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
