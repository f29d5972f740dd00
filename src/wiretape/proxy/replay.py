"""Replaying: answer each live request from the recording, never from an
origin. Neither this module nor anything it imports loads an upstream
client (httpx, ``wiretape.proxy.upstream``, the recorder): an import
contract in pyproject.toml and tests/unit/test_import_boundaries.py hold it
to that.

Owns the tape (what is left to serve, shared by all origins of a run), the
replay log rows, and writing a recorded response back frame by frame with
its recorded framing, cut off where the recording was cut off.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from wiretape.errors import WiretapeError
from wiretape.matching import explain
from wiretape.matching.correspond import Learned
from wiretape.model import Ending, Exchange, ReplayRow, Request, RequestDetail
from wiretape.origins import parse_upstream
from wiretape.playback.decide import Candidate, Decision, Kind, Policy, decide
from wiretape.playback.pacing import Pace, schedule
from wiretape.proxy.http1 import ClientConnection, ClientGone, Handler
from wiretape.proxy.shapes import error_response, unreachable_response
from wiretape.redaction import LiveRedactor
from wiretape.store.runfile import RunFile


def new_replay_id() -> str:
    return "rpl_" + secrets.token_hex(6)


@dataclass
class Tape:
    """The recorded exchanges and which of them are still unserved."""

    exchanges: dict[int, Exchange]
    remaining: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, exchanges: list[Exchange]) -> Tape:
        return cls({e.seq: e for e in exchanges}, sorted(e.seq for e in exchanges))

    def candidates(self) -> list[Candidate]:
        return [Candidate(seq, self.exchanges[seq].request) for seq in self.remaining]

    def consume(self, seq: int) -> None:
        self.remaining.remove(seq)


def decision_detail(decision: Decision) -> RequestDetail:
    c = decision.comparison
    detail: RequestDetail = {
        "fields": list(c.fields),
        "header_notes": list(c.header_notes),
        "body_bytes_differ": c.body_bytes_differ,
        "first_body_offset": c.first_body_offset,
        "substitutions": [list(s) for s in decision.substitutions_fired],
    }
    if decision.rules:
        detail["learned"] = [r.copy() for r in decision.rules]
    if decision.not_allowed:
        detail["not_allowed"] = list(decision.not_allowed)
    if decision.unexplained:
        detail["unexplained"] = decision.unexplained
    return detail


class Replayer:
    """Serves one run's tape to live requests and logs every decision."""

    def __init__(
        self,
        run: RunFile,
        exchanges: list[Exchange],
        policy: Policy,
        *,
        pace: Pace = Pace.FAST,
        replay_id: str | None = None,
        on_stop: Callable[[str], None] | None = None,
        on_decision: Callable[[ReplayRow], None] | None = None,
        redactor: LiveRedactor | None = None,
    ) -> None:
        self.replay_id = replay_id or new_replay_id()
        self.redactor = redactor or LiveRedactor()
        self._run = run
        self._tape = Tape.of(exchanges)
        self._responses = tuple(e.response for e in exchanges if e.response is not None)
        self._policy = policy
        #: the identifier bijection and clock shift learned so far; ids the
        #: recorded answers carried reached the agent unchanged
        self.learned = Learned(
            policy.clock_tolerance_s, recorded_span=policy.recorded_span,
            served=b"".join(f.data for r in self._responses for f in r.frames))
        #: when the replay began serving (epoch seconds)
        self.started_at = time.time()
        self._pace = pace
        self._idx = itertools.count(0)
        self._lock = asyncio.Lock()
        self._on_stop = on_stop
        self._on_decision = on_decision
        self.stopped: str | None = None
        self.rows: list[ReplayRow] = []

    def handler(self, origin: str, connection_id: int) -> Handler:
        async def handle(conn: ClientConnection, request: Request) -> None:
            await self._answer(conn, request)

        return handle

    async def _answer(self, conn: ClientConnection, request: Request) -> None:
        async with self._lock:
            # Redacted as the recording was (off the loop: a coded body is
            # undone), learning secrets the recording masked on this route.
            recorded = [self._tape.exchanges[seq].request for seq in self._tape.remaining]
            live = await asyncio.to_thread(self.redactor.request, request, recorded)
            if self.stopped is not None:
                decision = None
            else:
                # Off the loop: a body that is not exact is parsed and walked.
                # A live clock reading lies between the replay's start and now.
                self.learned.live_span = (self.started_at, time.time())
                decision = await asyncio.to_thread(
                    decide, live, self._tape.candidates(), self._policy, self.learned)
                if decision.seq is not None:
                    self._tape.consume(decision.seq)
                if decision.learned is not None:
                    self.learned = decision.learned
                detail = decision_detail(decision)
                if decision.kind in (Kind.DIVERGED, Kind.SUBSTITUTED) and decision.seq is not None:
                    explanation = await asyncio.to_thread(
                        explain, self._tape.exchanges[decision.seq].request, live,
                        recorded_responses=self._responses,
                        semantic_headers=self._policy.semantic_headers)
                    detail["explanation"] = explanation.to_json()
                    detail["body_bytes_differ"] = explanation.bytes_differ
                row: ReplayRow = {
                    "index": next(self._idx),
                    "kind": decision.kind.value,
                    "seq": decision.seq,
                    "served": decision.serve,
                    "method": live.method.decode("latin-1"),
                    "target": live.target.decode("latin-1"),
                    "detail": detail,
                }
                self.rows.append(row)
                await asyncio.to_thread(
                    self._run.add_replay_request, self.replay_id, row["index"], row["kind"],
                    row["seq"], row["served"], live.method, live.target, row["detail"],
                )
                if self._on_decision is not None:
                    self._on_decision(row)
        if decision is None:
            await self._reject(conn, request, "replay_stopped",
                               f"wiretape: the replay has stopped ({self.stopped}); "
                               "no further requests are answered")
            return
        if decision.serve and decision.seq is not None:
            await self._serve(conn, self._tape.exchanges[decision.seq])
        else:
            await self._reject(conn, request, f"replay_{decision.kind.value}",
                               _reason(decision, live))
        if decision.stop:
            self.stopped = (f"{decision.kind.value} request {live.method.decode()} "
                            f"{live.target.decode('latin-1')}")
            if self._on_stop is not None:
                self._on_stop(self.stopped)

    async def _reject(
        self, conn: ClientConnection, request: Request, code: str, message: str
    ) -> None:
        headers, body = error_response(request.path, 400, code, message)
        try:
            await conn.send_head(400, b"Bad Request", headers)
            await conn.send_data(body)
            await conn.end()
        except ClientGone:
            pass

    async def _serve(self, conn: ClientConnection, exchange: Exchange) -> None:
        response = exchange.response
        if response is None:
            # A run without the stored answer (older, imported): make it
            # again, naming the origin's upstream as the recording did.
            status, reason, headers, body = unreachable_response(
                exchange.request.path, self._upstream_of(exchange.origin),
                exchange.error or exchange.ending.value, timeout=exchange.ending is Ending.TIMEOUT)
            await conn.send_head(status, reason, headers)
            await conn.send_data(body)
            await conn.end()
            return
        # The origin never answered: the stored response is the 502 or 504
        # wiretape gave the agent, complete, its head sent with its body.
        own = exchange.ttfb_ns is None and exchange.ending in (Ending.ORIGIN_UNREACHABLE,
                                                               Ending.TIMEOUT)
        ttfb = response.frames[0].offset_ns if own and response.frames else exchange.ttfb_ns
        loop = asyncio.get_running_loop()
        start = loop.time()
        head_at, frame_at = schedule(ttfb, [f.offset_ns for f in response.frames], self._pace)
        await _sleep_until(loop, start + head_at / 1e9)
        await conn.send_head(response.status, response.reason, response.headers)
        for frame, at in zip(response.frames, frame_at, strict=True):
            await _sleep_until(loop, start + at / 1e9)
            await conn.send_data(frame.data)
        if exchange.ending is Ending.COMPLETE or own:
            await conn.end()
        else:
            await conn.abort()

    def _upstream_of(self, origin: str) -> str:
        """The upstream URL recorded for ``origin`` (its name when unknown),
        as the recorder names it: without userinfo."""
        try:
            upstream = next((o.upstream for o in self._run.info().origins if o.name == origin),
                            None)
            if upstream is not None:
                root, _, base = parse_upstream(upstream)
                return root + base
        except (WiretapeError, ValueError):
            pass
        return origin


async def _sleep_until(loop: asyncio.AbstractEventLoop, when: float) -> None:
    delay = when - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)


def _reason(decision: Decision, live: Request) -> str:
    route = f"{live.method.decode()} {live.target.decode('latin-1')}"
    if decision.kind is Kind.MISSING:
        return f"wiretape replay: no recorded exchange left for {route} (missing)"
    fields = ", ".join(decision.comparison.fields)
    return (f"wiretape replay: {route} does not match recorded exchange #{decision.seq} "
            f"({decision.kind.value}: {fields} differ)")
