"""Proxies for an agent that runs in your own process (nanobot's Python SDK,
an eval loop, a notebook): point its base URL at ``proxy.url``.

    with wiretape.recording(upstream="https://api.openai.com/v1", out="run.wtape") as proxy:
        agent(base_url=proxy.url)
    with wiretape.replaying("run.wtape") as proxy:
        agent(base_url=proxy.url)
    assert proxy.verdict.passed

``with`` runs the proxy on a background thread with its own event loop, so
the agent may block or run its own loop (``asyncio.run``). ``async with``
runs it on the caller's running loop instead: use it only when the agent
awaits its requests on that loop, since a blocking call there would starve
the proxy.

An agent process started in the block (or an in-process agent's stdio MCP
servers) gets ``proxy.env`` in its environment too: the MCP servers it
starts through ``wiretape mcp`` are then recorded (replayed) by the proxy.

Owns starting and stopping a proxy around a block, on a thread or a task,
and handing back what it produced. Must not know how exchanges are
recorded, matched or stored: that is the launch layer's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

from wiretape.api import (
    MAX_BODY,
    ModeName,
    PaceName,
    Run,
    port_pairs,
    raise_unsaved,
    replay_settings,
    run_path,
)
from wiretape.errors import UsageError
from wiretape.model import Origin
from wiretape.playback.verdict import Verdict

if TYPE_CHECKING:
    from wiretape.launch.replay import ReplaySettings

__all__ = ["RecordingProxy", "ReplayingProxy", "recording", "replaying"]

T = TypeVar("T")

_Serve = Callable[[asyncio.Event, Callable[[list[Origin]], None]], Coroutine[Any, Any, T]]


class _AttachedProxy(Generic[T]):
    """A proxy served for the length of a ``with`` or ``async with`` block.

    ``_serve(until, on_listening)`` is the launch coroutine: it calls
    ``on_listening(origins)`` once its ports are bound and returns its
    result after ``until`` is set (or after it stopped by itself).
    """

    _what = "proxy"

    def __init__(self) -> None:
        self._origins: list[Origin] | None = None
        self._env: dict[str, str] = {}
        self._result: T | None = None
        self._finished = False
        self._failure: BaseException | None = None
        self._until: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[T] | None = None

    def _serve(self, until: asyncio.Event, on_listening: Callable[[list[Origin]], None]
               ) -> Coroutine[Any, Any, T]:
        raise NotImplementedError

    # -- what the block sees -------------------------------------------------

    @property
    def origins(self) -> tuple[Origin, ...]:
        """Each origin served, with the local port that stands for it.
        Raises UsageError outside the block."""
        if self._origins is None:
            raise UsageError(f"the {self._what} is not listening: use it inside its `with` block")
        return tuple(self._origins)

    @property
    def urls(self) -> dict[str, str]:
        """Origin name to proxy URL (``http://127.0.0.1:PORT`` plus the
        upstream's base path, e.g. ``/v1``). Raises UsageError outside the block."""
        from wiretape.launch.origins import proxy_url

        return {o.name: proxy_url(o.upstream, o.port) for o in self.origins}

    @property
    def url(self) -> str:
        """The first origin's proxy URL: give it to the agent as its base URL.
        Raises UsageError outside the block."""
        return next(iter(self.urls.values()))

    @property
    def env(self) -> dict[str, str]:
        """What to add to the environment of an agent process started in
        the block, beside its base URL (``url``): ``{"WIRETAPE_MCP": VALUE}``,
        so the stdio MCP servers it starts through ``wiretape mcp`` are
        recorded (replayed) by this proxy. Raises UsageError outside the block."""
        _ = self.origins  # (raises outside the block)
        return dict(self._env)

    def _keep_env(self, variables: dict[str, str]) -> None:
        # on_environment: called before on_listening, on the proxy's loop
        from wiretape.proxy.mcp import VARIABLE

        self._env = {VARIABLE: variables[VARIABLE]}

    @property
    def port(self) -> int:
        """The first origin's local TCP port. Raises UsageError outside the block."""
        return self.origins[0].port

    def _finished_result(self, name: str) -> T:
        if not self._finished or self._result is None:
            raise UsageError(f"{self._what}.{name} is known once its `with` block has ended: "
                             "read it after the block")
        return self._result

    # -- with: a background thread with its own loop -------------------------

    def __enter__(self) -> Self:
        self._check_fresh()
        ready = threading.Event()

        def on_listening(origins: list[Origin]) -> None:
            self._origins = list(origins)
            ready.set()

        async def main() -> T:
            self._loop = asyncio.get_running_loop()
            self._until = asyncio.Event()
            return await self._serve(self._until, on_listening)

        def thread_main() -> None:
            try:
                self._result = asyncio.run(main())
            except BaseException as exc:
                self._failure = exc
            finally:
                self._finished = True
                ready.set()

        self._thread = threading.Thread(target=thread_main, name=f"wiretape-{self._what}",
                                        daemon=True)
        self._thread.start()
        ready.wait()
        if self._origins is None:  # it ended before listening: bad input
            self._thread.join()
            self._raise_failure()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        loop, until, thread = self._loop, self._until, self._thread
        assert thread is not None
        if loop is not None and until is not None:
            # Its loop may have ended already (a strict replay stopped by itself).
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(until.set)
        thread.join()
        if exc_type is None:
            self._raise_failure()

    # -- async with: a task on the caller's loop -----------------------------

    async def __aenter__(self) -> Self:
        self._check_fresh()
        loop = asyncio.get_running_loop()
        listening: asyncio.Future[None] = loop.create_future()

        def on_listening(origins: list[Origin]) -> None:
            self._origins = list(origins)
            if not listening.done():
                listening.set_result(None)

        self._until = asyncio.Event()
        self._task = loop.create_task(self._serve(self._until, on_listening),
                                      name=f"wiretape-{self._what}")
        waiting: set[asyncio.Future[Any]] = {listening, self._task}  # results of two types
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if self._origins is None:
            listening.cancel()
            self._finished = True
            self._task.result()  # raises what stopped it
            raise UsageError(f"the {self._what} ended before it listened")
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        assert self._task is not None and self._until is not None
        self._until.set()
        try:
            self._result = await asyncio.shield(self._task)
        except BaseException as failure:
            self._failure = failure
        finally:
            self._finished = True
        if exc_type is None:
            self._raise_failure()

    # -- shared --------------------------------------------------------------

    def _check_fresh(self) -> None:
        if self._thread is not None or self._task is not None:
            raise UsageError(f"this {self._what} was already used: create a new one per block")

    def _raise_failure(self) -> None:
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure


class RecordingProxy(_AttachedProxy[Run]):
    """A recording proxy for the length of a block; see :func:`recording`.

    Inside the block: ``url``, ``urls``, ``port``, ``origins``, ``env``.
    After it: ``run``, the :class:`~wiretape.Run` written.
    """

    _what = "recording"

    def __init__(self, upstreams: Mapping[str, str], ports: Mapping[str, int], out: Path | None,
                 max_body: int) -> None:
        super().__init__()
        self._upstreams = dict(upstreams)
        self._ports = dict(ports)
        self._out = out
        self._max_body = max_body

    async def _serve(self, until: asyncio.Event,
                     on_listening: Callable[[list[Origin]], None]) -> Run:
        from wiretape.launch.record import record as launch_record

        result = await launch_record(
            None, out=self._out, upstreams=list(self._upstreams.items()),
            ports=port_pairs(None, self._ports), max_body=self._max_body,
            on_listening=on_listening, on_environment=self._keep_env, until=until)
        raise_unsaved(result)
        return Run(run_id=result.run_id, path=result.path, exchanges=result.exchanges,
                   body_bytes=result.body_bytes, duration_s=result.duration_s,
                   exit_status=None, origins=result.origins, failures=tuple(result.failures))

    @property
    def run(self) -> Run:
        """The run written (path, exchanges, bytes, …). Raises UsageError
        before the block has ended."""
        return self._finished_result("run")


class ReplayingProxy(_AttachedProxy[Verdict]):
    """A replaying proxy for the length of a block; see :func:`replaying`.

    Inside the block: ``url``, ``urls``, ``port``, ``origins``, ``env``.
    After it: ``verdict``. In strict mode the proxy stops at the first mismatch and
    later requests are refused.
    """

    _what = "replay"

    def __init__(self, path: Path, settings: ReplaySettings) -> None:
        super().__init__()
        self._path = path
        self._settings = settings

    @property
    def run_path(self) -> Path:
        """The run file being replayed."""
        return self._path

    async def _serve(self, until: asyncio.Event,
                     on_listening: Callable[[list[Origin]], None]) -> Verdict:
        from wiretape.launch.replay import replay as launch_replay

        verdict: Verdict = await launch_replay(self._path, None, self._settings,
                                               on_listening=on_listening,
                                               on_environment=self._keep_env, until=until)
        return verdict

    @property
    def verdict(self) -> Verdict:
        """The replay's verdict (``passed``, ``exact``, ``diverged``, …).
        Raises UsageError before the block has ended."""
        return self._finished_result("verdict")


def recording(
    upstream: str | Mapping[str, str],
    *,
    port: int | Mapping[str, int] = 0,
    out: str | os.PathLike[str] | None = None,
    max_body: int = MAX_BODY,
) -> RecordingProxy:
    """A proxy that forwards to ``upstream`` and records every exchange,
    for ``with`` (background thread) or ``async with`` (the running loop).

    ``upstream``: the origin's URL, e.g. ``"https://api.openai.com/v1"``
    (named ``upstream``), or ``{name: URL}`` for several. ``port``: the
    local port for the first origin, or ``{name: port}``; 0: any free
    port. ``out``: the run file (default ``.wiretape/runs/<run-id>.wtape``;
    it must not exist). ``max_body``: the largest request body accepted, in
    bytes.

    Entering raises PortInUse, InvalidUpstream, RunFileError or UsageError.
    """
    upstreams = {"upstream": upstream} if isinstance(upstream, str) else dict(upstream)
    if not upstreams:
        raise UsageError("recording() needs an upstream URL (where to forward requests)")
    ports = dict(port) if isinstance(port, Mapping) else {next(iter(upstreams)): port}
    port_pairs(None, ports)
    return RecordingProxy(upstreams, ports, Path(out) if out is not None else None, max_body)


def replaying(
    run: str | os.PathLike[str],
    *,
    mode: ModeName = "strict",
    pace: PaceName = "fast",
    port: int | Mapping[str, int] | None = None,
    substitutions: Mapping[str, str] | None = None,
    allow_substitutions: bool = False,
    max_body: int = MAX_BODY,
) -> ReplayingProxy:
    """A proxy that answers from the recording ``run`` (a path or run id),
    never from a provider, for ``with`` or ``async with``.

    ``port``: the local port for the first origin, or ``{name: port}``;
    None: each recorded port when free, else any free one. ``mode``,
    ``pace``, ``substitutions``, ``allow_substitutions``: as in
    :func:`wiretape.replay`. The verdict is kept in the run's replay log as well.

    Raises RunNotFound here; entering raises RunFileError, PortInUse or
    UsageError.
    """
    pairs = port_pairs(None, port) if isinstance(port, Mapping) else port_pairs(port, None)
    settings = replay_settings(mode, pace, substitutions, allow_substitutions, pairs, max_body)
    return ReplayingProxy(run_path(run), settings)
