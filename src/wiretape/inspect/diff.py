"""Two runs side by side: pair their exchanges (same method and path, in
order) and explain how each pair's requests differ — what changed in the
prompts between two versions of an agent. A WebSocket session's prompts
are its client's messages: a pair of sessions also compares them, the
k-th content message (text, binary, close; pings and pongs are the
protocol's) of one with the k-th of the other, each difference explained
as a body's is (a JSON pointer inside a JSON message, the tool a result
answers named from the session's server messages). Responses are not
compared, a session's server messages neither. Pure over exchanges.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from wiretape.inspect.summary import request_summary
from wiretape.matching import Explanation, explain
from wiretape.matching.documents import session_stream
from wiretape.model import Exchange, ExplanationJSON, Response
from wiretape.playback.messages import CONTENT, as_request


class ExchangeRefJSON(TypedDict):
    """An exchange named in ``diff --json``: seq, method, target, summary."""

    seq: int
    method: str
    target: str
    summary: str


class MessageDiffJSON(TypedDict):
    """A client message of two paired sessions that differs: ``index`` counts
    the client's content messages from 0; ``a``/``b`` are its index among
    each session's messages (None: that session has no such message)."""

    index: int
    a: int | None
    b: int | None
    explanation: ExplanationJSON | None


class PairJSON(TypedDict):
    """``explanation``: the handshake's or request's difference (None: the
    same); ``messages``: the client messages of two sessions that differ."""

    a: ExchangeRefJSON
    b: ExchangeRefJSON
    same: bool
    explanation: ExplanationJSON | None
    messages: list[MessageDiffJSON]


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
class MessageDiff:
    """The ``index``-th client content message of two sessions, differing:
    ``a``/``b`` its index in each session's messages (None: absent there);
    ``explanation`` None when one side has no such message."""

    index: int
    a: int | None
    b: int | None
    explanation: Explanation | None

    def to_json(self) -> MessageDiffJSON:
        return {"index": self.index, "a": self.a, "b": self.b,
                "explanation": self.explanation.to_json() if self.explanation else None}


@dataclass(frozen=True)
class Pair:
    a: Exchange
    b: Exchange
    explanation: Explanation | None  # None when the requests are equal byte for byte
    messages: tuple[MessageDiff, ...] = ()  # the client messages that differ

    @property
    def same(self) -> bool:
        return self.explanation is None and not self.messages


@dataclass(frozen=True)
class RunDiff:
    pairs: tuple[Pair, ...]
    only_a: tuple[Exchange, ...]
    only_b: tuple[Exchange, ...]

    @property
    def same(self) -> int:
        return sum(1 for p in self.pairs if p.same)

    @property
    def differ(self) -> int:
        return len(self.pairs) - self.same

    def to_json(self) -> RunDiffJSON:
        def ref(e: Exchange) -> ExchangeRefJSON:
            return {"seq": e.seq, "method": e.request.method.decode("latin-1"),
                    "target": e.request.target.decode("latin-1"),
                    "summary": request_summary(e.request)}

        return {
            "pairs": [{"a": ref(p.a), "b": ref(p.b), "same": p.same,
                       "explanation": p.explanation.to_json() if p.explanation else None,
                       "messages": [m.to_json() for m in p.messages]}
                      for p in self.pairs],
            "only_a": [ref(e) for e in self.only_a],
            "only_b": [ref(e) for e in self.only_b],
            "summary": {"pairs": len(self.pairs), "same": self.same, "differ": self.differ,
                        "only_a": len(self.only_a), "only_b": len(self.only_b)},
        }


def diff_runs(a: Sequence[Exchange], b: Sequence[Exchange]) -> RunDiff:
    """Pair each exchange of ``a`` with the first unpaired one of ``b`` on
    the same method and path (sequence order), and explain each pair (a
    session's client messages too)."""
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
        messages = _message_diffs(ex, match, responses_a)
        pairs.append(Pair(ex, match, explanation, messages))
    return RunDiff(tuple(pairs), tuple(only_a), tuple(left))


def _message_diffs(a: Exchange, b: Exchange,
                   responses: tuple[Response, ...]) -> tuple[MessageDiff, ...]:
    """The client content messages of ``a`` and ``b`` that differ, paired
    in order."""
    if not a.messages and not b.messages:
        return ()
    sent_a, sent_b = ([i for i, m in enumerate(e.messages)
                       if m.direction == "client" and m.opcode in CONTENT] for e in (a, b))
    named = (session_stream(a.messages), *responses)
    out = []
    for k in range(max(len(sent_a), len(sent_b))):
        ia = sent_a[k] if k < len(sent_a) else None
        ib = sent_b[k] if k < len(sent_b) else None
        if ia is None or ib is None:
            out.append(MessageDiff(k, ia, ib, None))
            continue
        ma, mb = a.messages[ia], b.messages[ib]
        if (ma.opcode, ma.payload, ma.close_code) != (mb.opcode, mb.payload, mb.close_code):
            out.append(MessageDiff(k, ia, ib, explain(as_request(ma), as_request(mb),
                                                      recorded_responses=named)))
    return tuple(out)
