"""HAR 1.2 (w3c.github.io/web-performance/specs/HAR/Overview.html) out of
a run and back into one.

Export: one entry per exchange, bodies verbatim (``text`` when the bytes
are UTF-8, else base64 with ``encoding: "base64"``, compressed bodies
included), headers in wire order with their redacted values, ``timings``
from the time to first byte and the duration, and the frame timing in a
``_frames`` field (offset in ns and size of each frame). Both
``httpVersion`` fields are the version the client spoke (an agent served
HTTP/2 got its response over HTTP/2, whatever the origin leg spoke); the
origin leg's is ``_wiretape.response_http_version``. What HAR has no
field for (sequence, origin, raw target, how the exchange ended, the run's
metadata and redaction facts) goes in ``_wiretape`` members, so our own
export imports back into an equal run.

Import: our own export exactly; any other HAR (a browser's developer tools)
with origins named from the URLs, HTTP/2 pseudo-headers dropped, SSE bodies
cut into one frame per event, and the repairs of ``interop`` noted.
Knows nothing of the CLI.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypedDict, cast

from wiretape import __version__
from wiretape.errors import UsageError
from wiretape.inspect import interop
from wiretape.matching.documents import decoded_body
from wiretape.model import (
    MCP_ORIGIN_PREFIX,
    TOOL_ORIGIN_PREFIX,
    Ending,
    Exchange,
    Frame,
    Headers,
    Message,
    Opcode,
    Origin,
    Redaction,
    Request,
    Response,
    RunInfo,
    exchange_kind,
    header_value,
)
from wiretape.origins import parse_upstream
from wiretape.redaction import is_credential_name, redact_json

_NO_TIMING = {"blocked": -1, "dns": -1, "connect": -1, "ssl": -1}

#: An object of a HAR file being imported: untrusted JSON (Any), its
#: members checked where they are read; a member of the wrong type raises
#: TypeError, ValueError or KeyError, which import_har reports as a file it
#: cannot read.
_Untrusted = dict[str, Any]


class HarLogJSON(TypedDict):
    """The ``log`` of an exported HAR: HAR 1.2's members (an entry is a
    JSON object, see ``_entry``), and ``_wiretape``, the run's metadata."""

    version: str
    creator: dict[str, str]
    pages: list[object]
    entries: list[dict[str, object]]
    comment: str
    _wiretape: dict[str, object]


class HarJSON(TypedDict):
    log: HarLogJSON


def _iso(ns: int) -> str:
    moment = dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _headers(headers: Headers) -> list[dict[str, str]]:
    return [{"name": k.decode("latin-1"), "value": v.decode("latin-1")} for k, v in headers]


def _body(data: bytes) -> dict[str, str]:
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"text": base64.b64encode(data).decode("ascii"), "encoding": "base64"}


def _mime(headers: Headers) -> str:
    return (header_value(headers, b"content-type") or b"").decode("latin-1")


def _ms(ns: int | None) -> float:
    return round((ns or 0) / 1e6, 3)


def _unknown_base(origin: str) -> str:
    """The URL base of an origin the run's table lacks: a stdio MCP
    session's is ``mcp://NAME/`` (no HTTP URL stands for it); a tool
    exchange's origin names its URL's scheme and host (``--tools``)."""
    if exchange_kind(origin) == "mcp":
        return f"mcp://{origin.removeprefix(MCP_ORIGIN_PREFIX)}/"
    if exchange_kind(origin) == "tool":
        return origin.removeprefix(TOOL_ORIGIN_PREFIX)
    return "http://unknown"


