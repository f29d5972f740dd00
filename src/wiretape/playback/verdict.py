"""The verdict: the numbers a replay ends in (DESIGN.md, "Matching and the
verdict"), computed from the per-request outcome rows. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from wiretape.playback import text

#: Exit codes of ``wiretape replay`` (DESIGN.md).
EXIT_PASS = 0
EXIT_OUTCOME_DIFFERS = 1
EXIT_USAGE = 2
EXIT_EXCHANGES_FAIL = 3


@dataclass(frozen=True)
class Verdict:
    """A replay's verdict.

    ``requests`` are the per-request rows in decision order; ``outcome``
    maps ``exit_status``/``stdout``/``files`` to ``{"same": bool|None, ...}``
    (None: not compared).
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
    outcome: Mapping[str, Any] = field(default_factory=dict)
    requests: tuple[Mapping[str, Any], ...] = ()
    #: per unused exchange: seq, method, target and a one-line summary
    unused_exchanges: tuple[Mapping[str, Any], ...] = ()

    @property
    def reused(self) -> int:
        return self.exact + self.substituted + self.diverged

    @property
    def exchanges_pass(self) -> bool:
        matched = self.exact + (self.substituted if self.allow_substitutions else 0)
        return matched == self.recorded and self.missing == 0

    @property
    def outcome_same(self) -> bool:
        return all(v.get("same") is not False for v in self.outcome.values())

    @property
    def passed(self) -> bool:
        return self.complete and self.exchanges_pass and self.outcome_same

    @property
    def exit_code(self) -> int:
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

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(
            reused=self.reused,
            exchanges_pass=self.exchanges_pass,
            outcome_same=self.outcome_same,
            exit_code=self.exit_code,
            unused_seqs=list(self.unused_seqs),
            requests=[dict(r) for r in self.requests],
            unused_exchanges=[dict(u) for u in self.unused_exchanges],
            outcome=dict(self.outcome),
        )
        data["pass"] = self.passed
        return data


def compute(
    *,
    run_id: str,
    replay_id: str,
    mode: str,
    complete: bool,
    recorded_seqs: Sequence[int],
    rows: Sequence[Mapping[str, Any]],
    allow_substitutions: bool = False,
    outcome: Mapping[str, Any] | None = None,
    describe: Mapping[int, Mapping[str, Any]] | None = None,
) -> Verdict:
    """Count the rows: each row has ``kind`` and ``seq`` (the recorded
    exchange it consumed, None for missing). ``describe`` maps a recorded
    seq to what to show of it when it is unused."""
    counts = {"exact": 0, "substituted": 0, "diverged": 0, "missing": 0}
    used: set[int] = set()
    for row in rows:
        counts[row["kind"]] += 1
        if row.get("seq") is not None:
            used.add(int(row["seq"]))
    unused = tuple(s for s in recorded_seqs if s not in used)
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
        outcome=dict(outcome or {}),
        requests=tuple(rows),
        unused_exchanges=tuple({"seq": s, **(describe or {}).get(s, {})} for s in unused),
    )
