"""The tool-call ledger: every tool call the model issued in a run, and
whether a later request carried its result.

A call is **completed** in the first later exchange whose request carries a
tool result for it (same call id; for a call with no id, as Gemini's often
are, a result of the same tool name that answers no call by id, by
position, whether the client gave it an id of its own or none), else
**pending**: asked for and never answered, as when a run was interrupted.
A WebSocket session is one exchange whose client messages may answer the
calls its server messages made: a result sent in the session completes a
call of the same session (``answered_in`` is its own seq).
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
    #: the tool exchanges (``--tools``) made while the call was open, each
    #: ``#SEQ METHOD URL``
    made: list[str]
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
    #: the tool exchanges (``--tools``) recorded while the call was open
    #: (after the response that issued it, before the request that carried
    #: its result), each ``#SEQ METHOD URL``
    made: tuple[str, ...] = ()

    @property
    def status(self) -> Literal["pending", "completed"]:
        return "pending" if self.answered_in is None else "completed"

    def to_json(self) -> LedgerEntryJSON:
        return {"call_id": self.call_id, "name": self.name, "arguments": self.arguments,
                "issued_in": self.issued_in, "answered_in": self.answered_in,
                "result": self.result, "kind": self.kind, "made": list(self.made),
                "status": self.status}


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


def _result_text(view: ExchangeView, call_id: str) -> str | None:
    """The text of the result for ``call_id`` in ``view``'s request."""
    return next((_clip(m.text) for m in view.request.messages if m.result_for == call_id), None)


def _by_name(view: ExchangeView, name: str, known_ids: set[str]) -> list[tuple[str, str]]:
    """The results of tool ``name`` in ``view``'s request that answer no
    call by id (no id, or one the client made), as (id, text), in order."""
    return [(m.result_for or "", _clip(m.text)) for m in view.request.messages
            if m.result_for is not None and m.result_name == name
            and m.result_for not in known_ids]


def _after(seq: int, view: ExchangeView, issued_in: int) -> bool:
    """Whether exchange ``seq`` may answer a call issued in ``issued_in``:
    a later one, or the same WebSocket session."""
    return seq > issued_in or (seq == issued_in and view.session)


def build_ledger(views: Sequence[tuple[int, ExchangeView]],
                 tools: Sequence[tuple[int, str]] = ()) -> Ledger:
    """The ledger of a run from its model exchanges' views, as (seq, view)
    in sequence order; ``tools``: its tool exchanges (``--tools``) as (seq,
    ``METHOD URL``), each listed with the calls open when it was made (its
    seq after the call's issuing exchange, before the one answering it).

    Calls are paired with their results by id; a call not answered by id
    (its format gave it none, as Gemini's, whose client then names the
    result itself: gemini-cli's ``read_file_<ms>_0``) by name and position:
    the k-th such call of a tool is answered by the first later request
    carrying k results of that tool that answer no call by id. A session's
    results count for its own calls too (a client message answers a call
    the session's server made before it)."""
    issued: list[tuple[int, int, ExchangeView]] = []  # (seq, n, view) per call
    for seq, view in views:
        if view.response is not None:
            issued.extend((seq, n, view) for n in range(len(view.response.tool_calls)))
    known_ids = {view.response.tool_calls[n].call_id for _, n, view in issued
                 if view.response is not None} - {""}
    entries = []
    unpaired_seen: Counter[str] = Counter()
    paired_by_name: set[str] = set()  # result ids (the client's) a call was paired with
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
                          if _after(s, v, seq)
                          and any(rid == call.call_id for rid, _ in v.tool_results)),
                         None)
            if later is not None:
                answered_in, result = later[0], _result_text(later[1], call.call_id)
        if answered_in is None and call.kind != "server":
            unpaired_seen[call.name] += 1
            wanted = unpaired_seen[call.name]
            later = next(((s, v) for s, v in views if _after(s, v, seq) and sum(
                1 for rid, rname in v.tool_results
                if rname == call.name and rid not in known_ids) >= wanted), None)
            if later is not None:
                answered_in = later[0]
                found = _by_name(later[1], call.name, known_ids)
                if len(found) >= wanted:
                    rid, result = found[wanted - 1]
                    paired_by_name.add(rid)
        made = tuple(f"#{t} {label}" for t, label in tools
                     if t > seq and (answered_in is None or t < answered_in))
        entries.append(LedgerEntry(call_id, call.name, call.arguments, seq, answered_in,
                                   result, call.kind, made))
    unmatched: dict[str, tuple[int, str, str | None]] = {}
    for seq, view in views:
        for rid, rname in view.tool_results:
            if (rid and rid not in known_ids and rid not in paired_by_name
                    and rid not in unmatched):
                unmatched[rid] = (seq, rid, rname)
    return Ledger(tuple(entries), tuple(unmatched.values()))
