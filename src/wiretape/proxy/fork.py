"""Forking: the first requests of a run answered from its parent's
recording, every later one forwarded to a live origin.

A fork is one proxy in front of two engines: a :class:`~wiretape.proxy.replay.Replayer`
over the parent's first ``upto`` exchanges (strict: each request must match,
a divergence stops the fork with the replay's own explanation), and a
:class:`~wiretape.proxy.record.Recorder` writing the fork's run file. Each
exchange served from the parent is copied into that run file under its
parent's sequence number (its bytes and redaction facts the parent's, its
timing as it was served in the fork: its start when the fork's agent asked
for it, its duration until it was answered, the parent's frame pacing
scaled into that time), so the fork is a run like any other, whose
exchanges' times say what followed what (``inspect/checkpoints.py``); the
live exchanges follow it, numbered from
``upto``.

This module is the one place where the replay and recording sides meet
(the replay path itself imports neither the recorder nor an upstream
client: pyproject.toml's import contracts).

The model rewrite (:func:`rewrite_model`) changes only what is sent
upstream; the run stores the request as the agent sent it, so the fork
replays exact on its own, and the rewrite is declared in the run's
metadata.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from wiretape.model import Exchange, Frame, Redaction, ReplayRow, Request, header_values
from wiretape.playback.decide import Kind, Policy
from wiretape.proxy.http1 import ClientGone, Handler, Responder
from wiretape.proxy.record import Recorder
from wiretape.proxy.replay import Replayer
from wiretape.proxy.shapes import error_response
from wiretape.redaction import LiveRedactor
from wiretape.store.runfile import RunFile

#: The JSON ``model`` member as it appears in a body (a key: inside a
#: string a quote would be escaped). Its value is group 1, still escaped.
_MODEL_MEMBER = re.compile(rb'"model"\s*:\s*"((?:[^"\\]|\\.)*)"')
#: Gemini names the model in the path: ``/v1beta/models/NAME:generateContent``.
_GEMINI_MODEL = re.compile(rb"(/models/)([^/:?]+)(:[A-Za-z]+)")


def rewrite_model(request: Request, model: str) -> Request | None:
    """``request`` with its model replaced by ``model``: the top-level
    ``model`` member of a JSON body (only those bytes change), or the
    ``models/NAME:method`` path segment of a Gemini target. None when the
    request names no model where these look (or its body is coded: a
    ``Content-Encoding`` is left alone). Content-Length is the upstream
    client's to set (``proxy.upstream.build_request``)."""
    if request.body and not header_values(request.headers, b"content-encoding"):
        try:
            document = json.loads(request.body)
        except ValueError:
            document = None
        if isinstance(document, dict) and isinstance(document.get("model"), str):
            wanted = document["model"]
            encoded = json.dumps(model).encode()[1:-1]
            for match in _MODEL_MEMBER.finditer(request.body):
                try:
                    value = json.loads(b'"' + match.group(1) + b'"')
                except ValueError:
                    continue
                if value != wanted:
                    continue
                body = request.body[:match.start(1)] + encoded + request.body[match.end(1):]
                try:
                    if json.loads(body).get("model") == model:
                        return replace(request, body=body)
                except ValueError:
                    pass
            # (a member spelled in a way the pattern misses): written again
            document["model"] = model
            return replace(request, body=json.dumps(document).encode())
    segment = _GEMINI_MODEL.search(request.target)
    if segment is not None:
        target = (request.target[:segment.start(2)] + model.encode("utf-8")
                  + request.target[segment.end(2):])
        return replace(request, target=target)
    return None


#: The exchanges served from the parent while one request was handled
#: (each with the moment it was asked for, ns): copied once it is answered.
_SERVING: contextvars.ContextVar[list[tuple[Exchange, int]] | None] = contextvars.ContextVar(
    "wiretape_fork_serving", default=None)


