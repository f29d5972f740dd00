"""``wiretape report``: one self-contained HTML page of a run — a summary,
the timeline as a waterfall (time to first byte, then stream, per
exchange), the tool-call ledger, the conversation, the replays with
their verdicts and divergences side by side, and the run's forks as one
comparison table (model, verify, tokens, cost).

The page references nothing outside itself: styles and the small script
are inline in ``report_template.html`` (package data), and a
Content-Security-Policy forbids loading anything else. Every value from the
run is HTML-escaped, its control characters shown as escapes (``\\x1b``,
as ``show`` prints them). Pure: values in, text out. Knows nothing of run
files or the CLI.
"""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Mapping, Sequence
from importlib import resources
from string import Template

from wiretape import __version__
from wiretape.inspect.forks import ForkSummary
from wiretape.inspect.formats import ExchangeView, Message
from wiretape.inspect.ledger import Ledger
from wiretape.inspect.mcpcalls import McpCall, served_by
from wiretape.inspect.prices import DEFAULT as DEFAULT_PRICES
from wiretape.inspect.prices import PriceTable, cost_text
from wiretape.inspect.summary import message_summary
from wiretape.inspect.timeline import TimelineRow, tool_url
from wiretape.model import (
    COMPARED_FACETS,
    MCP_ORIGIN_PREFIX,
    TOOL_ORIGIN_PREFIX,
    ReplayRow,
    RunInfo,
    exchange_kind,
    facets,
)
from wiretape.model import Message as WsMessage
from wiretape.playback.messages import message_label
from wiretape.playback.text import row_label
from wiretape.playback.verdict import Verdict
from wiretape.printable import printable
from wiretape.redaction import redact_str

#: Characters of a request message shown before the rest folds away.
FOLD = 600

#: Bytes of a WebSocket message's payload shown in its tick's title.
TICK_BYTES = 80


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _ms(ns: int | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.0f} ms"


def _when(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9).strftime("%Y-%m-%d %H:%M:%S") if ns else "-"


def _count(name: str, label: str, value: object) -> str:
    return f'<div class="count"><b data-count="{_e(name)}">{_e(value)}</b>{_e(label)}</div>'


def _text_block(text: str, fold: int | None = FOLD) -> str:
    if fold is None or len(text) <= fold:
        return f"<pre>{_e(text)}</pre>"
    return (f"<pre>{_e(text[:fold])}…</pre><details><summary>all {len(text)} characters"
            f"</summary><pre>{_e(text)}</pre></details>")


def summary(info: RunInfo, path: str, rows: Sequence[TimelineRow], ledger: Ledger,
            verdicts: Sequence[Verdict]) -> str:
    tokens = sum(r.total_tokens or 0 for r in rows)
    argv = " ".join(info.argv) or f"({info.mode})"
    latest = ""
    if verdicts:
        v = verdicts[-1]
        latest = f' <span class="badge {"pass" if v.passed else "fail"}">latest replay ' \
                 f'{"PASS" if v.passed else "FAIL"}</span>'
    return (f"<h1>wiretape run <span class=\"mono\">{_e(info.run_id)}</span>{latest}</h1>"
            f'<div class="muted mono">{_e(argv)}</div>'
            f'<div class="muted">{_e(path)} · cwd {_e(info.cwd)} · started '
            f"{_e(_when(info.started_at_ns))} · exit status {_e(info.exit_status)}</div>"
            '<div class="counts">'
            + _count("exchanges", "exchanges", len(rows))
            + _count("tool-calls", "tool calls", len(ledger.entries))
            + _count("completed", "completed", len(ledger.completed))
            + _count("pending", "pending", len(ledger.pending))
            + _count("tokens", "tokens", tokens)
            + _count("replays", "replays", len(verdicts))
            + "</div>")


def _ticks(r: TimelineRow, messages: Sequence[WsMessage], first: int, span: int) -> str:
    """A WebSocket session's messages as ticks on its bar: each at its
    offset (from the handshake's start, ns) on the waterfall's scale, its
    class the direction (``wf-msg client``: agent to origin; ``server``),
    its title the direction, opcode (a close's code), size in bytes and
    first bytes."""
    out = []
    for i, m in enumerate(messages):
        left = min(max(100 * (r.offset_ns - first + m.offset_ns) / span, 0.0), 100.0)
        s = message_summary(m, TICK_BYTES)
        title = (f"#{r.seq} message {i} at +{_ms(m.offset_ns)}: {s.direction} {s.opcode}, "
                 f"{s.size} B{': ' if s.head else ''}{s.head}")
        out.append(f'<span class="wf-msg {"client" if m.direction == "client" else "server"}" '
                   f'data-msg="{i}" style="left:{left:.3f}%" title="{_e(title)}"></span>')
    return "".join(out)


