"""Text for a person from the inspect views: the run timeline, the tool-call
ledger and one exchange whole. Returns lines; the CLI prints them.
Knows nothing of HTML, run files or how views are made.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from typing import Literal, NotRequired, TypedDict

import click

from wiretape.cli import render
from wiretape.cli.render import human_bytes, ms, table
from wiretape.cli.render import printable as _p
from wiretape.inspect.formats import ExchangeView, Message
from wiretape.inspect.ledger import Ledger
from wiretape.inspect.mcpcalls import McpCall, served_by
from wiretape.inspect.summary import message_summary
from wiretape.inspect.timeline import TimelineRow, excerpt, tool_url
from wiretape.model import (
    MCP_ORIGIN_PREFIX,
    TOOL_ORIGIN_PREFIX,
    Exchange,
    Headers,
    RunInfo,
    header_value,
)

#: How a line is styled: ``click.style``, or ``render.Escaped().style``.
Style = Callable[..., str]

TIMELINE_HEADER = ["seq", "at", "method", "target", "status", "model", "ttfb", "duration",
                   "frames", "bytes", "streamed", "ended", "stop", "tokens", "tool calls",
                   "excerpt"]


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def _n(count: int, noun: str) -> str:
    """``1 message``, ``3 messages``."""
    return f"{count} {noun}{'s' if count != 1 else ''}"


def _tokens(row: TimelineRow) -> str:
    if row.input_tokens is None and row.output_tokens is None:
        return "-" if row.total_tokens is None else str(row.total_tokens)
    return f"{row.input_tokens if row.input_tokens is not None else '?'}→" \
           f"{row.output_tokens if row.output_tokens is not None else '?'}"


def run_heading(info: RunInfo, path: str, exchanges: Sequence[Exchange] = ()) -> list[str]:
    """The run's identity; an imported run says where it came from; the
    hosts of its tool exchanges (``--tools``), when it has some."""
    lines = render.run_heading(info, path)
    tools = sorted({e.origin.removeprefix(TOOL_ORIGIN_PREFIX) for e in exchanges
                    if e.kind == "tool"})
    if tools:
        lines.append(f"  tool hosts (--tools): {_p(', '.join(tools))}")
    if info.mode == "import":
        lines[1] = f"  command: none (imported from {_p(info.extra.get('imported_from', '?'))}; " \
                   "replay it with the command after --)"
    return lines


def timeline_rows(rows: Sequence[TimelineRow]) -> list[list[str]]:
    return [[_p(cell) for cell in (
        str(r.seq), f"+{ms(r.offset_ns)}", r.method,
        # A tool exchange (``--tools``) is marked, and named by its whole URL.
        _clip(f"tool {tool_url(r.origin, r.target)}", 56)
        if r.origin.startswith(TOOL_ORIGIN_PREFIX) else _clip(r.target, 32),
        str(r.status) if r.status is not None else "-", _clip(r.model or "-", 26),
        ms(r.ttfb_ns), ms(r.duration_ns), str(r.frames), human_bytes(r.bytes) if r.status else "-",
        "yes" if r.streamed else "no", r.ending, r.stop_reason or "-", _tokens(r),
        ", ".join(r.tool_calls) or "-",
        ("error: " + r.error) if r.error and not r.excerpt else _clip(r.excerpt, 48) or "-",
    )] for r in rows]


def ledger_lines(ledger: Ledger, style: Style = click.style,
                 calls: Sequence[McpCall] = ()) -> list[str]:
    """The tool-call ledger; with ``calls`` (a run's MCP calls), the MCP
    call that served each tool call, next to it."""
    head = (f"tool calls: {len(ledger.entries)} ({len(ledger.completed)} completed, "
            f"{len(ledger.pending)} pending)")
    lines = [style(head, bold=True)]
    served = served_by(calls)
    if ledger.entries:
        # The tool exchanges a call made (``--tools``), when any was recorded.
        made = any(e.made for e in ledger.entries)
        rows = [[_p(cell) for cell in (
                    e.call_id, e.name, _clip(e.arguments, 40), f"#{e.issued_in}",
                    *([_clip("; ".join(e.made) or "-", 60)] if made else []),
                    e.status + (f" in #{e.answered_in}" if e.answered_in is not None else ""),
                    _clip(e.result or "-", 40))]
                + ([_p(_served_word(served.get(e.call_id)))] if calls else [])
                for e in ledger.entries]
        lines += ["  " + line for line in table(rows, [
            "call id", "tool", "arguments", "issued in", *(["made"] if made else []),
            "status", "result", *(["served by"] if calls else [])])]
    for seq, call_id, name in ledger.unmatched_results:
        lines.append(f"  result in #{seq} for {_p(call_id)} ({_p(name or '?')}): no recorded "
                     "response issued that call")
    return lines


def _served_word(call: McpCall | None) -> str:
    """``mcp notes #0 message #5``: the MCP call that served a tool call."""
    return "-" if call is None else f"mcp {call.server} #{call.seq} message #{call.message}"


def mcp_call_lines(calls: Sequence[McpCall], style: Style = click.style) -> list[str]:
    """The run's MCP calls, one row each: the session (``#SEQ``) and its
    server, the request's message, method and tool, arguments, result, and
    the model's tool call that caused it."""
    if not calls:
        return []
    lines = [style(f"MCP calls: {len(calls)}", bold=True)]
    rows = [[_p(cell) for cell in (
                f"#{c.seq} {c.server}", f"#{c.message}",
                c.method + (f" {c.tool}" if c.tool else ""), _clip(c.arguments, 40),
                _clip(c.answer, 40),
                c.caused_by or "-")] for c in calls]
    lines += ["  " + line for line in table(rows, ["session", "message", "method", "arguments",
                                                   "result", "for tool call"])]
    return lines


def _message_line(m: Message) -> list[str]:
    role = m.role if m.result_for is None else f"tool result {m.result_for or m.result_name or ''}"
    out = [(f"  [{_p(role)}] {_p(excerpt(m.text, 200))}") if m.text else f"  [{_p(role)}]"]
    out += [f"      → {_p(c.name)}({_p(_clip(c.arguments, 120))}) {_p(c.call_id)}"
            for c in m.tool_calls]
    return out


def exchange_lines(exchange: Exchange, view: ExchangeView, row: TimelineRow,
                   frames: bool, style: Style = click.style) -> list[str]:
    """One exchange whole; every text from the run escaped (a multi-line
    text or reasoning shown line by line)."""
    req, resp = view.request, view.response
    status = f"{row.status}" if row.status is not None else f"no response ({_p(row.ending)})"
    own = exchange.answered_by_wiretape
    if own and exchange.response is not None:
        whose = "the tool's host's" if exchange.kind == "tool" else "the provider's"
        status = f"{render.own_answer(exchange.response.status)}, not {whose}"
    lines = [style(f"exchange {row.seq}: {_p(row.method)} {_p(row.target)} -> {status}",
                   bold=True),
             (f"  origin {_p(exchange.origin)}, connection {exchange.connection_id}, started "
              f"+{ms(row.offset_ns)}, ttfb {ms(row.ttfb_ns)}, duration {ms(row.duration_ns)}, "
              f"{_n(row.frames, 'frame')}, {human_bytes(row.bytes)}, ended {_p(row.ending)}")]
    agent, origin = http_versions(exchange)
    lines.append(f"  {_p(agent)} with the agent"
                 + (f", {_p(origin)} with the origin" if origin else ""))
    if exchange.error:
        lines.append(style(f"  error: {_p(exchange.error)}", fg="red"))
    if exchange.kind == "tool":
        return lines + _tool_lines(exchange, frames, style)
    lines.append(
        style(
            f"request ({_p(req.format)}): model {_p(req.model or '-')}"
            f"{', streamed' if req.streamed else ''}, "
            f"{_n(len(req.messages), 'message')}"
            + (f", tools: {_p(', '.join(req.tools))}" if req.tools else "")
            + (f", {_n(req.inputs, 'input')}" if req.inputs is not None else ""),
            bold=True,
        )
    )
    if req.system:
        lines.append(f"  [system] {_p(excerpt(req.system, 200))}")
    for m in req.messages:
        lines += _message_line(m)
    lines += [f"  note: {_p(n)}" for n in req.notes]
    if resp is None:
        return lines
    usage = resp.usage
    tokens = (f", tokens {usage.input_tokens} in / {usage.output_tokens} out / {usage.total} total"
              if usage else "")
    lines.append(style(
        f"{'answer made by wiretape' if own else 'response'} "
        f"({_p(resp.format)}{', streamed' if resp.streamed else ''}, "
        f"{_n(resp.events, 'event')}): model {_p(resp.model or '-')}, "
        f"stop {_p(resp.stop_reason or '-')}{tokens}",
        bold=True))
    if resp.reasoning:
        lines.append("  reasoning:")
        lines += ["    " + _p(line, keep="\t") for line in resp.reasoning.splitlines()]
    if resp.text:
        lines.append("  text:")
        lines += ["    " + _p(line, keep="\t") for line in resp.text.splitlines()]
    if resp.vectors is not None:
        lines.append(f"  {_n(resp.vectors, 'vector')} of {resp.dimensions} dimensions")
    for c in resp.tool_calls:
        lines.append(f"  tool call {_p(c.call_id or '(no id)')}: {_p(c.name)}({_p(c.arguments)})"
                     + (f" [{_p(c.kind)}]" if c.kind != "function" else ""))
    for e in resp.errors:
        lines.append(style(f"  error{' (in-band)' if e.in_band else ''}"
                           f"{' ' + _p(e.type) if e.type else ''}: {_p(e.message)}", fg="red"))
    if resp.unknown_events:
        lines.append("  unknown events: " + ", ".join(f"{_p(n)} ×{c}"
                                                      for n, c in resp.unknown_events))
    lines += [f"  note: {_p(n)}" for n in resp.notes]
    lines += websocket_lines(exchange, style=style)
    if frames and exchange.response is not None:
        lines.append(style(f"frames ({len(exchange.response.frames)}):", bold=True))
        for i, f in enumerate(exchange.response.frames):
            lines.append(f"  #{i} +{f.offset_ns / 1e6:.1f} ms {len(f.data)} B "
                         f"{_p(repr(f.data.decode('utf-8', 'backslashreplace')))}")
    return lines


#: Bytes of a tool exchange's body shown by ``show --exchange``.
_BODY_SHOWN = 600


def _body_lines(body: bytes, headers: Headers) -> list[str]:
    """A body's size and first bytes, as text (its coding named, not undone)."""
    if not body:
        return ["  body: none"]
    coding = header_value(headers, b"content-encoding")
    said = f" ({_p(coding.decode('latin-1'))}-coded)" if coding else ""
    text = body[:_BODY_SHOWN].decode("utf-8", "replace")
    more = f" … ({human_bytes(len(body) - _BODY_SHOWN)} more)" if len(body) > _BODY_SHOWN else ""
    return [f"  body{said}, {human_bytes(len(body))}:"] + [
        "    " + _p(line, keep="\t") for line in text.splitlines()] + (
        [f"    {more.strip()}"] if more else [])


def _tool_lines(exchange: Exchange, frames: bool, style: Style) -> list[str]:
    """A tool exchange (``--tools``): its request's method, URL, headers
    and body, and its response's status, headers and body; no model
    fields."""
    req = exchange.request
    url = tool_url(exchange.origin, req.target.decode("latin-1"))
    lines = [style(f"request: {_p(req.method.decode('latin-1'))} {_p(url)}", bold=True)]
    lines += [f"  {_p(k.decode('latin-1'))}: {_p(v.decode('latin-1'))}" for k, v in req.headers]
    lines += _body_lines(req.body, req.headers)
    resp = exchange.response
    if resp is None:
        return lines
    own = "answer made by wiretape: " if exchange.answered_by_wiretape else "response: "
    lines.append(style(f"{own}{resp.status} {_p(resp.reason.decode('latin-1'))}", bold=True))
    lines += [f"  {_p(k.decode('latin-1'))}: {_p(v.decode('latin-1'))}" for k, v in resp.headers]
    lines += _body_lines(b"".join(f.data for f in resp.frames), resp.headers)
    if frames:
        lines.append(style(f"frames ({len(resp.frames)}):", bold=True))
        for i, f in enumerate(resp.frames):
            lines.append(f"  #{i} +{f.offset_ns / 1e6:.1f} ms {len(f.data)} B "
                         f"{_p(repr(f.data.decode('utf-8', 'backslashreplace')))}")
    return lines


def http_versions(exchange: Exchange) -> tuple[str, str | None]:
    """The HTTP versions of an exchange's two legs, as ``HTTP/2``: the one
    the agent spoke (its request, and the response as it got it), and the
    one the origin answered in (None when the origin gave no response:
    none, or one wiretape made)."""
    origin = None
    if exchange.response is not None and not exchange.answered_by_wiretape:
        origin = "HTTP/" + exchange.response.http_version.decode("latin-1")
    return "HTTP/" + exchange.request.http_version.decode("latin-1"), origin


def websocket_lines(exchange: Exchange, limit: int | None = None,
                    style: Style = click.style) -> list[str]:
    """A WebSocket session's messages, one line each: index, offset,
    direction, opcode, size and the first bytes (at most ``limit`` lines,
    then how many more); none for an exchange without messages."""
    messages = exchange.messages
    if not messages:
        return []
    sent = sum(m.direction == "client" for m in messages)
    what = "WebSocket session"
    if exchange.kind == "mcp":
        what = f"MCP session of server {exchange.origin.removeprefix(MCP_ORIGIN_PREFIX)!r}"
    lines = [style(f"exchange {exchange.seq}: {what}, {_n(len(messages), 'message')} "
                   f"({sent} from the client, {len(messages) - sent} from the server)",
                   bold=True)]
    shown = messages if limit is None else messages[:limit]
    for i, m in enumerate(shown):
        s = message_summary(m, 80)
        lines.append(f"  #{i} +{m.offset_ns / 1e6:.1f} ms {s.direction} {s.opcode} "
                     f"{human_bytes(s.size)}" + (f" {_p(s.head)}" if s.head else ""))
    if len(shown) < len(messages):
        lines.append(f"  ... and {len(messages) - len(shown)} more "
                     f"(wiretape show RUN --exchange {exchange.seq})")
    return lines


class MessageJSON(TypedDict):
    """A WebSocket message in ``show --exchange N --json``: its payload as
    ``text`` when UTF-8, else as ``base64``."""

    direction: str
    opcode: str
    offset_ns: int
    size: int
    close_code: int | None
    text: NotRequired[str]
    base64: NotRequired[str]


def _text_or_base64(data: bytes) -> tuple[Literal["text", "base64"], str]:
    """``data`` as JSON carries it: its text when UTF-8, else base64."""
    try:
        return "text", data.decode("utf-8")
    except UnicodeDecodeError:
        return "base64", base64.b64encode(data).decode("ascii")


def messages_json(exchange: Exchange) -> list[MessageJSON]:
    out: list[MessageJSON] = []
    for m in exchange.messages:
        item: MessageJSON = {"direction": m.direction, "opcode": m.opcode.value,
                             "offset_ns": m.offset_ns, "size": len(m.payload),
                             "close_code": m.close_code}
        key, value = _text_or_base64(m.payload)
        item[key] = value
        out.append(item)
    return out


class FrameJSON(TypedDict):
    """A frame in ``show --exchange N --frames --json``: its bytes as
    ``text`` when UTF-8, else as ``base64``."""

    offset_ns: int
    size: int
    text: NotRequired[str]
    base64: NotRequired[str]


def frames_json(exchange: Exchange) -> list[FrameJSON]:
    out: list[FrameJSON] = []
    for f in exchange.response.frames if exchange.response else ():
        frame: FrameJSON = {"offset_ns": f.offset_ns, "size": len(f.data)}
        key, value = _text_or_base64(f.data)
        frame[key] = value
        out.append(frame)
    return out

