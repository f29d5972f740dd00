"""The proxy's worker threads are started before it serves: a thread
started while serving waits for the GIL on the event loop."""

from __future__ import annotations

import asyncio
import threading

from wiretape.proxy.server import start_worker_threads


async def _threads_started_by(jobs: int, *, warmed: int) -> int:
    """How many threads ``jobs`` concurrent ``to_thread`` jobs start on a
    fresh loop, after ``start_worker_threads(warmed)`` (0: not called)."""
    if warmed:
        await start_worker_threads(warmed)
    before = threading.active_count()
    together = threading.Barrier(jobs)  # (all running at once: one thread each)
    await asyncio.gather(*(asyncio.to_thread(together.wait, 10.0) for _ in range(jobs)))
    return threading.active_count() - before


def test_no_thread_starts_once_the_worker_threads_are_started() -> None:
    assert asyncio.run(_threads_started_by(3, warmed=4)) == 0
    assert asyncio.run(_threads_started_by(3, warmed=0)) == 3  # (asyncio's own: as needed)


def test_an_executor_smaller_than_asked_does_not_hold_the_start() -> None:
    """With a default executor of 2 threads set by the caller, the 4 jobs
    cannot all wait for each other: they give up (after a second) and the
    start goes on, the executor still working."""
    import concurrent.futures

    async def main() -> int:
        asyncio.get_running_loop().set_default_executor(
            concurrent.futures.ThreadPoolExecutor(max_workers=2))
        await start_worker_threads(4)
        return await asyncio.to_thread(lambda: 42)

    assert asyncio.run(main()) == 42
