"""Which waiting replay may start next. Pure: no processes, no sockets.

An agent that reads its origin from a config file (nanobot's ``apiBase``)
calls the recorded port and nothing else, so its replay must listen there.
Two such replays recorded on the same port would each take the other's
requests; so runs that share a recorded port wait for each other, and runs
on distinct ports (the usual case: ports were picked at random when
recording) replay in parallel. With ``free_ports`` every origin listens on
a port of the system's choosing instead, for suites whose agents all take
their base URL from the environment.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence


def pick(waiting: Sequence[Collection[int]], busy: Collection[int]) -> int | None:
    """The index of the first waiting run none of whose ``ports`` is
    ``busy``, or None when every waiting run must wait."""
    for index, ports in enumerate(waiting):
        if not any(port in busy for port in ports):
            return index
    return None