def waterfall(rows: Sequence[TimelineRow],
              sessions: Mapping[int, Sequence[WsMessage]] | None = None) -> str:
    """Bars from the first request to the last byte: the agent's own start-up
    before its first request is left out of the scale and stated apart.
    ``sessions``: the WebSocket messages by exchange seq, each drawn as a
    tick on its session's bar (:func:`_ticks`)."""
    if not rows:
        return '<p class="muted">No exchange was recorded.</p>'
    first = min(r.offset_ns for r in rows)
    span = max(max(r.offset_ns + r.duration_ns for r in rows) - first, 1)
    sessions = sessions or {}
    marked = any(sessions.get(r.seq) for r in rows)
    out = [(f'<div class="legend muted">first request at +{_e(_ms(first))}; each row: '
            '<span style="background:#b7c6e5"></span>waiting for the first byte'
            '<span style="background:#3563c9"></span>streaming'
            + ('; a WebSocket message: <span class="wf-key client"></span>from the client'
               '<span class="wf-key server"></span>from the server' if marked else "")
            + "</div>")]
    for r in rows:
        ttfb = r.ttfb_ns if r.ttfb_ns is not None else r.duration_ns
        left, wait = 100 * (r.offset_ns - first) / span, 100 * ttfb / span
        stream = 100 * max(r.duration_ns - ttfb, 0) / span
        label = f"#{r.seq} {r.model or _request_of(r)}"
        title = (f"#{r.seq} {_request_of(r)}: starts +{_ms(r.offset_ns)}, first byte after "
                 f"{_ms(r.ttfb_ns)}, done after {_ms(r.duration_ns)}, {r.frames} frames")
        out.append(
            f'<div class="wf-row link" data-goto="{r.seq}" data-seq="{r.seq}" title="{_e(title)}">'
            f'<div class="mono">{_e(label[:34])}</div><div class="wf-track">'
            f'<div class="wf-wait" style="left:{left:.3f}%;width:{wait:.3f}%"></div>'
            f'<div class="wf-stream" style="left:{left + wait:.3f}%;width:{stream:.3f}%"></div>'
            f'{_ticks(r, sessions.get(r.seq, ()), first, span)}</div>'
            f'<div class="muted">{_e(_ms(r.ttfb_ns))} · {_e(_ms(r.duration_ns))} · '
            f"{_e(r.stop_reason or r.status or r.ending)}</div></div>")
    ticks = "".join(f"<span>+{_e(_ms(first + span * k // 4))}</span>" for k in range(5))
    out.append(
        f'<div class="wf-axis"><div></div><div class="wf-ticks">{ticks}</div><div></div></div>'
    )
    return "\n".join(out)


def ledger_table(ledger: Ledger, calls: Sequence[McpCall] = ()) -> str:
    """The tool-call ledger; with ``calls``, the MCP call that served each
    tool call next to it, and a table of the MCP calls."""
    if not ledger.entries and not calls:
        return '<p class="muted">The model asked for no tool call.</p>'
    served = served_by(calls)
    # The tool exchanges each call made (``--tools``), when any was recorded.
    made = any(e.made for e in ledger.entries)
    head = ("<table><thead><tr><th>call id</th><th>tool</th><th>arguments</th><th>issued in</th>"
            + ("<th>tool exchanges</th>" if made else "")
            + "<th>status</th><th>result</th>" + ("<th>served by</th>" if calls else "")
            + "</tr></thead><tbody>")
    body = []
    for e in ledger.entries:
        answered = f" in #{e.answered_in}" if e.answered_in is not None else ""
        cell = ('<td class="mono">' + "<br>".join(_e(m) for m in e.made) + "</td>"
                if made else "")
        by = served.get(e.call_id)
        by_cell = ("" if not calls else "<td>-</td>" if by is None else
                   f'<td class="mono" data-mcp="{by.seq}:{by.message}">MCP {_e(by.server)} '
                   f"#{by.seq} message #{by.message}</td>")
        body.append(
            f'<tr class="link" data-goto="{e.issued_in}" data-call="{_e(e.call_id)}">'
            f'<td class="mono">{_e(e.call_id)}</td><td class="mono">{_e(e.name)}</td>'
            f'<td class="mono">{_e(e.arguments[:300])}</td><td>#{e.issued_in}</td>{cell}'
            f'<td><span class="badge {e.status}">{e.status}</span>{_e(answered)}</td>'
            f'<td>{_e(e.result or "")}</td>{by_cell}</tr>')
    if calls:
        body.append("</tbody></table><h3>MCP calls</h3><table><thead><tr><th>session</th>"
                    "<th>message</th><th>method</th><th>arguments</th><th>result</th>"
                    "<th>for tool call</th></tr></thead><tbody>")
        for c in calls:
            body.append(
                f'<tr class="link mcp" data-goto="{c.seq}"><td>#{c.seq} {_e(c.server)}</td>'
                f"<td>#{c.message}</td><td class=\"mono\">{_e(c.method)} {_e(c.tool or '')}</td>"
                f'<td class="mono">{_e(c.arguments[:300])}</td><td>{_e(c.answer)}</td>'
                f'<td class="mono">{_e(c.caused_by or "-")}</td></tr>')
    notes = "".join(
        f'<p class="muted">Result in #{s} for a call no recorded response issued: '
        f"<code>{_e(c)}</code> {_e(n or '')}</p>"
        for s, c, n in ledger.unmatched_results
    )
    return head + "".join(body) + "</tbody></table>" + notes