def served_copy(exchange: Exchange, started_ns: int, ended_ns: int) -> Exchange:
    """``exchange`` (the parent's) as the fork served it: started at
    ``started_ns`` (epoch ns), lasting until ``ended_ns``, its time to the
    first byte and its frames' and WebSocket messages' offsets the
    parent's scaled into that span (their order and proportions kept)."""
    took = max(0, ended_ns - started_ns)
    was = exchange.duration_ns

    def scaled(offset: int) -> int:
        return min(took, offset * took // was) if was > 0 else 0

    response = exchange.response
    if response is not None:
        response = replace(response, frames=tuple(Frame(scaled(f.offset_ns), f.data)
                                                  for f in response.frames))
    messages = tuple(replace(m, offset_ns=scaled(m.offset_ns)) for m in exchange.messages)
    return replace(exchange, started_at_ns=started_ns, duration_ns=took, response=response,
                   ttfb_ns=scaled(exchange.ttfb_ns) if exchange.ttfb_ns is not None else None,
                   messages=messages)


@dataclass
class ForkStats:
    """What a fork served: ``replayed`` from the parent (their replay
    kinds, in order), ``rewritten`` live requests whose model was
    rewritten, ``not_rewritten`` live ones that named no model."""

    replayed: list[str] = field(default_factory=list)
    rewritten: int = 0
    not_rewritten: int = 0


class _ParentTape(Replayer):
    """A replayer whose decisions stay in memory: the parent's replay log
    is not written (a fork is not a replay of its parent)."""

    def _store(self, rows: list[tuple[ReplayRow, Request, int]]) -> None:
        return None


class Fork:
    """Serves one fork: the first ``upto`` requests from ``served`` (the
    parent's first ``upto`` exchanges), each copied into ``run`` once
    served; later ones through ``recorder`` (made with ``first_seq=upto``
    and this fork's :meth:`outgoing` as its rewrite)."""

    def __init__(self, run: RunFile, parent: RunFile, served: list[Exchange], upto: int,
                 policy: Policy, *, redactor: LiveRedactor,
                 on_stop: Callable[[str], None], model: str | None = None,
                 facts: Mapping[int, Sequence[Redaction]] | None = None) -> None:
        """``facts``: the parent's redaction facts per exchange, copied
        with each exchange served from it."""
        self._run = run
        self._facts = facts or {}
        self._upto = upto
        self._model = model
        self._routed = 0
        self._served = {e.seq: e for e in served}
        self.stats = ForkStats()
        self.stopped: str | None = None
        self._on_stop = on_stop
        self.recorder: Recorder | None = None
        self.replayer = _ParentTape(parent, served, policy, redactor=redactor,
                                    on_stop=self._stop, on_decision=self._decided)
        #: copies into the fork's run, on a thread of their own (SQLite
        #: stays off the loop), in the order decided
        self._writer = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="wiretape-fork")
        self._writes: list[concurrent.futures.Future[None]] = []

    def _stop(self, reason: str) -> None:
        self.stopped = reason
        self._on_stop(reason)

    def _decided(self, row: ReplayRow) -> None:
        """A request answered from the parent: copied into the fork's run
        (under the lock of the replayer, in the order decided)."""
        self.stats.replayed.append(row["kind"])
        seq = row["seq"]
        if row["served"] and seq is not None and row["kind"] != Kind.DIVERGED.value:
            # Its bytes are the parent's; its times are taken around its serving.
            serving = _SERVING.get()
            if serving is not None:
                serving.append((self._served[seq], time.time_ns()))
            else:  # (decided outside a request's handling: timed as decided)
                now = time.time_ns()
                self._copy(served_copy(self._served[seq], now, now))

    def _copy(self, exchange: Exchange) -> None:
        self._writes.append(self._writer.submit(
            self._run.write_exchange, exchange, self._facts.get(exchange.seq, ())))

    def close(self) -> None:
        """Let the copies still queued finish (the run file closes after)."""
        self._writer.shutdown(wait=True)

    async def flush(self) -> None:
        """Wait until every exchange served from the parent is in the
        fork's run file. Raises RunFileWriteError from a copy that failed
        (the others are still written)."""
        try:
            results = await asyncio.gather(*(asyncio.wrap_future(f) for f in self._writes),
                                           return_exceptions=True)
        finally:
            self._writer.shutdown(wait=False)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    def outgoing(self, request: Request) -> Request:
        """What is sent upstream for a live ``request``: its model
        rewritten when the fork asks for one."""
        if self._model is None:
            return request
        rewritten = rewrite_model(request, self._model)
        if rewritten is None:
            self.stats.not_rewritten += 1
            return request
        self.stats.rewritten += 1
        return rewritten

    def handler(self, origin: str, upstream_url: str, connection_id: int) -> Handler:
        """Each request of a connection: from the parent while fewer than
        ``upto`` have been, else live (``recorder`` must be set)."""
        replayed = self.replayer.handler(origin, connection_id)
        live: Handler | None = None

        async def handle(conn: Responder, request: Request) -> None:
            nonlocal live
            if self.stopped is not None:
                headers, body = error_response(
                    request.path, 400, "fork_stopped",
                    f"wiretape fork: the fork has stopped ({self.stopped}); "
                    "no further requests are answered")
                with contextlib.suppress(ClientGone):
                    await conn.answer(400, b"Bad Request", headers, body)
                return
            if self._routed < self._upto:
                self._routed += 1
                serving: list[tuple[Exchange, int]] = []
                token = _SERVING.set(serving)
                try:
                    await replayed(conn, request)
                finally:
                    _SERVING.reset(token)
                    ended = time.time_ns()
                    for exchange, asked in serving:
                        self._copy(served_copy(exchange, asked, ended))
                return
            if live is None:
                assert self.recorder is not None
                live = self.recorder.handler(origin, upstream_url, connection_id)
            await live(conn, request)

        return handle
