"""The verdict as text for a person: one line, then the divergence report.

Pure: returns lines, prints nothing. Colour is the caller's: each function
that colours takes a ``style`` (``click.style`` fits), plain text by default.
The command line, the pytest plugin and ``wiretape demo`` all print these
lines; ``Verdict.line()`` and ``Verdict.details()`` are the public way in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from wiretape.model import (
    COMPARED_FACETS,
    TOOL_ORIGIN_PREFIX,
    ConnectReportJSON,
    ExplanationJSON,
    Facet,
    LearnedJSON,
    MessageDecisionJSON,
    ReplayRow,
    RequestDetail,
    facets,
)

if TYPE_CHECKING:
    from wiretape.playback.verdict import Verdict

from wiretape.matching.correspond import duration
from wiretape.matching.volatile import ABSENT
from wiretape.playback.messages import MessageCounts, message_label


class Style(Protocol):
    """Colours a piece of text: ``fg`` a colour name, ``bold`` bold."""

    def __call__(self, text: str, *, fg: str | None = None, bold: bool | None = None) -> str: ...


def plain(text: str, *, fg: str | None = None, bold: bool | None = None) -> str:
    """No colour: the text as it is."""
    return text


def verdict_line(v: Verdict) -> str:
    """The verdict in one line: pass, fail or interrupted, the counts, the
    outcome (with both exit statuses when they differ)."""
    status = ("PASS" if v.passed else
              f"INTERRUPTED by {v.interrupted}" if v.interrupted is not None else "FAIL")
    outcome = ", ".join(
        f"{name} {_facet_word(facet)}{_exit_statuses(name, facet)}"
        for name, facet in facets(v.outcome) if name in COMPARED_FACETS
    ) or "not compared"
    extra = "" if v.complete else " [replay did not finish]"
    stopped = v.outcome.get("stopped", {}).get("reason") if v.outcome else None
    tail = f"; stopped at {stopped}" if stopped else ""
    # A replay that learned nothing and allowed nothing reads as it always has.
    equivalent = (f"equivalent {v.equivalent} ({_rules_word(v)}), " if v.equivalent
                  else "equivalent 0, " if v.allow else "")
    return (
        f"wiretape: verdict {status}{extra} ({v.mode}): recorded {v.recorded}, exact {v.exact}, "
        f"substituted {v.substituted}, {equivalent}diverged {v.diverged}, missing {v.missing}, "
        f"unused {v.unused}{_messages_part(v)}{_tools_part(v)}{_mcp_part(v)}; "
        f"outcome: {outcome}{tail}"
    )


def _tools_part(v: Verdict) -> str:
    """``; tools: exact N, ...`` when the run recorded tool exchanges or
    the replay met tool requests (``--tools``): every count, always."""
    t = v.tools
    if t is None:
        return ""
    return (f"; tools: recorded {t.recorded}, exact {t.exact}, substituted {t.substituted}, "
            f"equivalent {t.equivalent}, diverged {t.diverged}, missing {t.missing}, "
            f"unused {t.unused}")


def _mcp_part(v: Verdict) -> str:
    """``; mcp: sessions 1/1, exact N, ...`` when stdio MCP sessions were
    recorded or asked for: sessions played of recorded (and those a shim
    asked for with none left), then their messages as ``messages:``."""
    c = v.mcp
    if c is None:
        return ""
    missing = f" (missing {c.missing})" if c.missing else ""
    return (f"; mcp: sessions {c.played}/{c.recorded}{missing}, "
            f"{_message_counts(c.messages, v.allow)}")


def row_label(row: ReplayRow) -> str:
    """How a replay row's request is named: ``request 3 POST /v1/chat``, or
    for a tool's request ``tool request 4 GET https://docs.example.com/page``."""
    origin = row.get("detail", {}).get("origin", "")
    if origin.startswith(TOOL_ORIGIN_PREFIX):
        return (f"tool request {row['index']} {row['method']} "
                f"{origin.removeprefix(TOOL_ORIGIN_PREFIX)}{row['target']}")
    return f"request {row['index']} {row['method']} {row['target']}"


def _messages_part(v: Verdict) -> str:
    """``; messages: exact N, ...`` when WebSocket sessions were replayed
    (substituted when any was; equivalent when any was or rules are allowed,
    as the requests' counts). The learned rules, which one replay shares
    between its requests and messages, are named after the requests'
    equivalent count, or after the messages' when no request needed one."""
    m = v.messages
    if m is None:
        return ""
    # The replay's rules are named once: here when no request needed them.
    rules = f" ({_rules_word(v)})" if m.equivalent and not v.equivalent else ""
    return f"; messages: {_message_counts(m, v.allow, rules)}"


