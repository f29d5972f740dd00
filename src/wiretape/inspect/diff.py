"""Two runs side by side: pair their exchanges (same method and path, in
order) and explain how each pair's requests differ — what changed in the
prompts between two versions of an agent. Pure over exchanges.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from wiretape.inspect.summary import request_summary
from wiretape.matching import Explanation, explain
from wiretape.model import Exchange, ExplanationJSON


class ExchangeRefJSON(TypedDict):
    """An exchange named in ``diff --json``: seq, method, target, summary."""

    seq: int
    method: str
    target: str
    summary: str


class PairJSON(TypedDict):
    a: ExchangeRefJSON
    b: ExchangeRefJSON
    same: bool
    explanation: ExplanationJSON | None


class DiffSummaryJSON(TypedDict):
    pairs: int
    same: int
    differ: int
    only_a: int
    only_b: int


class RunDiffJSON(TypedDict):
    pairs: list[PairJSON]
    only_a: list[ExchangeRefJSON]
    only_b: list[ExchangeRefJSON]
    summary: DiffSummaryJSON


@dataclass(frozen=True)
class Pair:
    a: Exchange
    b: Exchange
    explanation: Explanation | None  # None when the requests are equal byte for byte


@dataclass(frozen=True)
class RunDiff:
    pairs: tuple[Pair, ...]
    only_a: tuple[Exchange, ...]
    only_b: tuple[Exchange, ...]

    @property
    def same(self) -> int:
        return sum(1 for p in self.pairs if p.explanation is None)

    @property
    def differ(self) -> int:
        return len(self.pairs) - self.same

    def to_json(self) -> RunDiffJSON:
        def ref(e: Exchange) -> ExchangeRefJSON:
            return {"seq": e.seq, "method": e.request.method.decode("latin-1"),
                    "target": e.request.target.decode("latin-1"),
                    "summary": request_summary(e.request)}

        return {
            "pairs": [{"a": ref(p.a), "b": ref(p.b), "same": p.explanation is None,
                       "explanation": p.explanation.to_json() if p.explanation else None}
                      for p in self.pairs],
            "only_a": [ref(e) for e in self.only_a],
            "only_b": [ref(e) for e in self.only_b],
            "summary": {"pairs": len(self.pairs), "same": self.same, "differ": self.differ,
                        "only_a": len(self.only_a), "only_b": len(self.only_b)},
        }


def diff_runs(a: Sequence[Exchange], b: Sequence[Exchange]) -> RunDiff:
    """Pair each exchange of ``a`` with the first unpaired one of ``b`` on
    the same method and path (sequence order), and explain each pair."""
    left = list(b)
    pairs, only_a = [], []
    responses_a = tuple(e.response for e in a if e.response is not None)
    for ex in a:
        match = next((o for o in left if o.request.method == ex.request.method
                      and o.request.path == ex.request.path), None)
        if match is None:
            only_a.append(ex)
            continue
        left.remove(match)
        same = (ex.request.target == match.request.target and ex.request.body == match.request.body
                and ex.request.method == match.request.method)
        explanation = None
        if not same:
            explanation = explain(ex.request, match.request, recorded_responses=responses_a)
        pairs.append(Pair(ex, match, explanation))
    return RunDiff(tuple(pairs), tuple(only_a), tuple(left))