def _message(m: Message) -> str:
    role = m.role if m.result_for is None else f"tool result {m.result_for or m.result_name or ''}"
    calls = "".join(f'<div class="call">→ {_e(c.name)}({_e(c.arguments)}) '
                    f'<span class="muted">{_e(c.call_id)}</span></div>' for c in m.tool_calls)
    kind = "tool" if m.result_for is not None else ""
    return (f'<div class="msg {kind}"><div class="role">{_e(role)}</div>'
            f'{_text_block(m.text) if m.text else ""}{calls}</div>')


def _new_messages(
    previous: ExchangeView | None, view: ExchangeView
) -> tuple[int, Sequence[Message]]:
    """The messages this request adds to the previous one's conversation."""
    msgs = view.request.messages
    if previous is not None:
        before = previous.request.messages
        if 0 < len(before) <= len(msgs) and msgs[: len(before)] == before:
            return len(before), msgs[len(before):]
    return 0, msgs


def _session(messages: Sequence[WsMessage], origin: str = "") -> str:
    """A WebSocket (or stdio MCP, by its ``origin``) session's messages: a
    collapsed table, one row each."""
    sent = sum(m.direction == "client" for m in messages)
    what = (f"MCP session of server {origin.removeprefix(MCP_ORIGIN_PREFIX)}"
            if exchange_kind(origin) == "mcp" else "WebSocket session")
    rows = "".join(
        f'<tr><td>#{i}</td><td>+{_e(_ms(m.offset_ns))}</td><td>{s.direction}</td>'
        f'<td>{_e(s.opcode)}</td><td>{s.size} B</td><td class="mono">{_e(s.head)}</td></tr>'
        for i, m in enumerate(messages) for s in (message_summary(m, 300),))
    return (f'<details class="msg ws"><summary>{_e(what)}: {len(messages)} messages '
            f"({sent} from the client, {len(messages) - sent} from the server)</summary>"
            "<table><thead><tr><th>#</th><th>at</th><th>direction</th><th>opcode</th>"
            f"<th>size</th><th>payload</th></tr></thead><tbody>{rows}</tbody></table></details>")


