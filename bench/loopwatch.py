"""Run ``wiretape ARGS...`` with asyncio's debug mode on, and write how long
its event loop was blocked: every callback (task step, handle) that ran
longer than THRESHOLD_MS, as asyncio's slow-callback warnings report it.

Usage: python bench/loopwatch.py OUT.json THRESHOLD_MS ARGS...

OUT.json, written when wiretape exits: ``{"events": [[ms, end, "callback"],
...]}``, every slow callback with its duration (ms) and the monotonic time
(s, ``time.monotonic()``, comparable across processes) at which it ended,
so a reader can keep those that overlap a window of its own (the traffic,
leaving out start-up and shut-down).
Debug mode slows the loop down, so ``bench/agents.py`` runs this in a pass
of its own, apart from the latency figures; a duration is the callback's
wall time, so a process descheduled by a busy machine inflates it too
(an upper bound).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import sys
import time
from collections.abc import Coroutine
from typing import Any

SLOW_MESSAGE = "Executing %s took %.3f seconds"


class SlowCallbacks(logging.Handler):
    """Collects asyncio's slow-callback warnings (durations in ms)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[tuple[float, float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg == SLOW_MESSAGE and isinstance(record.args, tuple):
            self.seen.append((float(str(record.args[1])) * 1000, time.monotonic(),
                              str(record.args[0])[:300]))


def main() -> None:
    out, threshold_ms, args = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    handler = SlowCallbacks()
    asyncio_log = logging.getLogger("asyncio")
    asyncio_log.addHandler(handler)
    asyncio_log.setLevel(logging.WARNING)
    asyncio_log.propagate = False
    original_run = asyncio.run

    def debug_run(main: Coroutine[Any, Any, Any], *, debug: bool | None = None) -> Any:
        async def watched() -> Any:
            asyncio.get_running_loop().slow_callback_duration = threshold_ms / 1000
            return await main

        return original_run(watched(), debug=True)

    asyncio.run = debug_run

    def report() -> None:
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"events": [[round(ms, 3), end, what] for ms, end, what in handler.seen]},
                      f)

    atexit.register(report)
    sys.argv = ["wiretape", *args]
    from wiretape.cli.main import main as wiretape_main

    wiretape_main()


if __name__ == "__main__":
    main()