def _entry(e: Exchange, bases: dict[str, str], redactions: list[Redaction]) -> dict[str, object]:
    req, resp = e.request, e.response
    target = req.target.decode("latin-1")
    query = target.split("?", 1)[1] if "?" in target else ""
    post = {"mimeType": _mime(req.headers), **_body(req.body)}
    if "encoding" in post:  # HAR 1.2 postData has no encoding field; ours is marked
        post["_encoding"] = post.pop("encoding")
    entry: dict[str, object] = {
        "startedDateTime": _iso(e.started_at_ns),
        "time": _ms(e.duration_ns),
        "request": {
            "method": req.method.decode("latin-1"),
            # (a tool exchange's origin names its URL's scheme and host: --tools)
            "url": bases.get(e.origin, _unknown_base(e.origin)) + target,
            "httpVersion": "HTTP/" + req.http_version.decode("latin-1"),
            "cookies": [],
            "headers": _headers(req.headers),
            "queryString": [
                {"name": k, "value": v}
                for k, _, v in (p.partition("=") for p in query.split("&") if p)
            ],
            "postData": post,
            "headersSize": -1,
            "bodySize": len(req.body),
        },
        "cache": {},
        "timings": {
            **_NO_TIMING,
            "send": 0,
            "wait": _ms(e.ttfb_ns if e.ttfb_ns is not None else e.duration_ns),
            "receive": _ms(e.duration_ns - (e.ttfb_ns or e.duration_ns)),
        },
        "connection": str(e.connection_id),
        "_frames": [{"offset_ns": f.offset_ns, "size": len(f.data)} for f in resp.frames]
        if resp
        else [],
        "_wiretape": {
            "seq": e.seq,
            "origin": e.origin,
            "target": target,
            "started_at_ns": e.started_at_ns,
            "ttfb_ns": e.ttfb_ns,
            "duration_ns": e.duration_ns,
            "ending": e.ending.value,
            "error": e.error,
            "connection_id": e.connection_id,
            "request_http_version": req.http_version.decode("latin-1"),
            "response_http_version": resp.http_version.decode("latin-1") if resp else None,
            "response": resp is not None,
            "redactions": [[r.location, r.name, r.fingerprint] for r in redactions],
        },
    }
    if e.messages:
        # As Chrome writes a WebSocket's messages into a HAR.
        entry["_resourceType"] = "websocket"
        entry["_webSocketMessages"] = [_ws_message(m, e.started_at_ns) for m in e.messages]
    if resp is None:
        entry["response"] = {"status": 0, "statusText": "", "httpVersion": "", "cookies": [],
                             "headers": [], "content": {"size": 0, "mimeType": ""},
                             "redirectURL": "", "headersSize": -1, "bodySize": -1,
                             "_error": e.error or e.ending.value}
        return entry
    decoded = decoded_body(resp)
    content: dict[str, object] = {"size": len(decoded) if decoded is not None else len(resp.body),
                               "mimeType": _mime(resp.headers), **_body(resp.body)}
    if decoded is not None and len(decoded) != len(resp.body):
        content["compression"] = len(decoded) - len(resp.body)
    entry["response"] = {
        "status": resp.status, "statusText": resp.reason.decode("latin-1"),
        # the version on the wire the client read it from: its own request's
        # (the origin leg's is _wiretape.response_http_version)
        "httpVersion": "HTTP/" + req.http_version.decode("latin-1"), "cookies": [],
        "headers": _headers(resp.headers), "content": content,
        "redirectURL": (header_value(resp.headers, b"location") or b"").decode("latin-1"),
        "headersSize": -1, "bodySize": len(resp.body),
    }
    return entry


#: RFC 6455 §11.8 opcodes, as Chrome's ``_webSocketMessages`` give them.
_WS_OPCODES = {Opcode.TEXT: 1, Opcode.BINARY: 2, Opcode.CLOSE: 8, Opcode.PING: 9,
               Opcode.PONG: 10}


def _ws_message(m: Message, started_at_ns: int) -> dict[str, object]:
    """A WebSocket message as Chrome's HAR has it: ``type`` send (client)
    or receive, ``time`` in epoch seconds, ``opcode``, ``data`` (binary
    payloads in base64, as Chrome writes them); a close's code besides."""
    if m.opcode is Opcode.BINARY:
        data = base64.b64encode(m.payload).decode("ascii")
    else:
        data = m.payload.decode("utf-8", "replace")
    out: dict[str, object] = {"type": "send" if m.direction == "client" else "receive",
                              "time": (started_at_ns + m.offset_ns) / 1e9,
                              "opcode": _WS_OPCODES[m.opcode], "data": data,
                              "_offset_ns": m.offset_ns}
    if m.opcode is Opcode.CLOSE:
        out["_closeCode"] = m.close_code
    return out


#: The largest offset (ns) a message may have: a signed 64-bit column.
_MAX_OFFSET_NS = (1 << 63) - 1
_OPCODE_NAMES = ", ".join(f"{code} {op.value}" for op, code in _WS_OPCODES.items())
_LEFT_OUT = "the message was left out (fix it in the HAR and import again to keep it)"


