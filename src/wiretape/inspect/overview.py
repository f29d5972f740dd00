"""Everything ``show`` and ``report`` read out of one run file: metadata,
exchanges, their views, the timeline, the tool-call ledger and each
replay's verdict. Owns the one place that reads a run for inspection; the
parts it combines are pure. Knows nothing of the CLI or HTML.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from wiretape.inspect.checkpoints import checkpoints
from wiretape.inspect.formats import ExchangeView, read_exchange
from wiretape.inspect.ledger import Ledger, build_ledger
from wiretape.inspect.mcpcalls import McpCall, mcp_calls
from wiretape.inspect.timeline import TimelineRow, timeline, tool_label
from wiretape.inspect.verdicts import verdict_of
from wiretape.model import Exchange, RunInfo
from wiretape.playback.verdict import Verdict
from wiretape.store.runfile import RunFile


@dataclass(frozen=True)
class RunOverview:
    path: Path
    info: RunInfo
    exchanges: tuple[Exchange, ...]
    views: dict[int, ExchangeView]
    rows: tuple[TimelineRow, ...]
    ledger: Ledger
    verdicts: tuple[Verdict, ...]
    #: where the run can be forked from (``inspect.checkpoints``)
    checkpoints: tuple[int, ...] = ()
    #: the calls made to stdio MCP servers, paired with the ledger's calls
    mcp_calls: tuple[McpCall, ...] = ()


def overview(path: Path, advance: Callable[[], None] = lambda: None,
             on_total: Callable[[int], None] = lambda n: None) -> RunOverview:
    """Read the run at ``path``. Raises RunFileError."""
    with RunFile.open(path) as run:
        info = run.info()
        on_total(run.exchange_count())
        exchanges = run.exchanges()  # a damaged page is a RunFileError naming the file
        views = []
        for exchange in exchanges:
            views.append((exchange.seq, read_exchange(exchange)))
            advance()
        verdicts = [v for v in (verdict_of(run, r["id"]) for r in run.replays()) if v is not None]
        points = checkpoints(run, exchanges)
    kinds = {e.seq: e.kind for e in exchanges}
    ledger = build_ledger([(seq, v) for seq, v in views if kinds[seq] == "model"],
                          [(e.seq, tool_label(e)) for e in exchanges if e.kind == "tool"])
    return RunOverview(path, info, tuple(exchanges), dict(views),
                       tuple(timeline(info, exchanges, views)), ledger,
                       tuple(verdicts), tuple(points), tuple(mcp_calls(exchanges, ledger)))