def conversation(rows: Sequence[TimelineRow], views: Mapping[int, ExchangeView],
                 sessions: Mapping[int, Sequence[WsMessage]] | None = None) -> str:
    """Each exchange as a conversation step; ``sessions``: the WebSocket
    messages of the exchanges that have any, by seq."""
    out, previous, system = [], None, ""
    for r in rows:
        view = views[r.seq]
        skipped, msgs = _new_messages(previous, view)
        parts = [(f'<div class="exchange" id="exchange-{r.seq}" data-seq="{r.seq}">'
                  f"<h3>#{r.seq} <span class=\"mono\">{_e(_request_of(r))}</span> "
                  f'<span class="muted">{_e(r.model or "")} · {_e(r.status or r.ending)} · '
                  f"+{_e(_ms(r.offset_ns))}</span></h3>")]
        if view.request.system and view.request.system != system:
            parts.append(_message(Message("system", view.request.system)))
            system = view.request.system
        if skipped:
            parts.append(f'<div class="muted">… {skipped} earlier message(s) resent</div>')
        parts.extend(_message(m) for m in msgs)
        resp = view.response
        if resp is not None:
            if resp.reasoning:
                parts.append(f'<details class="msg"><summary>reasoning ({len(resp.reasoning)} '
                             f"characters)</summary>{_text_block(resp.reasoning, None)}</details>")
            calls = "".join(f'<div class="call">→ {_e(c.name)}({_e(c.arguments)}) '
                            f'<span class="muted">{_e(c.call_id)} {_e(c.kind)}</span></div>'
                            for c in resp.tool_calls)
            text = _text_block(resp.text, None) if resp.text else ""
            if resp.vectors is not None:
                text += f"<div>{resp.vectors} vector(s) of {resp.dimensions} dimensions</div>"
            errors = "".join(f'<div class="error">error{" (in-band)" if e.in_band else ""}: '
                             f"{_e(e.message)}</div>" for e in resp.errors)
            unknown = ", ".join(f"{n} ×{c}" for n, c in resp.unknown_events)
            meta = f"stop {resp.stop_reason or '-'}"
            if resp.usage is not None:
                meta += f" · tokens {resp.usage.input_tokens} in, {resp.usage.output_tokens} out"
            if unknown:
                meta += f" · unknown events: {unknown}"
            parts.append(f'<div class="msg answer"><div class="role">model <span class="meta">'
                         f"{_e(meta)}</span></div>"
                         f"{text}{calls}{errors}</div>")
        elif r.error:
            parts.append(f'<div class="error">no response: {_e(r.error)}</div>')
        if sessions and sessions.get(r.seq):
            parts.append(_session(sessions[r.seq], r.origin))
        parts.append("</div>")
        out.append("".join(parts))
        previous = view
    return "\n".join(out) or '<p class="muted">No exchange was recorded.</p>'


def _request_of(r: TimelineRow) -> str:
    """``POST /v1/chat``, or for a tool exchange (``--tools``) ``tool GET
    https://docs.example.com/page``."""
    if r.origin.startswith(TOOL_ORIGIN_PREFIX):
        return f"tool {r.method} {tool_url(r.origin, r.target)}"
    return f"{r.method} {r.target}"


def _divergence(row: ReplayRow) -> str:
    kind = str(row.get("kind"))
    detail = row.get("detail") or {}
    where = f"recorded #{row['seq']}" if row.get("seq") is not None else "no recorded counterpart"
    out = [(f'<div class="divergence" data-kind="{_e(kind)}"><h4><span class="badge {_e(kind)}">'
            f'{_e(kind)}</span> {_e(row_label(row))} <span class="muted">({_e(where)}, '
            f'{"served" if row.get("served") else "rejected"})</span></h4>')]
    explanation = detail.get("explanation")
    if explanation:
        out.append(f"<div><b>{_e(explanation.get('first_line', ''))}</b> "
                   f'<span class="muted">{_e(explanation.get("bytes_differ", 0))} bytes differ, '
                   f"edit distance {_e(explanation.get('edit_distance'))}</span></div>")
    for span in explanation.get("spans", []) if explanation else []:
        tool = span.get("tool")
        about = f", result of {tool.get('name') or '?'} ({tool.get('call_id')})" if tool else ""
        out.append(
            f'<div class="muted">at {_e(span.get("pointer") or "byte " + str(span.get("offset")))}'
            f" ({_e(span.get('kind'))}{_e(about)})</div>"
            f'<div class="sbs"><div class="rec"><div class="muted">recorded</div>'
            f"<pre>{_e(span.get('recorded_context', ''))}</pre></div>"
            f'<div class="live"><div class="muted">live</div>'
            f"<pre>{_e(span.get('live_context', ''))}</pre></div></div>"
        )
    for old, new, count in detail.get("substitutions", []):
        out.append(f"<div>substitution <code>{_e(old)}</code> → <code>{_e(new)}</code> fired "
                   f"{_e(count)} time(s)</div>")
    for diff in explanation.get("header_differences", []) if explanation else []:
        out.append(f'<div class="muted">header {_e(diff.get("name"))}: {_e(diff.get("recorded"))} '
                   f"→ {_e(diff.get('live'))}</div>")
    return "".join(out) + "</div>"