def _message_counts(m: MessageCounts, allow: Sequence[str], rules: str = "") -> str:
    """``exact N, [substituted N, ][equivalent N RULES, ]diverged N,
    missing N, unused N[ (server messages not sent: N)]``: substituted when
    any was; equivalent when any was or rules are allowed."""
    substituted = f"substituted {m.substituted}, " if m.substituted else ""
    equivalent = f"equivalent {m.equivalent}{rules}, " if m.equivalent or allow else ""
    not_sent = f" (server messages not sent: {m.not_sent})" if m.not_sent else ""
    return (f"exact {m.exact}, {substituted}{equivalent}diverged {m.diverged}, "
            f"missing {m.missing}, unused {m.unused}{not_sent}")


def _message_lines(detail: RequestDetail, style: Style, allow: tuple[str, ...] = ()
                   ) -> list[str]:
    """Each WebSocket message of a session that was not exact (with the
    learned rules it needed, allowed or not), the recorded client messages
    never matched and the recorded server messages not sent, each named by
    its index in the session (``#N``, as ``show`` lists it)."""
    session = detail.get("messages")
    if session is None:
        return []
    lines = []
    for d in session["decisions"]:
        if d["kind"] == "exact":
            continue
        lines.append(style(f"  {message_label(d)}, {d['size']} B: {d['kind']}"
                           + (" (nothing recorded answers it)" if d["recorded"] is None
                              else ""), fg=_KIND_COLOUR.get(d["kind"]), bold=True))
        lines.extend(_decision_lines(d, d["kind"], allow, "    "))
        if "explanation" in d:
            lines.extend("  " + line for line in explanation_lines(d["explanation"], style))
    if "ending" in session:
        lines.append(f"  {session['ending']}")
    for indices, what in ((session["unused"], "recorded client messages never matched"),
                          (session.get("not_sent", []), "recorded server messages not sent")):
        if indices:
            shown = ", ".join(f"#{i}" for i in indices[:10])
            more = len(indices) - 10
            lines.append(f"  {what}: {shown}" + (f" and {more} more" if more > 0 else ""))
    return lines


def _decision_lines(decided: RequestDetail | MessageDecisionJSON, kind: str,
                    allow: Sequence[str], indent: str) -> list[str]:
    """What decided a request or a message that was not exact, each line
    led by ``indent``: the substitutions that fired, the learned rules it
    needed (allowed, or not and the ``--allow`` that accepts it), and the
    first difference no learned rule explains when rules are allowed."""
    lines = [f"{indent}substitution {old!r} -> {new!r} fired {count} time(s)"
             for old, new, count in decided.get("substitutions", [])]
    not_allowed = decided.get("not_allowed", [])
    if not_allowed:
        needed = ",".join(not_allowed)
        every = ",".join(sorted({*allow, *not_allowed}))
        lines.append(f"{indent}equal up to {needed} (not allowed; --allow {every} accepts it):")
        lines.extend(learned_lines(decided.get("learned", []), indent + "  "))
    elif kind == "equivalent":
        lines.extend(learned_lines(decided.get("learned", []), indent))
    if decided.get("unexplained") and allow:
        lines.append(f"{indent}no learned rule explains {decided.get('unexplained')}")
    return lines


def _rules_word(v: Verdict) -> str:
    """``ids, clock +1d 2h, key-order``: the rules that fired."""
    return ", ".join(rule_word(entry) for entry in v.rules)


def rule_word(entry: LearnedJSON) -> str:
    """A learned rule in a word or two: ``ids``, ``clock +1d 2h``."""
    shift = entry.get("shift_s")
    return entry["rule"] if shift is None else f"{entry['rule']} {duration(shift)}"


def learned_lines(entries: list[LearnedJSON], indent: str = "  ") -> list[str]:
    """Each learned rule that fired: how often, where, and an example."""
    lines = []
    for entry in entries:
        where = ", ".join(entry["pointers"][:4])
        more = len(entry["pointers"]) - 4
        where += f" and {more} more places" if more > 0 else ""
        lines.append(f"{indent}{rule_word(entry)}: {entry['count']} value(s) at {where}")
        for recorded, live in entry["examples"][:2]:
            lines.append(f"{indent}  {_clip(recorded, 60)!r} -> {_clip(live, 60)!r}")
    return lines


def _exit_statuses(name: str, facet: Facet) -> str:
    """`` (0 -> 1)`` for an exit status facet that differs; else nothing."""
    members: Mapping[str, object] = facet
    if name != "exit_status" or facet.get("same") is not False:
        return ""
    return f" ({members.get('recorded')} -> {members.get('replayed')})"


