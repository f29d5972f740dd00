from __future__ import annotations

from wiretape.playback.pacing import Pace, schedule
from wiretape.playback.verdict import compute


def rows(*kinds_seqs: tuple[str, int | None]) -> list[dict[str, object]]:
    return [{"kind": k, "seq": s} for k, s in kinds_seqs]


def test_all_exact_passes() -> None:
    v = compute(run_id="r", replay_id="p", mode="strict", complete=True, recorded_seqs=[0, 1],
                rows=rows(("exact", 0), ("exact", 1)),
                outcome={"exit_status": {"same": True}})
    assert (v.exact, v.reused, v.unused, v.missing) == (2, 2, 0, 0)
    assert v.passed and v.exit_code == 0


def test_unused_and_missing() -> None:
    v = compute(run_id="r", replay_id="p", mode="diagnostic", complete=True,
                recorded_seqs=[0, 1, 2], rows=rows(("exact", 0), ("missing", None)))
    assert (v.exact, v.missing, v.unused, v.unused_seqs) == (1, 1, 2, (1, 2))
    assert not v.passed and v.exit_code == 3


def test_diagnostic_with_divergence_is_never_a_pass() -> None:
    v = compute(run_id="r", replay_id="p", mode="diagnostic", complete=True, recorded_seqs=[0],
                rows=rows(("diverged", 0)))
    assert v.reused == 1 and not v.exchanges_pass and v.exit_code == 3


def test_substituted_counts_apart_and_passes_only_when_allowed() -> None:
    common = dict(run_id="r", replay_id="p", mode="strict", complete=True, recorded_seqs=[0, 1],
                  rows=rows(("exact", 0), ("substituted", 1)))
    assert compute(**common).exit_code == 3  # type: ignore[arg-type]
    allowed = compute(**common, allow_substitutions=True)  # type: ignore[arg-type]
    assert allowed.exit_code == 0 and allowed.exact == 1 and allowed.substituted == 1


def test_outcome_differs_gives_exit_1() -> None:
    v = compute(run_id="r", replay_id="p", mode="strict", complete=True, recorded_seqs=[0],
                rows=rows(("exact", 0)), outcome={"stdout": {"same": False}})
    assert v.exchanges_pass and v.exit_code == 1 and not v.passed


def test_pacing_fast_never_waits_and_recorded_keeps_offsets() -> None:
    assert schedule(5_000, [10, 20], Pace.FAST) == (0, (0, 0))
    assert schedule(5_000, [6_000, 4_000, 9_000], Pace.RECORDED) == (5_000, (6_000, 6_000, 9_000))
    assert schedule(1_000, [2_000], Pace.RECORDED, scale=0.5) == (500, (1_000,))


def test_json_form_lists_the_fields_then_the_derived_numbers() -> None:
    v = compute(run_id="r", replay_id="p", mode="strict", complete=True, recorded_seqs=[0, 1],
                rows=[{"index": 0, "kind": "exact", "seq": 0, "served": True, "method": "POST",
                       "target": "/v1/chat/completions", "decided_at_ns": 5,
                       "detail": {"fields": [], "header_notes": [], "body_bytes_differ": 0,
                                  "first_body_offset": None, "substitutions": []}}],
                outcome={"exit_status": {"same": True, "recorded": 0, "replayed": 0}},
                describe={1: {"method": "POST", "target": "/v1/chat/completions",
                              "summary": "model m"}})
    data = v.to_json()
    assert list(data) == [
        "run_id", "replay_id", "mode", "complete", "recorded", "exact", "substituted",
        "equivalent", "diverged", "missing", "unused", "unused_seqs", "allow_substitutions",
        "allow", "outcome", "requests", "unused_exchanges", "reused", "exchanges_pass",
        "outcome_same", "exit_code", "pass", "interrupted", "rules"]
    assert data["unused_seqs"] == [1] and data["requests"] == [dict(v.requests[0])]
    assert data["unused_exchanges"] == [{"seq": 1, "method": "POST",
                                         "target": "/v1/chat/completions", "summary": "model m"}]
    assert data["outcome"] == {"exit_status": {"same": True, "recorded": 0, "replayed": 0}}
    assert (data["reused"], data["exit_code"], data["pass"]) == (1, 3, False)