def _message_divergences(row: ReplayRow) -> str:
    """The client messages of a replayed WebSocket session that were not exact."""
    out = []
    for d in row["detail"]["messages"]["decisions"]:
        if d["kind"] == "exact":
            continue
        explanation = d.get("explanation")
        out.append(f'<div class="divergence" data-kind="{_e(d["kind"])}"><h4><span class="badge '
                   f'{_e(d["kind"])}">{_e(d["kind"])}</span> {_e(message_label(d))} of '
                   f'{_e(row.get("method"))} {_e(row.get("target"))}</h4>'
                   + (f"<div><b>{_e(explanation.get('first_line', ''))}</b></div>"
                      if explanation else "") + "</div>")
    return "".join(out)


def _facet_word(same: object) -> str:
    return "same" if same else "not compared" if same is None else "differs"


def replays(verdicts: Sequence[Verdict]) -> str:
    if not verdicts:
        return ('<p class="muted">This run has not been replayed yet '
                "(<code>wiretape replay</code>).</p>")
    out = []
    for v in verdicts:
        status = "PASS" if v.passed else "FAIL"
        outcome = ", ".join(
            f"{k} {_facet_word(f.get('same'))}"
            for k, f in facets(v.outcome)
            if isinstance(f, Mapping) and k in COMPARED_FACETS
        )
        counts = "".join(f"<td data-{k}=\"{getattr(v, k)}\">{getattr(v, k)}</td>" for k in
                         ("recorded", "exact", "substituted", "equivalent", "diverged",
                          "missing", "unused"))
        out.append(
            f'<div class="replay" data-replay="{_e(v.replay_id)}" data-verdict="{status}">'
            f'<h3><span class="badge {status.lower()}">{status}</span> <span class="mono">'
            f'{_e(v.replay_id)}</span> <span class="muted">{_e(v.mode)}'
            f'{"" if v.complete else ", did not finish"}</span></h3>'
            "<table><thead><tr><th>recorded</th><th>exact</th><th>substituted</th>"
            "<th>equivalent</th><th>diverged</th>"
            f"<th>missing</th><th>unused</th></tr></thead><tbody><tr>{counts}</tr></tbody></table>"
            f'<div class="muted">outcome: {_e(outcome or "not compared")}</div>')
        if v.tools is not None:
            t = v.tools
            out.append(f'<div class="muted" data-tools="{t.recorded},{t.exact},{t.substituted},'
                       f'{t.equivalent},{t.diverged},{t.missing},{t.unused}">tool exchanges: '
                       f"recorded {t.recorded}, exact {t.exact}, substituted {t.substituted}, "
                       f"equivalent {t.equivalent}, diverged {t.diverged}, missing {t.missing}, "
                       f"unused {t.unused}</div>")
        if v.messages is not None:
            m = v.messages
            out.append(f'<div class="muted" data-messages="{m.exact},{m.diverged},{m.missing},'
                       f'{m.unused}" data-messages-substituted="{m.substituted}" '
                       f'data-messages-equivalent="{m.equivalent}">WebSocket messages: exact '
                       f"{m.exact}, substituted {m.substituted}, equivalent {m.equivalent}, "
                       f"diverged {m.diverged}, missing {m.missing}, unused {m.unused}</div>")
        if v.mcp is not None:
            c, m = v.mcp, v.mcp.messages
            out.append(f'<div class="muted" data-mcp="{c.played},{c.recorded},{m.exact},'
                       f'{m.diverged},{m.missing},{m.unused}">MCP: sessions {c.played} of '
                       f"{c.recorded} played (missing {c.missing}), messages: exact {m.exact}, "
                       f"equivalent {m.equivalent}, diverged {m.diverged}, missing {m.missing}, "
                       f"unused {m.unused}</div>")
        out.extend(_divergence(r) for r in v.requests if r.get("kind") != "exact")
        # A session is played after any served handshake, not only an exact one.
        out.extend(_message_divergences(r) for r in v.requests
                   if "messages" in (r.get("detail") or {}))
        for u in v.unused_exchanges:
            out.append(f'<div class="muted">unused recorded exchange #{_e(u.get("seq"))}: '
                       f'{_e(u.get("summary", ""))}</div>')
        out.append("</div>")
    return "\n".join(out)


