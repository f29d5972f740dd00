"""The verdict: the numbers a replay ends in (DESIGN.md, "Matching and the
verdict"), computed from the per-request outcome rows. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, NotRequired, TypedDict

# The exit codes of ``wiretape replay`` live in errors (the CLI reads them
# without loading this module); they are named here too.
from wiretape.errors import EXIT_EXCHANGES_FAIL as EXIT_EXCHANGES_FAIL
from wiretape.errors import EXIT_OUTCOME_DIFFERS as EXIT_OUTCOME_DIFFERS
from wiretape.errors import EXIT_PASS as EXIT_PASS
from wiretape.errors import EXIT_USAGE as EXIT_USAGE
from wiretape.matching.correspond import MAX_POINTERS
from wiretape.model import LearnedJSON, Outcome, ReplayRow, exchange_kind, facets
from wiretape.playback import text
from wiretape.playback.messages import MessageCounts
from wiretape.playback.messages import counts as message_counts

#: Examples a verdict keeps per learned rule (pointers: ``MAX_POINTERS``).
_MAX_EXAMPLES = 3


class ExchangeSummary(TypedDict):
    """What a list shows of a recorded exchange: method, target (latin-1)
    and a one-line summary of the request."""

    method: str
    target: str
    summary: str


class UnusedExchange(TypedDict):
    """A recorded exchange no live request consumed: its seq, and what is
    known of it (ExchangeSummary)."""

    seq: int
    method: NotRequired[str]
    target: NotRequired[str]
    summary: NotRequired[str]


class MessageCountsJSON(TypedDict):
    """The WebSocket messages of the replayed sessions, counted."""

    exact: int
    substituted: int
    equivalent: int
    diverged: int
    missing: int
    unused: int
    #: recorded server messages the replay did not send (reported only)
    not_sent: int


class ToolCountsJSON(TypedDict):
    """The tool exchanges (``--tools``) of a replay, counted."""

    recorded: int
    exact: int
    substituted: int
    equivalent: int
    diverged: int
    missing: int
    unused: int
    unused_seqs: list[int]
    unused_exchanges: list[UnusedExchange]
    #: every recorded tool exchange matched (exact, equivalent, or
    #: substituted when that is allowed) and none missing
    passed: bool


@dataclass(frozen=True)
class ToolCounts:
    """The tool exchanges of a replay counted by kind, as the model
    exchanges are (their own line of the verdict)."""

    recorded: int = 0
    exact: int = 0
    substituted: int = 0
    equivalent: int = 0
    diverged: int = 0
    missing: int = 0
    unused_seqs: tuple[int, ...] = ()
    unused_exchanges: tuple[UnusedExchange, ...] = ()

    @property
    def unused(self) -> int:
        return len(self.unused_seqs)

    def passed(self, allow_substitutions: bool) -> bool:
        matched = (self.exact + (self.substituted if allow_substitutions else 0)
                   + self.equivalent)
        return matched == self.recorded and self.missing == 0

    def to_json(self, allow_substitutions: bool) -> ToolCountsJSON:
        return {"recorded": self.recorded, "exact": self.exact,
                "substituted": self.substituted, "equivalent": self.equivalent,
                "diverged": self.diverged, "missing": self.missing, "unused": self.unused,
                "unused_seqs": list(self.unused_seqs),
                "unused_exchanges": [u.copy() for u in self.unused_exchanges],
                "passed": self.passed(allow_substitutions)}


def is_tool_row(row: ReplayRow) -> bool:
    """Whether a replay row is a tool exchange's request (its detail names
    a tool origin)."""
    return exchange_kind(row.get("detail", {}).get("origin", "")) == "tool"


class McpCountsJSON(MessageCountsJSON):
    """The stdio MCP sessions (``wiretape mcp``): how many were recorded,
    played, asked for with none left (``missing``) and never asked for
    (``unused``), and their JSON-RPC messages counted as WebSocket
    messages are."""

    sessions: dict[str, int]


class McpCounts(NamedTuple):
    """The stdio MCP sessions of a replay: recorded, played, asked for by a
    shim with none of its server's left, recorded and never asked for;
    and their messages (playback.messages)."""

    recorded: int
    played: int
    missing: int
    unused: int
    messages: MessageCounts


#: The verdict's JSON form (``--json``): the fields, then the derived numbers.
VerdictJSON = TypedDict("VerdictJSON", {
    "run_id": str,
    "replay_id": str,
    "mode": str,
    "complete": bool,
    "recorded": int,
    "exact": int,
    "substituted": int,
    "equivalent": int,
    "diverged": int,
    "missing": int,
    "unused": int,
    "unused_seqs": list[int],
    "allow_substitutions": bool,
    "allow": list[str],
    "outcome": Outcome,
    "requests": list[ReplayRow],
    "unused_exchanges": list[UnusedExchange],
    "reused": int,
    "exchanges_pass": bool,
    "outcome_same": bool,
    "exit_code": int,
    "pass": bool,
    "interrupted": str | None,
    "rules": list[LearnedJSON],
    "messages": NotRequired[MessageCountsJSON],
    "tools": NotRequired[ToolCountsJSON],
    "mcp": NotRequired[McpCountsJSON],
})



@dataclass(frozen=True)
class Verdict:
    """A replay's verdict.

    ``requests`` are the per-request rows in decision order; ``outcome``
    maps ``exit_status``/``stdout``/``files`` (and facets that are only
    reported) to ``{"same": bool|None, ...}`` (None: not compared). The
    counts are the model exchanges'; ``tools`` counts the tool exchanges
    (``--tools``), None when none was recorded or requested.
    """

    run_id: str
    replay_id: str
    mode: str
    complete: bool
    recorded: int
    exact: int
    substituted: int
    diverged: int
    missing: int
    unused: int
    unused_seqs: tuple[int, ...]
    allow_substitutions: bool
    outcome: Outcome = field(default_factory=Outcome)
    requests: tuple[ReplayRow, ...] = ()
    #: per unused exchange: seq, method, target and a one-line summary
    unused_exchanges: tuple[UnusedExchange, ...] = ()
    #: requests equal to their recording up to allowed learned rules
    equivalent: int = 0
    #: the learned correspondences the replay accepted (``ids``, ``clock``, ...)
    allow: tuple[str, ...] = ()
    #: the WebSocket messages of the sessions replayed, counted by kind
    #: (playback.messages); None when no session was played
    messages: MessageCounts | None = None
    #: the tool exchanges counted by kind; None when the run recorded none
    #: and the replay asked for none
    tools: ToolCounts | None = None
    #: the stdio MCP sessions (``wiretape mcp``); None when the run
    #: recorded none and no shim asked for one
    mcp: McpCounts | None = None

    @property
    def tools_pass(self) -> bool:
        """Every recorded tool exchange was matched and no tool request was
        missing (True when there were none)."""
        return self.tools is None or self.tools.passed(self.allow_substitutions)

    @property
    def mcp_pass(self) -> bool:
        """Every recorded MCP session was played and every shim found one,
        and their messages pass as a WebSocket session's do."""
        c = self.mcp
        return c is None or (c.missing == c.unused == 0
                             and _messages_pass(c.messages, self.allow_substitutions))

    @property
    def messages_pass(self) -> bool:
        """Every live client message of every session played was matched
        (exactly, up to allowed learned rules, or substituted when that is
        allowed) and every recorded client message was; a recorded server
        message not sent fails nothing by itself (it is reported)."""
        m = self.messages
        return m is None or _messages_pass(m, self.allow_substitutions)

    @property
    def reused(self) -> int:
        return self.exact + self.substituted + self.equivalent + self.diverged

    @property
    def exchanges_pass(self) -> bool:
        matched = (self.exact + (self.substituted if self.allow_substitutions else 0)
                   + self.equivalent)
        return (matched == self.recorded and self.missing == 0 and self.messages_pass
                and self.tools_pass and self.mcp_pass)

    @property
    def rules(self) -> list[LearnedJSON]:
        """Every learned rule that fired in an equivalent request or
        WebSocket message, merged: count summed, the first pointers and
        examples, the last clock shift."""
        merged: dict[str, LearnedJSON] = {}
        found: list[LearnedJSON] = []
        for row in self.requests:
            detail = row.get("detail", {})
            if row["kind"] == "equivalent":
                found.extend(detail.get("learned", []))
            for d in detail.get("messages", {}).get("decisions", []):
                if d["kind"] == "equivalent":
                    found.extend(d.get("learned", []))
        for entry in found:
            into = merged.setdefault(entry["rule"], {
                "rule": entry["rule"], "count": 0, "pointers": [], "examples": []})
            into["count"] += entry["count"]
            into["pointers"] = list(dict.fromkeys(
                [*into["pointers"], *entry["pointers"]]))[:MAX_POINTERS]
            into["examples"] = [*into["examples"], *entry["examples"]][:_MAX_EXAMPLES]
            if "shift_s" in entry:
                into["shift_s"] = entry["shift_s"]
        order = ("ids", "clock", "key-order", "durations")
        return sorted(merged.values(),
                      key=lambda e: order.index(e["rule"]) if e["rule"] in order else 99)

    @property
    def outcome_same(self) -> bool:
        return all(facet.get("same") is not False for _, facet in facets(self.outcome))

    @property
    def interrupted(self) -> str | None:
        """The signal that interrupted the replay (``SIGINT``), or None."""
        facet = self.outcome.get("interrupted")
        signal = facet.get("signal") if isinstance(facet, dict) else None
        return signal if isinstance(signal, str) else None

    @property
    def passed(self) -> bool:
        return (self.complete and self.interrupted is None and self.exchanges_pass
                and self.outcome_same)

    @property
    def exit_code(self) -> int:
        if self.interrupted is not None:
            code = self.outcome.get("interrupted", {}).get("exit_code")
            return code if isinstance(code, int) and 128 < code < 256 else 130
        if not self.complete or not self.exchanges_pass:
            return EXIT_EXCHANGES_FAIL
        return EXIT_PASS if self.outcome_same else EXIT_OUTCOME_DIFFERS

    def line(self) -> str:
        """The verdict in one line of text, as ``wiretape replay`` prints it:
        PASS or FAIL, the counts, and the outcome."""
        return text.verdict_line(self)

    def details(self, style: text.Style = text.plain) -> list[str]:
        """The divergence report as lines of text: each request that was not
        exact (where and how it differs), what differed in the outcome, what
        was isolated, and the unused recorded exchanges. ``style`` colours
        the headings (``click.style`` fits); plain text by default."""
        return text.verdict_details(self, style)

    def to_json(self) -> VerdictJSON:
        out = self._to_json()
        if self.messages is not None:
            out["messages"] = _messages_json(self.messages)
        if self.tools is not None:
            out["tools"] = self.tools.to_json(self.allow_substitutions)
        if self.mcp is not None:
            c = self.mcp
            out["mcp"] = {"sessions": {"recorded": c.recorded, "played": c.played,
                                       "missing": c.missing, "unused": c.unused},
                          **_messages_json(c.messages)}
        return out

    def _to_json(self) -> VerdictJSON:
        return {
            "run_id": self.run_id,
            "replay_id": self.replay_id,
            "mode": self.mode,
            "complete": self.complete,
            "recorded": self.recorded,
            "exact": self.exact,
            "substituted": self.substituted,
            "equivalent": self.equivalent,
            "diverged": self.diverged,
            "missing": self.missing,
            "unused": self.unused,
            "unused_seqs": list(self.unused_seqs),
            "allow_substitutions": self.allow_substitutions,
            "allow": list(self.allow),
            "outcome": self.outcome.copy(),
            "requests": [r.copy() for r in self.requests],
            "unused_exchanges": [u.copy() for u in self.unused_exchanges],
            "reused": self.reused,
            "exchanges_pass": self.exchanges_pass,
            "outcome_same": self.outcome_same,
            "exit_code": self.exit_code,
            "pass": self.passed,
            "interrupted": self.interrupted,
            "rules": self.rules,
        }


