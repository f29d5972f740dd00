"""Replaying: answer each live request from the recording, never from an
origin. Neither this module nor anything it imports loads an upstream
client (httpx, ``wiretape.proxy.upstream``, the recorder): an import
contract in pyproject.toml and tests/unit/test_import_boundaries.py hold it
to that.

Owns the tapes (what is left to serve: one shared by the model origins of a
run, one per tool origin, ``--tools``), the replay log rows, and writing a
recorded response back frame by frame with its recorded framing, cut off
where the recording was cut off.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace

from wiretape.errors import WiretapeError
from wiretape.limits import DEFAULT_WS_CLOSE_TIMEOUT
from wiretape.matching import Explanation, explain
from wiretape.matching.correspond import Learned
from wiretape.model import (
    MCP_ORIGIN_PREFIX,
    TOOL_ORIGIN_PREFIX,
    Ending,
    Exchange,
    MessageDecisionJSON,
    ReplayRow,
    Request,
    RequestDetail,
    exchange_kind,
    header_values,
)
from wiretape.origins import parse_upstream
from wiretape.playback.decide import (
    INLINE_BYTES,
    Candidate,
    Decision,
    Kind,
    Mode,
    Policy,
    Remaining,
    decide,
    exact,
)
from wiretape.playback.messages import SessionScript, Step, message_label, never_received
from wiretape.playback.pacing import Pace, schedule
from wiretape.proxy import mcp, mcp_replay, ws_replay
from wiretape.proxy.http1 import ClientConnection, ClientGone, Handler, Responder
from wiretape.proxy.shapes import error_response, unreachable_response
from wiretape.proxy.websocket import is_upgrade
from wiretape.redaction import REDACTED, Facts, LiveRedactor, Rules, redact_pieces, redact_request
from wiretape.store.runfile import RunFile


def new_replay_id() -> str:
    return "rpl_" + secrets.token_hex(6)


@dataclass
class Tape:
    """The recorded exchanges and which of them are still unserved,
    indexed as the decision looks them up (playback.decide.Remaining).

    Per route, how many of those left were not looked at for masks yet
    and how many may hold one are counted as they change (under a lock:
    the prescan's thread looks while the loop, or a worker thread,
    consumes), so whether a live request has anything to learn from is
    known without going through its route."""

    exchanges: dict[int, Exchange]
    remaining: Remaining = field(default_factory=Remaining)
    #: per recorded exchange: whether its request may hold a redaction mask
    #: (what a live request's secrets are learned from), looked at once
    _masked: dict[int, bool] = field(default_factory=dict)
    #: per route (method, path): those left not looked at for masks yet
    _unknown: dict[tuple[bytes, bytes], int] = field(default_factory=dict)
    #: per route: those left that may hold a mask
    _maybe: dict[tuple[bytes, bytes], int] = field(default_factory=dict)
    _counting: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        for cand in self.remaining:
            known = self._masked.get(cand.seq)
            counts = self._unknown if known is None else self._maybe if known else None
            if counts is not None:
                route = _route(cand.request)
                counts[route] = counts.get(route, 0) + 1

    @classmethod
    def of(cls, exchanges: list[Exchange]) -> Tape:
        ordered = sorted(exchanges, key=lambda e: e.seq)
        return cls({e.seq: e for e in ordered},
                   Remaining(Candidate(e.seq, e.request) for e in ordered))

    def consume(self, seq: int) -> None:
        with self._counting:
            self.remaining.consume(seq)
            known = self._masked.get(seq)
            route = _route(self.exchanges[seq].request)
            if known is None:
                self._unknown[route] -= 1
            elif known:
                self._maybe[route] -= 1

    def recorded_for(self, request: Request) -> list[Request]:
        """The recorded requests ``LiveRedactor.request`` needs to see for
        the raw live ``request``: none when none left on its route holds a
        mask, so there is nothing to learn and the redactor's own search
        over them would find nothing; else all left, as before. (Whether
        the redacted request kept the route is checked by the caller.)"""
        route = _route(request)
        if self._unknown.get(route, 0):
            left = self.remaining.route(request.method, request.path)
            if left and not any(self._may_hold_mask(c.seq) for c in left):
                return []
        elif self._maybe.get(route, 0) == 0 and self.remaining.has_route(*route):
            return []
        return [c.request for c in self.remaining]

    def masks_known(self, request: Request) -> bool:
        """Whether every request left on ``request``'s route was looked at
        for masks already (:meth:`recorded_for` then reads no body)."""
        return self._unknown.get(_route(request), 0) == 0

    def look_for_masks(self, stop: Callable[[], bool] = lambda: False) -> None:
        """Look at every recorded request for masks, in order, until
        ``stop()`` (CPU work: reads every body once)."""
        for seq in list(self.exchanges):
            if stop():
                return
            self._may_hold_mask(seq)

    def _may_hold_mask(self, seq: int) -> bool:
        known = self._masked.get(seq)
        if known is None:
            request = self.exchanges[seq].request
            coded = header_values(request.headers, b"content-encoding")
            # A coded body is looked at decoded by the redactor: assume a mask.
            known = bool(coded) or any(
                marker in part for part in (request.target, request.body)
                for marker in _MASK_MARKERS)
            with self._counting:
                if seq not in self._masked:
                    self._masked[seq] = known
                    if seq in self.remaining:
                        route = _route(request)
                        self._unknown[route] -= 1
                        if known:
                            self._maybe[route] = self._maybe.get(route, 0) + 1
        return known


def _route(request: Request) -> tuple[bytes, bytes]:
    return request.method, request.path


#: Seconds the prescan sleeps at a time while a live request is decided.
_PRESCAN_WAIT_S = 0.0005

#: Seconds with no request being answered before the decided rows are
#: handed to the writer thread, and the most a row waits for that.
_WRITE_IDLE_S = 0.002
_WRITE_LATEST_S = 0.1

#: Bytes every redaction mask contains one of (``<redacted***>``, ``****``).
_MASK_MARKERS = (REDACTED[:-1], b"****")


class HeadRedactor:
    """A live request's target and header fields redacted as
    :func:`redact_request` redacts them, each distinct target and field
    worked out once while the rules are the same object (an agent resends
    the same fields with every request)."""

    #: targets and fields kept at most (then forgotten, and worked out again)
    KEPT = 4096

    def __init__(self) -> None:
        self._rules: Rules | None = None
        self._targets: dict[bytes, bytes] = {}
        self._fields: dict[tuple[bytes, bytes], tuple[bytes, bytes]] = {}

    def redacted(self, request: Request, rules: Rules) -> Request:
        """``request`` with an empty body, redacted by ``rules``: equal to
        ``redact_request(replace(request, body=b""), rules)[0]`` (a target
        and each header field are redacted on their own, and an empty body
        changes no field)."""
        if rules is not self._rules or len(self._fields) + len(self._targets) > self.KEPT:
            self._rules, self._targets, self._fields = rules, {}, {}
        target = self._targets.get(request.target)
        if target is None:
            target = redact_request(Request(b"GET", request.target, (), b""), rules)[0].target
            self._targets[request.target] = target
        fields = self._fields
        headers = []
        for pair in request.headers:
            done = fields.get(pair)
            if done is None:
                done = redact_request(Request(b"GET", b"/", (pair,), b""), rules)[0].headers[0]
                fields[pair] = done
            headers.append(done)
        return Request(request.method, target, tuple(headers), b"", request.http_version)


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
    """Serves one run's tape to live requests and logs every decision.

    Each decision's log row is written to the run in order by a writer
    thread of its own, off the client's path: :meth:`finish` waits for them
    all (call it before the replay's verdict is read)."""

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
        close_timeout: float = DEFAULT_WS_CLOSE_TIMEOUT,
    ) -> None:
        """``close_timeout``: seconds a replayed WebSocket session's client
        has to finish a closing handshake (``proxy.ws_replay``)."""
        self.replay_id = replay_id or new_replay_id()
        self._close_timeout = close_timeout
        self.redactor = redactor or LiveRedactor()
        self._run = run
        # Model exchanges are one tape, whatever their origin; each tool
        # origin's (``--tools``) a tape of its own: a page of one host never
        # answers a request for another. Stdio MCP sessions are played to
        # `wiretape mcp`, never to a request.
        self._tape = Tape.of([e for e in exchanges if e.kind == "model"])
        tools: dict[str, list[Exchange]] = {}
        for e in exchanges:
            if e.kind == "tool":
                tools.setdefault(e.origin, []).append(e)
        self._tool_tapes = {origin: Tape.of(found) for origin, found in tools.items()}
        #: the recorded MCP sessions left, by origin (``mcp:NAME``), in order
        self._mcp: dict[str, list[Exchange]] = {}
        for e in sorted(exchanges, key=lambda e: e.seq):
            if e.kind == "mcp":
                self._mcp.setdefault(e.origin, []).append(e)
        self._responses = tuple(e.response for e in exchanges if e.response is not None)
        #: what the recorded WebSocket sessions' servers sent (answers too)
        self._server_messages = tuple(m.payload for e in exchanges for m in e.messages
                                      if m.direction == "server")
        self._policy = policy
        self._learned = Learned(policy.clock_tolerance_s, recorded_span=policy.recorded_span)
        self._served_known = False
        #: when the replay began serving (epoch seconds)
        self.started_at = time.time()
        self._pace = pace
        self._idx = itertools.count(0)
        self._lock = asyncio.Lock()
        self._on_stop = on_stop
        self._on_decision = on_decision
        self.stopped: str | None = None
        self.rows: list[ReplayRow] = []
        #: rows decided, not yet handed to the writer (in decision order)
        self._unwritten: list[tuple[ReplayRow, Request, int]] = []
        self._writer: concurrent.futures.ThreadPoolExecutor | None = None
        #: (waited for by :meth:`finish` only: a write done does not wake the loop)
        self._writes: list[concurrent.futures.Future[None]] = []
        #: requests being answered now (rows are handed to the writer between them)
        self._answering = 0
        self._write_timer: asyncio.TimerHandle | None = None
        #: per recorded seq: the rules that were seen to leave its body as
        #: it is (so a live body equal to it needs no scan while they hold)
        self._clean: dict[int, Rules] = {}
        self._prescan: asyncio.Future[None] | None = None
        self._prescan_stop = False
        #: live requests being redacted and decided now (the prescan waits)
        self._deciding = 0
        self._head = HeadRedactor()

    @property
    def learned(self) -> Learned:
        """The identifier bijection and clock shift learned so far; ids the
        recorded answers carried reached the agent unchanged (their bodies
        are joined the first time a comparison may need them)."""
        if not self._served_known:
            self._learned.served = b"".join(
                [*(f.data for r in self._responses for f in r.frames), *self._server_messages])
            self._served_known = True
        return self._learned

    def handler(self, origin: str, connection_id: int) -> Handler:
        """Answers the requests of one connection to ``origin``: a model
        origin from the model exchanges, a tool origin (``tool:...``) from
        that origin's exchanges only."""
        self._start_prescan()
        if exchange_kind(origin) == "tool":
            tape = self._tool_tapes.setdefault(origin, Tape.of([]))
            tool: str | None = origin
        else:
            tape, tool = self._tape, None

        async def handle(conn: Responder, request: Request) -> None:
            await self._answer(conn, request, tape, tool)

        return handle

    def _start_prescan(self) -> None:
        """Start looking at the recorded bodies on a worker thread (once,
        on the event loop; see :meth:`_scan_recorded`), and start the
        writer's thread (a thread's start waits for it to run: not in the
        middle of serving)."""
        if self._prescan is None:
            self._prescan = asyncio.ensure_future(asyncio.to_thread(self._scan_recorded))
            self._writes.append(self._log_writer().submit(lambda: None))

    async def prescanned(self) -> None:
        """Wait until every recorded body left has been looked at (see
        :meth:`_scan_recorded`); starts that if it has not started."""
        self._start_prescan()
        assert self._prescan is not None
        await asyncio.shield(self._prescan)

    def _scan_recorded(self) -> None:
        """For each recorded request not served yet, in order: whether
        redacting its body with the rules of now changes nothing (then a
        live body equal to it, byte for byte, is not scanned again while
        the rules hold: :meth:`_redacted_as_recorded`); before that, each
        for masks (``Tape.look_for_masks``). Runs once on a worker thread
        from the first connection on, ahead of the agent's requests and
        between them (it waits while one is decided); redaction's search
        leaves the GIL to the event loop."""
        self._tape.look_for_masks(self._prescan_paused)
        for seq, exchange in list(self._tape.exchanges.items()):
            if self._prescan_paused():
                return
            request = exchange.request
            if seq not in self._tape.remaining or header_values(request.headers,
                                                                 b"content-encoding"):
                continue
            rules = self.redactor.rules
            # (the body as redact_request redacts one: its credential-named
            # fields too)
            body, _ = redact_pieces([request.body], request.headers, "request-body", Facts(),
                                    rules, fields=True)
            if body == [request.body]:
                self._clean[seq] = rules

    @contextlib.asynccontextmanager
    async def _deciding_now(self) -> AsyncIterator[None]:
        """Counts a live request from its wait for the lock to its decision
        (the prescan waits meanwhile)."""
        self._deciding += 1
        try:
            yield
        finally:
            self._deciding -= 1

    def _prescan_paused(self) -> bool:
        """Wait while a live request is being decided (the prescan would
        slow its redaction down: it works between requests); whether to
        stop."""
        while self._deciding and not self._prescan_stop:
            time.sleep(_PRESCAN_WAIT_S)
        return self._prescan_stop

    def _redacted_as_recorded(self, request: Request, tape: Tape) -> Request | None:
        """``request`` redacted as :meth:`_redact` would, without scanning
        its body, when that body is known to come out of redaction as it
        is: a remaining recorded request has the same method, target and
        body bytes, nothing on its route is to be learned from, and the
        prescan saw today's rules leave that body unchanged. Else None.
        Cheap (a dict lookup, one byte comparison): on the loop."""
        rules = self.redactor.rules
        if not self._clean or header_values(request.headers, b"content-encoding"):
            return None
        if not any(self._clean.get(c.seq) is rules
                   for c in tape.remaining.same_bytes(request)):
            return None
        if not tape.masks_known(request) or tape.recorded_for(request):
            return None
        head = self._head.redacted(request, rules)
        if (head.method, head.path) != (request.method, request.path):
            return None  # moved to another route: learn as _redact does
        return replace(head, body=request.body)

    async def finish(self) -> None:
        """Wait until every decision's log row is stored, then stop the
        writer. Raises what a write raised (RunFileError), the first one."""
        self._write_decided()
        writes, self._writes = self._writes, []
        results = await asyncio.gather(*(asyncio.wrap_future(w) for w in writes),
                                       return_exceptions=True)
        self._prescan_stop = True
        if self._prescan is not None:
            await asyncio.gather(self._prescan, return_exceptions=True)
        if self._writer is not None:
            self._writer.shutdown(wait=False)
            self._writer = None
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _answer(self, conn: Responder, request: Request, tape: Tape,
                      tool: str | None) -> None:
        """Decide ``request`` against ``tape`` and answer it; ``tool``: the
        tool origin it was made to (None: a model origin). Its row is
        stored once no request is being answered (:meth:`_write_when_idle`)."""
        self._answering += 1
        try:
            await self._decide_and_answer(conn, request, tape, tool)
        finally:
            self._answering -= 1
            self._write_when_idle()

    async def _decide_and_answer(self, conn: Responder, request: Request, tape: Tape,
                                 tool: str | None) -> None:
        session = False  # a WebSocket session to play
        self._start_prescan()
        async with self._deciding_now(), self._lock:
            live_or_none = self._redacted_as_recorded(request, tape)
            if (live_or_none is None and len(request.body) + len(request.target) <= INLINE_BYTES
                    and tape.masks_known(request) and not tape.recorded_for(request)):
                live_or_none = self._redact(request, tape)
            if live_or_none is not None:
                # A small request with nothing to learn from is redacted on
                # the loop, as is one whose body is a recorded one known to
                # need no redaction, and an exact one decided there (a dict
                # lookup and a byte comparison); any other goes off it, as
                # does one before the recorded bodies on its route were
                # looked at for masks (the prescan does that first).
                live = live_or_none
                decision = None if self.stopped else exact(live, tape.remaining, self._policy)
                explanation = None
                if decision is not None and decision.seq is not None:
                    tape.consume(decision.seq)
                elif self.stopped is None:
                    decision, explanation = await asyncio.to_thread(self._judge, live, tape)
            else:
                # Off the loop: redaction scans the body (a coded one is
                # undone); a body that is not exact is parsed and walked.
                live, decision, explanation = await asyncio.to_thread(self._decide, request,
                                                                      tape)
            if decision is not None:
                detail = decision_detail(decision)
                if tool is not None:
                    detail["origin"] = tool
                if explanation is not None:
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
                session = (decision.serve and decision.seq is not None
                           and is_upgrade(request.headers) and isinstance(conn, ClientConnection)
                           and ws_replay.is_session(tape.exchanges[decision.seq]))
                if not session:  # (a session's row is written once it ends)
                    self._unwritten.append((row, live, time.time_ns()))
                if self._on_decision is not None:
                    self._on_decision(row)
        if decision is None:
            await self._reject(conn, request, "replay_stopped",
                               f"wiretape: the replay has stopped ({self.stopped}); "
                               "no further requests are answered")
            return
        if decision.serve and decision.seq is not None:
            exchange = tape.exchanges[decision.seq]
            if session and isinstance(conn, ClientConnection):
                await self._session(conn, request, live, exchange, row)
            else:
                await self._serve(conn, exchange)
        elif tool is not None:
            # A tool's request is never forwarded: what it asked for
            # was not recorded, and it is told so as a gateway would.
            await self._reject(conn, request, f"replay_{decision.kind.value}",
                               _reason(decision, live, tool)
                               + "; a tool's requests are never forwarded during a replay",
                               status=502)
        else:
            await self._reject(conn, request, f"replay_{decision.kind.value}",
                               _reason(decision, live))
        if decision.stop:
            what = "tool request" if tool is not None else "request"
            self.stopped = (f"{decision.kind.value} {what} {live.method.decode()} "
                            f"{_shown(live, tool)}")
            if self._on_stop is not None:
                self._on_stop(self.stopped)

    async def _session(self, conn: ClientConnection, request: Request, live: Request,
                       exchange: Exchange, row: ReplayRow) -> None:
        """Play the WebSocket session ``exchange`` recorded (``ws_replay``);
        its decisions go in ``row``'s detail, which is written when the
        session ends (or is cut off)."""
        script = SessionScript(exchange.messages, self._policy, _Shared(self),
                               withheld=never_received(exchange.messages, exchange.ending))
        route = f"{live.method.decode()} {live.target.decode('latin-1')}"

        def stop(step: Step) -> str:
            d = step.decision
            where = _where(d)
            label = message_label(d)
            self.stopped = f"{d['kind']} {label} of the WebSocket session {route}{where}"
            if self._on_stop is not None:
                self._on_stop(self.stopped)
            return f"wiretape replay: {label} {d['kind']}{where}"

        try:
            await ws_replay.play(conn, request, exchange, script, pace=self._pace,
                                 redact=self._redact_message, on_stop=stop, lock=self._lock,
                                 close_timeout=self._close_timeout)
        finally:  # (also when the session is cut off: what was decided is kept)
            row["detail"]["messages"] = script.result()
            self._unwritten.append((row, live, time.time_ns()))

    def _redact_message(self, payload: bytes, recorded: bytes | None) -> bytes:
        """A live client message of a session redacted as the recording was
        (``recorded``: the payload it is compared with; None: none)."""
        return self.redactor.text(payload, "client-message", recorded, message=True)

    async def mcp_session(self, hello: mcp.Hello, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        """Play the next recorded session of the MCP server ``hello`` names
        to its shim (``proxy.mcp_replay``). The session is one row (method
        ``MCP``, target the server's name) whose detail carries the
        messages' decisions, written when it ends; a server with no
        recorded session left is a missing row, and the shim is told."""
        async with self._lock:
            left = self._mcp.get(hello.origin, [])
            exchange = left.pop(0) if left and self.stopped is None else None
            row: ReplayRow = {
                "index": next(self._idx), "kind": "exact" if exchange else "missing",
                "seq": exchange.seq if exchange else None, "served": exchange is not None,
                "method": mcp.METHOD.decode(), "target": hello.name,
                "detail": {"fields": [], "header_notes": [], "body_bytes_differ": 0,
                           "first_body_offset": None, "substitutions": []}}
            if self.stopped is None:
                self.rows.append(row)
                if self._on_decision is not None:
                    self._on_decision(row)
        live = Request(mcp.METHOD, hello.name.encode(), (), b"")
        if exchange is None:
            stop_now = False
            if self.stopped is not None:
                reason = f"wiretape: the replay has stopped ({self.stopped})"
            else:
                recorded = sorted(o.removeprefix(MCP_ORIGIN_PREFIX) for o in self._mcp)
                reason = (f"wiretape replay: no recorded session of MCP server {hello.name!r} "
                          "is left (missing; "
                          + (f"the run recorded sessions of {', '.join(recorded)})" if recorded else
                             "the run recorded no MCP session: record it with the server's "
                             "command behind `wiretape mcp --`)"))
                self._unwritten.append((row, live, time.time_ns()))
                self._write_decided()
                if self._policy.mode is Mode.STRICT:
                    self.stopped, stop_now = f"missing MCP session {hello.name!r}", True
            # The shim says why first: a strict stop ends the agent's group.
            await mcp_replay.end(reader, writer, reason)
            if stop_now and self._on_stop is not None and self.stopped is not None:
                self._on_stop(self.stopped)
            return
        script = SessionScript(exchange.messages, self._policy, _Shared(self))

        def stop(step: Step) -> str:
            d = step.decision
            where = _where(d)
            label = message_label(d)  # (names the JSON-RPC method)
            self.stopped = f"{d['kind']} {label} of MCP server {hello.name!r}{where}"
            return f"wiretape replay: {label} {d['kind']}{where}"

        try:
            codes = (header_values(exchange.response.headers, mcp.EXIT_HEADER)
                     if exchange.response is not None else [])
            code = codes[0] if codes else None
            ended = await mcp_replay.play(
                reader, writer, script, pace=self._pace, redact=self._redact_message, on_stop=stop,
                lock=self._lock, ends_early=exchange.ending is Ending.ORIGIN_RESET,
                exit_status=int(code) if code is not None and code.isdigit() else None)
        finally:  # (also when the session is cut off: what was decided is kept)
            row["detail"]["messages"] = script.result()
            self._unwritten.append((row, live, time.time_ns()))
            self._write_decided()
        # A strict stop, once the shim has said why (it is in the agent's group).
        if ended is not None and ended.stop and self.stopped and self._on_stop is not None:
            self._on_stop(self.stopped)

    def _decide(self, request: Request, tape: Tape | None = None,
                ) -> tuple[Request, Decision | None, Explanation | None]:
        """:meth:`_redact` then :meth:`_judge` against ``tape`` (default:
        the model exchanges'; no decision: the replay has stopped). CPU
        work; callers hold the lock."""
        tape = tape if tape is not None else self._tape
        live = self._redact(request, tape)
        if self.stopped is not None:
            return live, None, None
        return live, *self._judge(live, tape)

    def _redact(self, request: Request, tape: Tape) -> Request:
        """``request`` redacted as the recording was, learning the secrets
        the recording masked on its route (in ``tape``)."""
        recorded = tape.recorded_for(request)
        live = self.redactor.request(request, recorded)
        if not recorded and (live.method, live.path) != (request.method, request.path):
            # Redaction moved it to another route: learn as from all left.
            live = self.redactor.request(request, [c.request for c in tape.remaining])
        return live

    def _judge(self, live: Request, tape: Tape) -> tuple[Decision, Explanation | None]:
        """The decision for the redacted ``live`` against ``tape``, with how
        it differs when it diverged or was substituted; the tape and what
        was learned move on. CPU work; callers hold the lock."""
        decision = exact(live, tape.remaining, self._policy)
        if decision is None:
            # A live clock reading lies between the replay's start and now.
            learned = self.learned
            learned.live_span = (self.started_at, time.time())
            decision = decide(live, tape.remaining, self._policy, learned)
            if decision.learned is not None:
                self._learned = decision.learned
        if decision.seq is not None:
            tape.consume(decision.seq)
        explanation = None
        if decision.kind in (Kind.DIVERGED, Kind.SUBSTITUTED) and decision.seq is not None:
            explanation = explain(tape.exchanges[decision.seq].request, live,
                                  recorded_responses=self._responses,
                                  semantic_headers=self._policy.semantic_headers)
        return decision, explanation

    def _write_when_idle(self) -> None:
        """Hand the rows decided so far to the writer thread once no request
        has been answered for ``_WRITE_IDLE_S``, and at the latest
        ``_WRITE_LATEST_S`` after the first of them was decided: the
        writer's work (and its thread's wake-up, and its hold on the GIL)
        lands between an agent's requests, not in the next one (an agent
        that sends its next request at once gets it answered first)."""
        if not self._unwritten:
            return
        loop = asyncio.get_running_loop()
        age = (time.time_ns() - self._unwritten[0][2]) / 1e9
        delay = min(max(_WRITE_LATEST_S - age, 0.0), _WRITE_LATEST_S)
        if not self._answering:
            delay = min(delay, _WRITE_IDLE_S)
        if self._write_timer is not None:
            self._write_timer.cancel()
        self._write_timer = loop.call_later(delay, self._write_due)

    def _write_due(self) -> None:
        self._write_timer = None
        if self._answering and self._unwritten:
            age = (time.time_ns() - self._unwritten[0][2]) / 1e9
            if 0 <= age < _WRITE_LATEST_S:  # (the answer's end sets the timer again)
                self._write_timer = asyncio.get_running_loop().call_later(
                    _WRITE_LATEST_S - age, self._write_due)
                return
        self._write_decided()

    def _write_decided(self) -> None:
        """Hand the rows decided so far to the writer thread, which stores
        them in decision order."""
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        if not self._unwritten:
            return
        rows, self._unwritten = self._unwritten, []
        self._writes.append(self._log_writer().submit(self._store, rows))

    def _log_writer(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._writer is None:
            self._writer = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="wiretape-replay-log")
        return self._writer

    def _store(self, rows: list[tuple[ReplayRow, Request, int]]) -> None:
        for row, live, decided_at_ns in rows:
            self._run.add_replay_request(
                self.replay_id, row["index"], row["kind"], row["seq"], row["served"],
                live.method, live.target, row["detail"], decided_at_ns=decided_at_ns)

    async def _reject(
        self, conn: Responder, request: Request, code: str, message: str, *, status: int = 400
    ) -> None:
        headers, body = error_response(request.path, status, code, message)
        reason = b"Bad Gateway" if status == 502 else b"Bad Request"
        with contextlib.suppress(ClientGone):
            await conn.answer(status, reason, headers, body)

    async def _serve(self, conn: Responder, exchange: Exchange) -> None:
        response = exchange.response
        if response is None and exchange.ending is Ending.CLIENT_GONE:
            # The agent left before any answer came: it gets none, whatever
            # the pace (what ends the wait is the agent's own give-up). The
            # connection closes when the agent leaves, or at the latest
            # twice the recorded wait and a second after the request.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2 * exchange.duration_ns / 1e9 + 1.0):
                    await conn.client_gone()
            await conn.abort()
            return
        if response is None:
            # A run without the stored answer (older, imported): make it
            # again, naming the origin's upstream as the recording did.
            status, reason, headers, body = unreachable_response(
                exchange.request.path, self._upstream_of(exchange.origin),
                exchange.error or exchange.ending.value, timeout=exchange.ending is Ending.TIMEOUT)
            await conn.answer(status, reason, headers, body)
            return
        # The origin never answered: the stored response is the 502 or 504
        # wiretape gave the agent, complete, its head sent with its body.
        own = exchange.answered_by_wiretape
        ttfb = response.frames[0].offset_ns if own and response.frames else exchange.ttfb_ns
        loop = asyncio.get_running_loop()
        start = loop.time()
        head_at, frame_at = schedule(ttfb, [f.offset_ns for f in response.frames], self._pace)
        await _sleep_until(loop, start + head_at / 1e9)
        # What is due at once goes out in one write; a pause sends what is held.
        await conn.send_head(response.status, response.reason, response.headers, more=True)
        for frame, at in zip(response.frames, frame_at, strict=True):
            if start + at / 1e9 > loop.time():
                await conn.flush()
                await _sleep_until(loop, start + at / 1e9)
            await conn.send_data(frame.data, more=True)
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


class _Shared:
    """A replay's learned state as its WebSocket sessions read and hold it
    (playback.messages.Knowledge): the same the HTTP exchanges use, so an id
    learned in a request maps the same in a message, and back. Used under
    the replayer's lock."""

    def __init__(self, replayer: Replayer) -> None:
        self._replayer = replayer

    def learned(self) -> Learned:
        learned = self._replayer.learned
        # A live clock reading lies between the replay's start and now.
        learned.live_span = (self._replayer.started_at, time.time())
        return learned

    def hold(self, learned: Learned) -> None:
        self._replayer._learned = learned


async def _sleep_until(loop: asyncio.AbstractEventLoop, when: float) -> None:
    delay = when - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)


def _where(d: MessageDecisionJSON) -> str:
    """`` at POINTER`` of a message decision's first difference (``/``: the
    whole payload), or "" when it names none."""
    spans = d.get("explanation", {}).get("spans", [])
    return f" at {spans[0]['pointer'] or '/'}" if spans and spans[0]["pointer"] is not None else ""


def _shown(live: Request, tool: str | None) -> str:
    """The live request's target, after its tool origin's URL for a tool
    request (``https://docs.example.com/page``)."""
    target = live.target.decode("latin-1")
    return target if tool is None else tool.removeprefix(TOOL_ORIGIN_PREFIX) + target


def _reason(decision: Decision, live: Request, tool: str | None = None) -> str:
    route = f"{live.method.decode()} {_shown(live, tool)}"
    if decision.kind is Kind.MISSING:
        what = "tool exchange" if tool is not None else "exchange"
        return f"wiretape replay: no recorded {what} left for {route} (missing)"
    fields = ", ".join(decision.comparison.fields)
    verb = "differs" if len(decision.comparison.fields) == 1 else "differ"
    return (f"wiretape replay: {route} does not match recorded exchange #{decision.seq} "
            f"({decision.kind.value}: {fields} {verb})")