def _ws_messages(value: object, started_at_ns: int, where: str,
                 notes: list[str]) -> tuple[Message, ...]:
    """The ``_webSocketMessages`` of an entry (Chrome's, or ours with their
    exact offsets) as messages. Untrusted: each thing wrong is one note in
    ``notes`` naming ``where`` (the entry) and the message's index, and
    what was done: a message that cannot be read as one (not an object, an
    opcode RFC 6455 §11.8 does not name, a ``type`` other than send or
    receive, data that is not text, binary data that is not base64) is left
    out; ``data: null`` is an empty payload; a time that is not a number of
    seconds since the epoch places the message at the previous one's
    offset; a close code RFC 6455 §7.4 does not allow is dropped."""
    if value is None:
        return ()
    if not isinstance(value, list):
        notes.append(f"{where}: its _webSocketMessages is {_json_kind(value)}, not a list of "
                     "messages; no message of this session was imported (fix it in the HAR "
                     "and import again to keep them)")
        return ()
    by_code = {code: op for op, code in _WS_OPCODES.items()}
    out: list[Message] = []
    for i, item in enumerate(value):
        here = f"{where}, WebSocket message {i}"
        if not isinstance(item, dict):
            notes.append(f"{here}: it is {_json_kind(item)}, not an object; {_LEFT_OUT}")
            continue
        m: _Untrusted = item
        code = m.get("opcode", 1)
        op = by_code.get(code) if type(code) is int else None
        if op is None:
            notes.append(f"{here}: its opcode {_shown(code)} is not one RFC 6455 names "
                         f"({_OPCODE_NAMES}); {_LEFT_OUT}")
            continue
        kind = m.get("type")
        if kind not in ("send", "receive"):
            notes.append(f"{here}: its type {_shown(kind)} is neither send (client to "
                         f"server) nor receive; {_LEFT_OUT}")
            continue
        raw = m.get("data")
        if raw is None:
            if "data" in m:
                notes.append(f"{here}: its data is null; imported as an empty payload")
            raw = ""
        if not isinstance(raw, str):
            notes.append(f"{here}: its data is {_json_kind(raw)}, not text; {_LEFT_OUT}")
            continue
        try:
            payload = (base64.b64decode(raw, validate=True) if op is Opcode.BINARY
                       else raw.encode("utf-8"))
        except UnicodeEncodeError:
            notes.append(f"{here}: its data holds a lone surrogate (a \\u escape that is not "
                         f"a character), which is not UTF-8 text; {_LEFT_OUT}")
            continue
        except (binascii.Error, ValueError):
            notes.append(f"{here}: it is binary (opcode 2) but its data is not base64; "
                         f"{_LEFT_OUT}")
            continue
        offset = m.get("_offset_ns")
        if type(offset) is not int or not 0 <= offset <= _MAX_OFFSET_NS:
            offset = _offset(m.get("time"), started_at_ns)
            if offset is None:
                offset = out[-1].offset_ns if out else 0
                notes.append(f"{here}: its time {_shown(m.get('time'))} is not a number of "
                             "seconds since the epoch; imported at the previous message's "
                             "time")
        close = m.get("_closeCode")
        if close is not None and (type(close) is not int or not 1000 <= close <= 4999):
            notes.append(f"{here}: its close code {_shown(close)} is not one RFC 6455 allows "
                         "(1000 to 4999); imported with no code")
            close = None
        out.append(Message("client" if kind == "send" else "server", op, payload, offset,
                           close if op is Opcode.CLOSE else None))
    return tuple(out)


def _offset(time: object, started_at_ns: int) -> int | None:
    """A Chrome message ``time`` (epoch seconds) as ns from the session's
    start (0 when before it); None when it is not a finite number that fits."""
    if type(time) not in (int, float):
        return None
    ns = float(cast(float, time)) * 1e9
    if not 0 <= ns <= _MAX_OFFSET_NS:  # (NaN is neither)
        return None
    return min(_MAX_OFFSET_NS, max(0, int(ns) - started_at_ns))


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _shown(value: object) -> str:
    """A JSON value as a note quotes it: short, one line."""
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 40 else text[:37] + "..."