def compute(
    *,
    run_id: str,
    replay_id: str,
    mode: str,
    complete: bool,
    recorded_seqs: Sequence[int],
    rows: Sequence[ReplayRow],
    allow_substitutions: bool = False,
    outcome: Outcome | None = None,
    describe: Mapping[int, ExchangeSummary] | None = None,
    allow: Sequence[str] = (),
    tool_seqs: Sequence[int] = (),
    mcp_seqs: Sequence[int] = (),
) -> Verdict:
    """Count the rows: each row has ``kind`` and ``seq`` (the recorded
    exchange it consumed, None for missing). ``describe`` maps a recorded
    seq to what to show of it when it is unused. ``recorded_seqs`` are the
    model exchanges', ``tool_seqs`` the tool exchanges' (``--tools``):
    a tool request's row (``is_tool_row``) is counted with the latter.
    ``mcp_seqs``: the recorded stdio MCP sessions (in neither), counted
    apart with the rows of method ``MCP``."""
    tools = _tool_counts(tool_seqs, [r for r in rows if is_tool_row(r)], describe or {})
    mcp_rows = [r for r in rows if not is_tool_row(r) and r.get("method") == MCP_METHOD]
    model_rows = [r for r in rows if not is_tool_row(r) and r.get("method") != MCP_METHOD]
    counts, unused = _tally(model_rows, recorded_seqs)
    sessions = [row["detail"]["messages"] for row in model_rows
                if "messages" in row.get("detail", {})]
    return Verdict(
        run_id=run_id,
        replay_id=replay_id,
        mode=mode,
        complete=complete,
        recorded=len(recorded_seqs),
        exact=counts["exact"],
        substituted=counts["substituted"],
        diverged=counts["diverged"],
        missing=counts["missing"],
        unused=len(unused),
        unused_seqs=unused,
        allow_substitutions=allow_substitutions,
        outcome=(outcome or Outcome()).copy(),
        requests=tuple(rows),
        unused_exchanges=tuple(_unused(s, (describe or {}).get(s)) for s in unused),
        equivalent=counts["equivalent"],
        allow=tuple(allow),
        messages=message_counts(sessions) if sessions else None,
        tools=tools,
        mcp=_mcp_counts(mcp_seqs, mcp_rows) if mcp_seqs or mcp_rows else None,
    )