def forks_table(forks: Sequence[ForkSummary], prices: PriceTable) -> str:
    """The run's forks as one comparison table (empty: no section). One
    verify command is named above the table; different ones, each in its
    row. An agent with no exit status (its fork was interrupted) shows
    "interrupted"."""
    if not forks:
        return ""
    commands = sorted({f.verify for f in forks if f.verify})
    rows = []
    for f in forks:
        own = (f'<div class="muted mono">{_e(f.verify)}</div>'
               if len(commands) > 1 and f.verify else "")
        if f.verify_status is None:
            verify = f'<td class="muted">-{own}</td>'
        else:
            word = "pass" if f.verify_status == 0 else "fail"
            verify = (f'<td data-verify="{f.verify_status}"><span class="badge {word}">'
                      f'{word.upper()}</span> ({f.verify_status}){own}</td>')
        tokens = ["—" if n is None else str(n) for n in (f.input_tokens, f.output_tokens)]
        wall = "-" if f.duration_s is None else f"{f.duration_s:.1f} s"
        agent = ('<td class="muted">interrupted</td>' if f.exit_status is None
                 else f"<td>{_e(f.exit_status)}</td>")
        rows.append(f'<tr data-fork="{_e(f.run_id)}"><td class="mono">{_e(f.model or "?")}</td>'
                    f"{verify}{agent}<td>{f.upto}</td><td>{f.live}</td>"
                    f"<td>{tokens[0]}</td><td>{tokens[1]}</td>"
                    f"<td>{_e(cost_text(f.cost(prices)))}</td><td>{_e(wall)}</td>"
                    f'<td class="mono">{_e(f.run_id)}</td></tr>')
    said = (f'<div class="muted">verify: <code>{_e(commands[0])}</code></div>'
            if len(commands) == 1 else
            '<div class="muted">verify: the commands differ; each is under its status</div>'
            if commands else "")
    return ('<h2 id="forks">Forks</h2>' + said
            + "<table><thead><tr><th>model</th><th>verify</th><th>agent exit</th><th>from</th>"
              "<th>live</th><th>tokens in</th><th>tokens out</th><th>cost</th><th>wall</th>"
              "<th>run</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def fork_heading(info: RunInfo, exchanges: int) -> str:
    """For a fork of ``exchanges`` exchanges: the run it was forked from,
    at which point, onto which model (empty for a run that is not a fork)."""
    from wiretape.inspect.forks import fork_from

    parent = info.extra.get("fork_parent")
    if not isinstance(parent, str) or not parent:
        return ""
    upto = fork_from(info.extra, exchanges)
    after = ("at a point its metadata does not give" if upto is None else
             f"after its first {upto} exchange{'' if upto == 1 else 's'}")
    model = info.extra.get("fork_model") or ""
    onto = f", the live requests' model rewritten to {model}" if model else ""
    return (f'<div class="muted" data-fork-parent="{_e(parent)}">forked from '
            f'<span class="mono">{_e(parent)}</span> {_e(after)}{_e(onto)}</div>')


def render(info: RunInfo, path: str, rows: Sequence[TimelineRow],
           views: Mapping[int, ExchangeView], ledger: Ledger, verdicts: Sequence[Verdict],
           sessions: Mapping[int, Sequence[WsMessage]] | None = None,
           mcp_calls: Sequence[McpCall] = (), *,
           forks: Sequence[ForkSummary] = (), prices: PriceTable = DEFAULT_PRICES) -> str:
    """The whole page; ``sessions``: the WebSocket (and stdio MCP) messages
    by exchange seq; ``mcp_calls``: the run's MCP calls (``inspect.mcpcalls``);
    ``forks``: the run's forks, shown as one comparison (costs at
    ``prices``) after the replays."""
    template = Template(resources.files("wiretape.inspect").joinpath("report_template.html")
                        .read_text(encoding="utf-8"))
    # The key shapes are masked even in a run recorded before they were
    # redacted everywhere (the masks keep lengths and need no escaping).
    # Every control character a value holds (an ESC in a payload, a close
    # reason, a body, a target) is shown as its escape, as ``show`` prints
    # it: the template itself holds none but newlines.
    return redact_str(printable(template.substitute(
        version=_e(__version__), title=_e(f"wiretape {info.run_id}"),
        summary=summary(info, path, rows, ledger, verdicts) + fork_heading(info, len(rows)),
        waterfall=waterfall(rows, sessions),
        ledger=ledger_table(ledger, mcp_calls), conversation=conversation(rows, views, sessions),
        replays=replays(verdicts) + forks_table(forks, prices),
        footer=_e(f"wiretape {__version__} · run {info.run_id} · report written "
                  f"{dt.datetime.now().strftime('%Y-%m-%d %H:%M:%S')}"),
    ), keep="\n\t"), "report")
