"""Where a run can be forked from: its checkpoints, derived from the run
file and its latest replay, never stored."""

from __future__ import annotations

from collections.abc import Sequence

from wiretape.model import Ending, Exchange
from wiretape.store.runfile import RunFile


def checkpoints(run: RunFile, exchanges: Sequence[Exchange] | None = None) -> list[int]:
    """The points ``wiretape fork RUN --from N`` can start from: N (0 to
    the exchange count) such that each of the run's first N exchanges
    completed, one after another (each ended before the next began, so the
    agent's state after N is decided by the first N answers), and, when the
    run has been replayed, its latest replay served each of them exact.
    ``exchanges``: the run's, when the caller has read them already (else
    they are read here). Raises RunFileError."""
    exchanges = sorted(run.exchanges() if exchanges is None else exchanges,
                       key=lambda e: e.seq)
    exact: set[int] | None = None
    replays = run.replays()
    if replays:
        exact = {r["seq"] for r in run.replay_requests(replays[-1]["id"])
                 if r["kind"] == "exact" and r["seq"] is not None}
    points = [0]
    for n, exchange in enumerate(exchanges, start=1):
        if exchange.ending is not Ending.COMPLETE or (exact is not None
                                                     and exchange.seq not in exact):
            break
        if n < len(exchanges):
            following = exchanges[n]
            if following.started_at_ns < exchange.started_at_ns + exchange.duration_ns:
                break
        points.append(n)
    return points