def export_har(info: RunInfo, exchanges: Iterator[Exchange],
               redactions: Sequence[tuple[int | None, Redaction]],
               advance: Callable[[], None] = lambda: None) -> HarJSON:
    """The run as a HAR 1.2 log (a JSON value)."""
    bases = {o.name: parse_upstream(o.upstream)[0] for o in info.origins}
    by_seq: dict[int | None, list[Redaction]] = {}
    for seq, r in redactions:
        by_seq.setdefault(seq, []).append(r)
    entries = []
    for e in exchanges:
        entries.append(_entry(e, bases, by_seq.get(e.seq, [])))
        advance()
    har: HarJSON = {"log": {
        "version": "1.2", "creator": {"name": "wiretape", "version": __version__},
        "pages": [], "entries": entries,
        "comment": f"wiretape run {info.run_id}; bodies verbatim, secrets redacted",
        "_wiretape": {
            "run_id": info.run_id, "wiretape_version": info.wiretape_version,
            "argv": list(info.argv), "cwd": info.cwd, "env_names": list(info.env_names),
            "credential_env": list(info.credential_env),
            "origins": [[o.name, o.upstream, o.port, list(o.env_vars)] for o in info.origins],
            "started_at_ns": info.started_at_ns, "ended_at_ns": info.ended_at_ns,
            "exit_status": info.exit_status, "stdout": info.stdout.decode("latin-1"),
            "stderr": info.stderr.decode("latin-1"), "mode": info.mode, "extra": info.extra,
            "run_redactions": [[r.location, r.name, r.fingerprint] for r in by_seq.get(None, [])],
        },
    }}
    # The key shapes are masked even in a run recorded before they were
    # redacted everywhere (a body coded with gzip is base64 here: a run
    # recorded now has none left in it; `wiretape scan` finds old ones).
    return cast(HarJSON, redact_json(har, "har"))


# -- import ------------------------------------------------------------------


class _Bad(Exception):
    pass


def _obj(value: object, what: str) -> _Untrusted:
    if not isinstance(value, dict):
        raise _Bad(f"{what} is not an object")
    return value


def _text(value: object, encoding: object) -> bytes:
    if value is None:
        return b""
    if not isinstance(value, str):
        raise _Bad("a body text is not a string")
    if encoding == "base64":
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise _Bad(f"a base64 body does not decode: {exc}") from exc
    return value.encode("utf-8", "surrogateescape")


def _pairs(items: object) -> Headers:
    out = []
    for h in items if isinstance(items, list) else ():
        h = _obj(h, "a header")
        name, value = str(h.get("name", "")), str(h.get("value", ""))
        if name and not name.startswith(":"):  # HTTP/2 pseudo-headers are not fields
            out.append((name.encode("latin-1", "replace"), value.encode("latin-1", "replace")))
    return tuple(out)


def _ns(ms: object) -> int:
    return int(float(ms) * 1e6) if isinstance(ms, (int, float)) and ms >= 0 else 0


def _started(value: object) -> int:
    try:
        moment = dt.datetime.fromisoformat(str(value))
    except ValueError:
        return 0
    return interop.epoch_ns(moment)