def _facet_word(facet: Facet) -> str:
    same = facet.get("same")
    if same is None:
        return "not compared"
    if not same:
        return "differs"
    # What was set aside: files (volatile_count) or stdout (volatile, a text).
    members: Mapping[str, object] = facet
    if members.get("volatile_count"):
        return f"same up to timestamps and timings in {members['volatile_count']} file(s)"
    if isinstance(members.get("volatile"), str) and members["volatile"]:
        return f"same up to {members['volatile']}"
    return "same"


_KIND_COLOUR = {"diverged": "red", "missing": "red", "substituted": "yellow",
                "equivalent": "cyan"}


def _side(text: str) -> str:
    """One side of a real difference: quoted, clipped; a member that is not
    there (``volatile.ABSENT``) as it is."""
    return text if text == ABSENT else repr(_clip(text, 60))


def _clip(text: str, n: int = 100) -> str:
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    return text if len(text) <= n else text[: n - 3] + "..."


def connect_lines(report: ConnectReportJSON) -> list[str]:
    """What the forward proxy saw (``--intercept``), one line per fact."""
    lines = [f"wiretape: {why}" for why in report.get("rejected", {}).values()]
    for t in report.get("tunnels", []):
        what = (f"unreachable ({t['error']})" if t.get("error") and not t.get("bytes_down")
                else f"{t['bytes_up']} bytes up, {t['bytes_down']} bytes down, not recorded")
        lines.append(f"wiretape: tunnelled {t['host']}:{t['port']} untouched "
                     f"({t['connections']} connection(s)): {what}")
    for where, count in report.get("refused", {}).items():
        lines.append(f"wiretape: refused {count} tunnel(s) to {where}: only the intercepted "
                     "provider hosts are answered during a replay")
    return lines


def explanation_lines(explanation: ExplanationJSON, style: Style = plain) -> list[str]:
    """The body of one divergence block: first the most useful line, then
    the numbers, each span with its place, kind and text, then headers."""
    lines = [style("  " + explanation.get("first_line", ""), bold=True)]
    distance = explanation.get("edit_distance")
    capped = ">" if explanation.get("edit_distance_capped") else ""
    lines.append(f"  {explanation.get('bytes_differ', 0)} bytes differ, edit distance "
                 f"{capped}{distance if distance is not None else '?'}; kinds: "
                 f"{', '.join(explanation.get('kind_summary', [])) or '-'}")
    for pair, label in ((explanation.get("method_differs"), "method"),
                        (explanation.get("target_differs"), "target")):
        if pair:
            lines.append(f"  {label}: {pair[0]!r} -> {pair[1]!r}")
    for span in explanation.get("spans", []):
        where = span.get("pointer") or f"byte {span.get('offset')}"
        tool = span.get("tool")
        about = f", result of {tool.get('name') or '?'} ({tool.get('call_id')})" if tool else ""
        lines.append(f"  at {where} (offset {span.get('offset')}, {span.get('kind')}, "
                     f"{span.get('bytes_differ')} bytes{about}):")
        element = span.get("element")
        if element:
            lines.append(f"    {span.get('change')}: " + style(_clip(element), fg="yellow"))
            continue
        lines.append("    recorded: " + style(_clip(span.get("recorded_context", "")), fg="green"))
        lines.append("    live:     " + style(_clip(span.get("live_context", "")), fg="red"))
    if explanation.get("spans_omitted"):
        lines.append(f"  ... and {explanation['spans_omitted']} more differing spans")
    for diff in explanation.get("header_differences", []):
        tag = "decides the match" if diff.get("semantic") else "informational"
        lines.append(f"  header {diff.get('name')} ({tag}): "
                     f"{diff.get('recorded')} -> {diff.get('live')}")
    return lines


