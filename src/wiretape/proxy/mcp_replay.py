"""Replaying a stdio MCP session to ``wiretape mcp`` (DESIGN.md, "MCP
servers"): no server is started; each client line the shim sends is
decided by ``playback.messages`` (in order, as a WebSocket session's
messages are) and the server lines recorded after its counterpart are sent
back for the shim to write, paced as recorded or at once (``fast``).

A JSON-RPC request's ``id`` (JSON-RPC 2.0 §4) is the client's
bookkeeping: when a live request's id differs from its recording's, the
live id is read as the recorded one for the comparison (the pair is noted
in the decision as ``rpc_id``), and the recorded responses carrying the
recorded id are sent with the live one (a correspondence held for the
session).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from wiretape.model import JSONValue, Message, Opcode
from wiretape.playback.messages import SessionScript, Step, message_label
from wiretape.playback.pacing import Pace
from wiretape.proxy import mcp, ws_replay

#: Seconds a shim told that its session ends has to say so and go.
CLOSE_GRACE = 2.0

#: Redacts a live client line as the recording was, given the recorded
#: payload it is compared with (None: there is none).
Redact = Callable[[bytes, bytes | None], bytes]


def _rpc_id(payload: bytes) -> tuple[bool, JSONValue]:
    """(has an id, the id) of a JSON-RPC message."""
    try:
        obj = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return False, None
    if isinstance(obj, dict) and "id" in obj:
        value: JSONValue = obj["id"]
        return True, value
    return False, None


def _swap_id(payload: bytes, old: JSONValue, new: JSONValue) -> bytes | None:
    """``payload`` with its top-level ``"id": old`` written as ``new``
    (every other byte kept), or None when no such member is found."""
    token = json.dumps(old).encode()
    pattern = re.compile(rb'("id"\s*:\s*)' + re.escape(token) + rb"(?=\s*[,}])")
    try:
        before = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(before, dict):
        return None
    for match in pattern.finditer(payload):  # (a nested "id" may come first)
        swapped = (payload[:match.start()] + match.group(1) + json.dumps(new).encode()
                   + payload[match.end():])
        try:
            after = json.loads(swapped)
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(after, dict) and after.get("id") == new and (
                {**after, "id": old} == before):
            return swapped
    return None


class Ids:
    """The JSON-RPC ids of one session: recorded id to live id, learned
    from the client's requests."""

    def __init__(self) -> None:
        self._live_of: dict[str, JSONValue] = {}

    def to_recorded(self, live: bytes, recorded: bytes | None,
                    decision_note: dict[str, list[JSONValue]]) -> bytes:
        """``live`` with its id read as ``recorded``'s when only that id
        would differ; the pair is learned and noted in ``decision_note``."""
        if recorded is None:
            return live
        has_live, live_id = _rpc_id(live)
        has_rec, rec_id = _rpc_id(recorded)
        if not (has_live and has_rec) or live_id == rec_id or live_id is None:
            return live
        swapped = _swap_id(live, live_id, rec_id)
        if swapped is None:
            return live
        self._live_of[json.dumps(rec_id)] = live_id
        decision_note["rpc_id"] = [rec_id, live_id]
        return swapped

    def to_live(self, payload: bytes) -> bytes:
        """A recorded server message with a learned recorded id written as
        the live one (a response to a request whose id differed)."""
        if not self._live_of:
            return payload
        has, rec_id = _rpc_id(payload)
        if not has:
            return payload
        key = json.dumps(rec_id)
        if key not in self._live_of:
            return payload
        return _swap_id(payload, rec_id, self._live_of[key]) or payload


def _as_recorded(redact: Redact, ids: Ids, note: dict[str, list[JSONValue]],
                 methods: list[str | None], payload: bytes, recorded: bytes | None) -> bytes:
    """A live client line redacted, its id read as ``recorded``'s
    (:meth:`Ids.to_recorded`, noting into ``note``); its JSON-RPC method
    appended to ``methods``. Runs under the replay's lock."""
    payload = ids.to_recorded(redact(payload, recorded), recorded, note)
    methods.append(mcp.jsonrpc_method(payload))
    return payload


async def play(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
               script: SessionScript, *, pace: Pace, redact: Redact,
               on_stop: Callable[[Step], str],
               lock: AbstractAsyncContextManager[object],
               ends_early: bool = False, exit_status: int | None = None) -> Step | None:
    """Play ``script`` to the shim on the link until its stream ends;
    ``on_stop(step)`` is called at a strict mismatch and gives the line the
    shim says; ``lock`` is held while each client line is redacted and
    decided, off the loop when it is large (``ws_replay.decide``: the
    redaction rules and the script's knowledge are the replay's). Returns
    the step that ended the session (a strict stop, a missing message), once the shim
    has gone, or None. ``ends_early``: the recorded server's output ended
    while its client was connected; once every recorded message has been
    received or sent, the shim is told to close its stdout and exit with
    ``exit_status`` (None: unknown). The decisions are in ``script`` (also when this
    task is cancelled)."""
    loop = asyncio.get_running_loop()
    ids = Ids()

    async def send(batch: tuple[int, ...], since: float) -> None:
        for index in batch:
            recorded = script.messages[index]
            if pace is Pace.RECORDED:
                delay = (since + (recorded.offset_ns - script.anchor_offset(index)) / 1e9
                         - loop.time())
                if delay > 0:
                    await asyncio.sleep(delay)
            writer.write(mcp.encode({"line": mcp.text_of(ids.to_live(recorded.payload))}))
            script.sent(index)
        await writer.drain()

    async def close_if_done() -> bool:
        if not ends_early:
            return False
        left = script.result()
        if left["unused"] or left["not_sent"]:
            return False
        await end(reader, writer, None, exit_status)
        return True

    await send(script.opening(), loop.time())
    if await close_if_done():
        return None
    while (obj := await mcp.read(reader)) is not None and "eof" not in obj:
        line = obj.get("line")
        if not isinstance(line, str):
            continue
        since = loop.time()
        note: dict[str, list[JSONValue]] = {}
        methods: list[str | None] = []
        live = Message("client", Opcode.TEXT, mcp.bytes_of(line), 0)
        step = await ws_replay.decide(
            script, live, functools.partial(_as_recorded, redact, ids, note, methods), lock)
        if "rpc_id" in note:
            step.decision["rpc_id"] = note["rpc_id"]
        if methods and methods[0] is not None:
            step.decision["method"] = methods[0]
        if step.end:
            reason = on_stop(step) if step.stop else (
                f"wiretape replay: {message_label(step.decision)} (missing: nothing recorded "
                "answers it)")
            await end(reader, writer, reason)
            return step
        await send(step.send, since)
        if await close_if_done():
            return None
    return None


async def end(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reason: str | None,
              exit_status: int | None = None) -> None:
    """Tell the shim the session ends (``reason``: the line it says; None:
    the recorded server's output ended there, the shim closes its stdout
    and exits with ``exit_status``) and give it ``CLOSE_GRACE`` seconds to
    say it and go, before the replay goes on (a strict stop ends the
    agent's process group)."""
    writer.write(mcp.encode({"end": reason} if reason is not None
                            else {"close": exit_status}))
    with contextlib.suppress(TimeoutError, ConnectionError, OSError, mcp.LinkError):
        await writer.drain()
        async with asyncio.timeout(CLOSE_GRACE):
            while await mcp.read(reader) is not None:
                pass