def _tool_counts(tool_seqs: Sequence[int], rows: Sequence[ReplayRow],
                 describe: Mapping[int, ExchangeSummary]) -> ToolCounts | None:
    """The tool rows counted against the recorded tool exchanges; None when
    there are neither."""
    if not tool_seqs and not rows:
        return None
    counts, unused = _tally(rows, tool_seqs)
    return ToolCounts(len(tool_seqs), counts["exact"], counts["substituted"],
                      counts["equivalent"], counts["diverged"], counts["missing"], unused,
                      tuple(_unused(s, describe.get(s)) for s in unused))


def _tally(rows: Sequence[ReplayRow], recorded_seqs: Sequence[int],
           ) -> tuple[dict[str, int], tuple[int, ...]]:
    """The rows counted by kind, and the recorded seqs no row consumed
    (unused), in recorded order."""
    counts = {"exact": 0, "substituted": 0, "equivalent": 0, "diverged": 0, "missing": 0}
    used: set[int] = set()
    for row in rows:
        counts[row["kind"]] += 1
        seq = row.get("seq")
        if seq is not None:
            used.add(int(seq))
    return counts, tuple(s for s in recorded_seqs if s not in used)


#: The method of a replay row that is a stdio MCP session (``proxy.mcp``).
MCP_METHOD = "MCP"