def verdict_details(v: Verdict, style: Style = plain) -> list[str]:
    """One block per non-exact request, in order, then what differed in the
    outcome, what was isolated, and the unused exchanges."""
    lines = []
    if v.rules:
        lines.append(style(f"learned correspondences (allowed: {', '.join(v.allow) or '-'}):",
                           bold=True))
        lines.extend(learned_lines(v.rules))
    for row in v.requests:
        kind = row["kind"]
        if kind == "exact":
            messages = _message_lines(row.get("detail", {}), style, v.allow)
            if messages:
                what = "MCP" if row.get("method") == "MCP" else "WebSocket"
                lines.append(style(f"{row_label(row)}: exact, its {what} session:",
                                   bold=True))
                lines.extend(messages)
            continue
        detail = row.get("detail", {})
        where = (f"recorded #{row['seq']}" if row.get("seq") is not None
                 else "no recorded counterpart")
        served = "served" if row.get("served") else "rejected"
        head = f"{row_label(row)}: {kind} ({where}, {served})"
        lines.append(style(head, fg=_KIND_COLOUR.get(kind), bold=True))
        lines.extend(_decision_lines(detail, kind, v.allow, "  "))
        explanation = detail.get("explanation")
        if explanation:
            lines.extend(explanation_lines(explanation, style))
        elif detail.get("fields"):
            lines.append("  differs in: " + ", ".join(detail["fields"]))
        # A session is played after any served handshake, not only an exact one.
        lines.extend(_message_lines(detail, style, v.allow))
    files = v.outcome.get("files", {}) if v.outcome else {}
    for d in files.get("differing", []):
        lines.append(style(f"file {d['path']}: recorded {d['recorded']}, replay {d['replayed']}",
                           fg="yellow", bold=True))
        for where, rec, rep in d.get("real", [])[:3]:
            lines.append(f"  at {where}: {_side(rec)} -> {_side(rep)}")
        for label in ("recorded_diff", "replayed_diff"):
            if d.get(label):
                lines.append(f"  {label.split('_')[0]} change:")
                lines.extend("    " + line for line in d[label].splitlines()[:12])
    if files.get("differing_count", 0) > len(files.get("differing", [])):
        lines.append(f"  ... and {files['differing_count'] - len(files['differing'])} more files")
    if files.get("ignored"):
        shown = ", ".join(files["ignored"][:5])
        more = len(files["ignored"]) - 5
        lines.append(f"files left out of the outcome (outcome-ignore): {shown}"
                     + (f" and {more} more" if more > 0 else ""))
    for rec_name, rep_name in files.get("paired", [])[:5]:
        lines.append(f"file {rep_name}: paired with recorded {rec_name} (names differ only by "
                     "learned values)")
    for vol in files.get("volatile", []):
        lines.append(f"file {vol['path']}: same up to {vol['values']}")
        for where, rec, rep in vol.get("examples", [])[:3]:
            lines.append(f"  at {where}: {_clip(rec, 40)} -> {_clip(rep, 40)}")
        if vol.get("count", 0) > 3:
            lines.append(f"  ... and {vol['count'] - 3} more such values")
    exit_status = v.outcome.get("exit_status", {}) if v.outcome else {}
    if exit_status.get("same") is False or exit_status.get("stderr"):
        lines.append(style(f"exit status: recorded {exit_status.get('recorded')}, replay "
                           f"{exit_status.get('replayed')}", fg="yellow", bold=True))
        if exit_status.get("command"):
            lines.append(f"  the agent exited with status {exit_status.get('replayed')}: "
                         + _clip(exit_status["command"], 200))
        said = exit_status.get("stderr", [])
        if said:
            lines.append("  the agent's stderr:")
            lines.extend("    " + _clip(line, 200) for line in said)
    stdout = v.outcome.get("stdout", {}) if v.outcome else {}
    if stdout.get("same") is False and stdout.get("diff"):
        lines.append(style("stdout differs:", fg="yellow", bold=True))
        for where, rec, rep in stdout.get("real", [])[:3]:
            lines.append(f"  at {where}: {_side(rec)} -> {_side(rep)}")
        lines.extend("  " + line for line in stdout["diff"].splitlines()[:20])
    sandbox = v.outcome.get("sandbox", {}) if v.outcome else {}
    for note in sandbox.get("notes", []):
        lines.append(note)
    isolation = v.outcome.get("isolation", {}) if v.outcome else {}
    if isolation.get("said"):
        lines.append("wiretape: isolation: " + "; ".join(isolation["said"]))
    intercept = v.outcome.get("intercept")
    if intercept is not None:
        lines.extend(connect_lines(intercept))
    if isolation.get("dns_queries"):
        lines.append("wiretape: the agent tried to reach: " + ", ".join(isolation["dns_queries"]))
    if sandbox.get("kept"):
        lines.append(f"wiretape: sandbox kept at {sandbox['kept']}")
    if v.unused_exchanges:
        lines.append(style(f"unused recorded exchanges ({len(v.unused_exchanges)}):", bold=True))
        for u in v.unused_exchanges:
            lines.append(f"  #{u['seq']} {u.get('method', '?')} {u.get('target', '?')}: "
                         f"{u.get('summary', '')}")
    if v.tools is not None and v.tools.unused_exchanges:
        unused = v.tools.unused_exchanges
        lines.append(style(f"unused recorded tool exchanges ({len(unused)}):", bold=True))
        for u in unused:
            lines.append(f"  #{u['seq']} {u.get('method', '?')} {u.get('target', '?')}")
    return lines
