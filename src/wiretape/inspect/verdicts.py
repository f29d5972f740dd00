"""A replay's verdict read back from its run file: what ``wiretape verdict``,
``ls``, ``show``, ``check`` and a replay itself report.

Reads only: the counting is ``wiretape.playback.verdict``'s, the one-line
summaries of unused exchanges ``wiretape.inspect.summary``'s.
"""

from __future__ import annotations

from pathlib import Path

from wiretape.inspect.summary import request_summary
from wiretape.model import TOOL_ORIGIN_PREFIX, exchange_kind
from wiretape.playback.verdict import ExchangeSummary, Verdict, compute
from wiretape.store.runfile import RunFile


def verdict_of(run: RunFile, replay_id: str | None = None, *,
               source: Path | None = None) -> Verdict | None:
    """The verdict of ``replay_id`` (default: the latest replay), also for a
    replay whose process was killed (``complete`` is then False); None when
    the run has no such replay. ``source``: only replays of the run file at
    that path, from the replay log (never a verdict the file carries)."""
    replays = run.replays(source=source)
    if not replays:
        return None
    chosen = next((r for r in replays if r["id"] == replay_id), None) if replay_id else replays[-1]
    if chosen is None:
        return None
    info = run.info()
    rows = run.replay_requests(chosen["id"])
    exchanges = run.exchanges()
    # The model exchanges are counted as ever; the tool exchanges
    # (``--tools``) and the stdio MCP sessions on lines of their own.
    seqs = [e.seq for e in exchanges if e.kind == "model"]
    tool_seqs = [e.seq for e in exchanges if e.kind == "tool"]
    describe: dict[int, ExchangeSummary] = {
        e.seq: {"method": e.request.method.decode("latin-1"),
                "target": _shown_target(e.origin, e.request.target.decode("latin-1")),
                "summary": request_summary(e.request)}
        for e in exchanges
    }
    return compute(
        run_id=info.run_id, replay_id=chosen["id"], mode=chosen["mode"],
        complete=chosen["ended_at_ns"] is not None, recorded_seqs=seqs, rows=rows,
        allow_substitutions=bool(chosen["settings"].get("allow_substitutions")),
        outcome=chosen["outcome"] or {}, describe=describe,
        allow=chosen["settings"].get("allow", []), tool_seqs=tool_seqs,
        mcp_seqs=[e.seq for e in exchanges if e.kind == "mcp"],
    )


def _shown_target(origin: str, target: str) -> str:
    """A tool exchange's target after its origin's URL (``https://host/page``);
    any other's as it is."""
    if exchange_kind(origin) != "tool":
        return target
    return origin.removeprefix(TOOL_ORIGIN_PREFIX) + target
