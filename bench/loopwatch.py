"""Run ``wiretape ARGS...`` and write how long its event loop was blocked:
every callback (task step, handle) that ran longer than THRESHOLD_MS, and
every pause of the cyclic garbage collector on the loop's thread.

Usage: python bench/loopwatch.py OUT.json THRESHOLD_MS [--asyncio-debug] ARGS...

By default each callback's run (``asyncio.Handle._run``) is timed as it is:
the figure asyncio's debug mode reports for a slow callback
(``Executing ... took``), without the rest of debug mode. With
``--asyncio-debug`` asyncio's debug mode is on instead and its slow-callback
warnings are collected (as this script did first): debug mode captures a
stack summary for every callback and future it creates (a ``stat`` of each
frame's file), so the loop it measures does more, and makes more garbage,
than the loop wiretape runs.

OUT.json, written when wiretape exits: ``{"events": [[ms, end, "callback",
cpu_ms], ...], "gc": [[ms, end, generation], ...]}``: each slow callback
with its duration (ms), the monotonic time (s, ``time.monotonic()``,
comparable across processes) at which it ended and (not in debug mode) the
CPU time (ms) the loop's thread spent in it, so a reader can keep those that overlap
a window of its own (the traffic, leaving out start-up and shut-down); each
collection on the loop's thread over THRESHOLD_MS likewise (it is inside
one of the callbacks). A duration is wall time, so a process descheduled by
a busy machine inflates it too (an upper bound). ``bench/agents.py`` runs
this in a pass of its own, apart from the latency figures.
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import json
import logging
import sys
import threading
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


def time_callbacks(seen: list[tuple[float, float, str]], cpu: list[float],
                   threshold_s: float) -> None:
    """Time every callback the loops run (``Handle._run``, which runs task
    steps and timers too), keeping those over ``threshold_s`` in ``seen``
    and the CPU time their thread spent in each (ms) in ``cpu``: a callback
    whose wall time is far above its CPU time waited (for the GIL, or for a
    core of a busy machine)."""
    run = asyncio.Handle._run
    clock, thread_clock = time.perf_counter, time.thread_time

    def timed(self: asyncio.Handle) -> None:
        t0, c0 = clock(), thread_clock()
        try:
            run(self)
        finally:
            took = clock() - t0
            if took > threshold_s:
                cpu.append((thread_clock() - c0) * 1000)
                seen.append((took * 1000, time.monotonic(), repr(self)[:300]))

    asyncio.Handle._run = timed  # type: ignore[method-assign]


def time_collections(seen: list[tuple[float, float, int]], threshold_s: float) -> None:
    """Time the collector's pauses on the main thread, keeping those over
    ``threshold_s`` in ``seen`` as (ms, end, generation)."""
    main = threading.main_thread()
    started = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if threading.current_thread() is not main:
            return
        if phase == "start":
            started[0] = time.perf_counter()
            return
        took = time.perf_counter() - started[0]
        if took > threshold_s:
            seen.append((took * 1000, time.monotonic(), info["generation"]))

    gc.callbacks.append(on_gc)


def main() -> None:
    out, threshold_ms, args = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    debug = bool(args) and args[0] == "--asyncio-debug"
    args = args[1:] if debug else args
    seen: list[tuple[float, float, str]]
    cpu: list[float] = []  # (not in debug mode)
    collections: list[tuple[float, float, int]] = []
    time_collections(collections, threshold_ms / 1000)
    if debug:
        handler = SlowCallbacks()
        seen = handler.seen
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
    else:
        seen = []
        time_callbacks(seen, cpu, threshold_ms / 1000)

    def report() -> None:
        with open(out, "w", encoding="utf-8") as f:
            events = [[round(ms, 3), end, what] for ms, end, what in seen]
            for event, ms in zip(events, cpu, strict=False):
                event.append(round(ms, 3))
            json.dump({"events": events,
                       "gc": [[round(ms, 3), end, gen] for ms, end, gen in collections]}, f)

    atexit.register(report)
    sys.argv = ["wiretape", *args]
    from wiretape.cli.main import main as wiretape_main

    wiretape_main()


if __name__ == "__main__":
    main()