def _exchange(n: int, entry: _Untrusted, origins: dict[str, Origin],
              notes: list[str]) -> tuple[Exchange, list[Redaction]]:
    ours = entry.get("_wiretape") if isinstance(entry.get("_wiretape"), dict) else None
    req = _obj(entry.get("request"), f"entry {n}'s request")
    resp = _obj(entry.get("response"), f"entry {n}'s response")
    base, _, target = interop.split_url(str(req.get("url", "")))
    post: _Untrusted = req["postData"] if isinstance(req.get("postData"), dict) else {}
    request = Request(
        str(req.get("method", "GET")).encode("latin-1"),
        (ours["target"] if ours else target).encode("latin-1"), _pairs(req.get("headers")),
        _text(post.get("text"), post.get("_encoding", post.get("encoding"))),
        (ours or {}).get("request_http_version", "1.1").encode("latin-1"))
    timings: _Untrusted = entry["timings"] if isinstance(entry.get("timings"), dict) else {}
    duration = ours["duration_ns"] if ours else _ns(entry.get("time"))
    ttfb = ours["ttfb_ns"] if ours else _ns(timings.get("send", 0)) + _ns(timings.get("wait"))
    response = None
    if (ours["response"] if ours else resp.get("status", 0)):
        content: _Untrusted = resp["content"] if isinstance(resp.get("content"), dict) else {}
        body = _text(content.get("text"), content.get("encoding"))
        version = str((ours or {}).get("response_http_version") or resp.get("httpVersion")
                      or "HTTP/1.1").removeprefix("HTTP/")
        response = Response(int(resp.get("status", 0)), str(resp.get("statusText", "")).encode(
            "latin-1", "replace"), _pairs(resp.get("headers")), (), version.encode("latin-1"))
        sizes = entry.get("_frames")
        if isinstance(sizes, list) and sum(int(f.get("size", 0)) for f in sizes) == len(body):
            frames, pos = [], 0
            for f in sizes:
                frames.append(Frame(int(f.get("offset_ns", 0)), body[pos:pos + int(f["size"])]))
                pos += int(f["size"])
            response = Response(response.status, response.reason, response.headers,
                                tuple(frames), response.http_version)
        else:
            response = Response(response.status, response.reason, response.headers,
                                interop.sse_frames(body, ttfb), response.http_version)
        if not ours:
            if "text" not in content and content.get("size"):
                notes.append(f"entry {n}: the HAR holds no response body")
            response, fixed = interop.repair_response(response, f"entry {n}")
            notes.extend(fixed)
    if ours:
        facts = [Redaction(*r) for r in ours.get("redactions", [])]
        return Exchange(ours["seq"], ours["connection_id"], ours["origin"], ours["started_at_ns"],
                        request, response, Ending(ours["ending"]), ttfb, duration,
                        ours.get("error"),
                        _ws_messages(entry.get("_webSocketMessages"),
                                     ours["started_at_ns"], f"entry {n}", notes)), facts
    conn = str(entry.get("connection", ""))
    started = _started(entry.get("startedDateTime"))
    return Exchange(n, int(conn) if conn.isdigit() else n, origins[base].name,
                    started, request, response,
                    Ending.COMPLETE if response else Ending.ORIGIN_UNREACHABLE,
                    ttfb if response else None, duration, None,
                    _ws_messages(entry.get("_webSocketMessages"), started, f"entry {n}",
                                 notes)), []


def _info(log: _Untrusted, origins: dict[str, Origin], source: str,
          entries: list[_Untrusted]) -> RunInfo:
    meta = log.get("_wiretape")
    if not isinstance(meta, dict):
        starts = [t for t in (_started(e.get("startedDateTime")) for e in entries) if t]
        return interop.new_info(source, list(origins.values()), min(starts, default=0))
    extra = {**meta.get("extra", {}), "imported_from": source,
             "source_run_id": str(meta.get("run_id", ""))}
    return RunInfo(
        run_id="", wiretape_version=meta.get("wiretape_version", "?"), argv=tuple(meta["argv"]),
        cwd=meta["cwd"], env_names=tuple(meta["env_names"]),
        origins=tuple(Origin(n, u, p, tuple(v)) for n, u, p, v in meta["origins"]),
        started_at_ns=meta["started_at_ns"], ended_at_ns=meta.get("ended_at_ns"),
        exit_status=meta.get("exit_status"), stdout=meta.get("stdout", "").encode("latin-1"),
        stderr=meta.get("stderr", "").encode("latin-1"), mode=meta.get("mode", "record"),
        extra=extra, credential_env=tuple(
            n for n in meta.get("credential_env", ()) if isinstance(n, str)
            and is_credential_name(n)))


def import_har(source: Path, out: Path | None,
               advance: Callable[[], None] = lambda: None,
               on_total: Callable[[int], None] = lambda n: None) -> interop.Imported:
    """Read the HAR file at ``source`` into a new run. Raises UsageError."""
    try:
        data = json.loads(source.read_bytes())
        log = _obj(_obj(data, "the file").get("log"), "log")
        entries = [_obj(e, "an entry") for e in log.get("entries", [])]
        on_total(len(entries))
        bases = [(interop.split_url(str(_obj(e.get("request"), "a request").get("url", "")))[0],
                  interop.split_url(str(e["request"].get("url", "")))[2]) for e in entries]
        origins = interop.plan_origins(bases)
        info = _info(log, origins, f"har:{source.name}", entries)
        notes: list[str] = []
        exchanges = [_exchange(n, e, origins, notes) for n, e in enumerate(entries)]
    except OSError as exc:
        raise UsageError(f"cannot read HAR file {source}: {exc.strerror or exc}") from exc
    except (ValueError, KeyError, TypeError, _Bad) as exc:
        raise UsageError(f"{source} is not a HAR 1.2 file wiretape can read: {exc}") from exc
    return interop.write_run(exchanges, info, out, notes, advance)