def _mcp_counts(recorded: Sequence[int], rows: Sequence[ReplayRow]) -> McpCounts:
    played = {seq for row in rows if (seq := row.get("seq")) is not None}
    return McpCounts(
        recorded=len(recorded), played=len(played),
        missing=sum(1 for row in rows if row["kind"] == "missing"),
        unused=sum(1 for seq in recorded if seq not in played),
        messages=message_counts([row["detail"]["messages"] for row in rows
                                 if "messages" in row.get("detail", {})]))


def _messages_pass(m: MessageCounts, allow_substitutions: bool) -> bool:
    """Every live client message was matched (substituted only when that is
    allowed) and every recorded client message was; a recorded server
    message not sent fails nothing by itself."""
    return m.diverged == m.missing == m.unused == 0 and (allow_substitutions
                                                         or m.substituted == 0)


def _messages_json(m: MessageCounts) -> MessageCountsJSON:
    return {"exact": m.exact, "substituted": m.substituted, "equivalent": m.equivalent,
            "diverged": m.diverged, "missing": m.missing, "unused": m.unused,
            "not_sent": m.not_sent}


def _unused(seq: int, summary: ExchangeSummary | None) -> UnusedExchange:
    if summary is None:
        return {"seq": seq}
    return {"seq": seq, **summary}
