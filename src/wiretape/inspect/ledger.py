"""The tool-call ledger: every tool call the model issued in a run, and
whether a later request carried its result.

A call is **completed** in the first later exchange whose request carries a
tool result for it (same call id; for formats whose calls have no id, as
Gemini's often do, the next unanswered result of the same tool name), else
**pending**: asked for and never answered, as when a run was interrupted.
Completed and pending are disjoint and together cover every call. Calls the
provider ran itself (Anthropic ``server_tool_use``) are answered in the
same response and listed as completed there.

Pure over exchange views. Knows nothing of bytes, run files or the CLI.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypedDict

from wiretape.inspect.formats import ExchangeView

_EXCERPT = 160


class LedgerEntryJSON(TypedDict):
    """A LedgerEntry in ``show --json``: each field, then its status."""

    call_id: str
    name: str
    arguments: str
    issued_in: int
    answered_in: int | None
    result: str | None
    kind: str
    status: Literal["pending", "completed"]


class UnmatchedResultJSON(TypedDict):
    seq: int
    call_id: str
    name: str | None


class LedgerJSON(TypedDict):
    calls: list[LedgerEntryJSON]
    completed: int
    pending: int
    unmatched_results: list[UnmatchedResultJSON]


@dataclass(frozen=True)
class LedgerEntry:
    """One tool call. ``call_id`` is the provider's, or ``#SEQ.N`` when it
    gave none; ``answered_in`` is the seq of the exchange whose request first
    carried the result (None: pending)."""

    call_id: str
    name: str
    arguments: str
    issued_in: int
    answered_in: int | None
    result: str | None = None
    kind: str = "function"

    @property
    def status(self) -> Literal["pending", "completed"]:
        return "pending" if self.answered_in is None else "completed"

    def to_json(self) -> LedgerEntryJSON:
        return {"call_id": self.call_id, "name": self.name, "arguments": self.arguments,
                "issued_in": self.issued_in, "answered_in": self.answered_in,
                "result": self.result, "kind": self.kind, "status": self.status}


@dataclass(frozen=True)
class Ledger:
    entries: tuple[LedgerEntry, ...]
    #: results a request carried for calls no recorded response issued
    #: (a conversation that began before the recording), as (seq, call id, name)
    unmatched_results: tuple[tuple[int, str, str | None], ...] = ()

    @property
    def completed(self) -> tuple[LedgerEntry, ...]:
        return tuple(e for e in self.entries if e.answered_in is not None)

    @property
    def pending(self) -> tuple[LedgerEntry, ...]:
        return tuple(e for e in self.entries if e.answered_in is None)

    def to_json(self) -> LedgerJSON:
        return {"calls": [e.to_json() for e in self.entries],
                "completed": len(self.completed), "pending": len(self.pending),
                "unmatched_results": [{"seq": s, "call_id": c, "name": n}
                                      for s, c, n in self.unmatched_results]}


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _EXCERPT else text[: _EXCERPT - 3] + "..."


def _result_text(view: ExchangeView, call_id: str, name: str) -> str | None:
    for message in view.request.messages:
        if message.result_for is None:
            continue
        if (call_id and message.result_for == call_id) or (
                not call_id and message.result_name == name):
            return _clip(message.text)
    return None


def build_ledger(views: Sequence[tuple[int, ExchangeView]]) -> Ledger:
    """The ledger of a run from its exchanges' views, as (seq, view) in
    sequence order."""
    issued: list[tuple[int, int, ExchangeView]] = []  # (seq, n, view) per call
    for seq, view in views:
        if view.response is not None:
            issued.extend((seq, n, view) for n in range(len(view.response.tool_calls)))
    known_ids = {view.response.tool_calls[n].call_id for _, n, view in issued
                 if view.response is not None}
    entries = []
    nameless_seen: Counter[str] = Counter()
    for seq, n, view in issued:
        assert view.response is not None
        call = view.response.tool_calls[n]
        call_id = call.call_id or f"#{seq}.{n}"
        answered_in: int | None = None
        result: str | None = None
        if call.kind == "server":
            answered_in = seq
        elif call.call_id:
            later = next(((s, v) for s, v in views
                          if s > seq and any(rid == call.call_id for rid, _ in v.tool_results)),
                         None)
            if later is not None:
                answered_in, result = later[0], _result_text(later[1], call.call_id, call.name)
        else:
            # No id: the k-th call of a tool is answered by the first request
            # carrying k results of that tool.
            nameless_seen[call.name] += 1
            wanted = nameless_seen[call.name]
            later = next(((s, v) for s, v in views if s > seq and sum(
                1 for rid, rname in v.tool_results if not rid and rname == call.name) >= wanted),
                None)
            if later is not None:
                answered_in, result = later[0], _result_text(later[1], "", call.name)
        entries.append(LedgerEntry(call_id, call.name, call.arguments, seq, answered_in,
                                   result, call.kind))
    unmatched: dict[str, tuple[int, str, str | None]] = {}
    for seq, view in views:
        for rid, rname in view.tool_results:
            if rid and rid not in known_ids and rid not in unmatched:
                unmatched[rid] = (seq, rid, rname)
    return Ledger(tuple(entries), tuple(unmatched.values()))
