"""Turning results into text for a person. The only printing is done by
the CLI module with what these functions return."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import click

from wiretape.launch.record import RecordResult
from wiretape.model import (
    COMPARED_FACETS,
    ConnectReportJSON,
    ExplanationJSON,
    Facet,
    RunInfo,
    facets,
)
from wiretape.playback.verdict import Verdict

if TYPE_CHECKING:
    from wiretape.inspect.diff import RunDiff


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def ms(ns: int | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.0f} ms"


def record_summary(result: RecordResult) -> list[str]:
    lines = [
        f"wiretape: recorded {result.run_id}: {result.exchanges} exchange"
        f"{'s' if result.exchanges != 1 else ''}, {human_bytes(result.body_bytes)}, "
        f"{result.duration_s:.1f} s -> {result.path}"
    ]
    if result.refused:
        counts: dict[tuple[int, str], int] = {}
        for key in result.refused:
            counts[key] = counts.get(key, 0) + 1
        said = ", ".join(f"{n} x {status} {code}" for (status, code), n in counts.items())
        lines.append(f"wiretape: refused before forwarding (not recorded): {said}")
    if result.exchanges == 0 and result.connect is not None:
        port = result.origins[0].port if result.origins else 0
        lines.append(
            "wiretape: WARNING: NO EXCHANGE WAS RECORDED. The agent made no HTTPS request to an "
            f"intercepted host through HTTPS_PROXY=http://127.0.0.1:{port}: check that it honours "
            "HTTPS_PROXY (or give it that proxy in its own settings), and add its provider's host "
            "with --intercept-host HOST if it is not one of "
            + ", ".join(sorted({o.upstream.removeprefix("https://") for o in result.origins})))
    elif result.exchanges == 0 and not result.refused:
        names = ", ".join(sorted({v for o in result.origins for v in o.env_vars})) or "none"
        ports = ", ".join(f"{o.name}=127.0.0.1:{o.port}" for o in result.origins)
        lines.append(
            "wiretape: WARNING: NO EXCHANGE WAS RECORDED. The agent never called the proxy "
            f"({ports}) through the variables set for it ({names}). If it reads its origin from "
            "a config file, give it a fixed proxy port with --port N (or `wiretape serve "
            "--record`) and point the config's base URL at http://127.0.0.1:N."
        )
    for failure in result.failures:
        lines.append(f"wiretape: exchange {failure}")
    if result.connect is not None:
        lines.extend(connect_lines(result.connect.to_json()))
    return lines


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


def verdict_line(v: Verdict) -> str:
    status = "PASS" if v.passed else "FAIL"
    outcome = ", ".join(
        f"{name} {_facet_word(facet)}"
        for name, facet in facets(v.outcome) if name in COMPARED_FACETS
    ) or "not compared"
    extra = "" if v.complete else " [replay did not finish]"
    stopped = v.outcome.get("stopped", {}).get("reason") if v.outcome else None
    tail = f"; stopped at {stopped}" if stopped else ""
    return (
        f"wiretape: verdict {status}{extra} ({v.mode}): recorded {v.recorded}, exact {v.exact}, "
        f"substituted {v.substituted}, diverged {v.diverged}, missing {v.missing}, "
        f"unused {v.unused}; outcome: {outcome}{tail}"
    )


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


_KIND_COLOUR = {"diverged": "red", "missing": "red", "substituted": "yellow"}


def _clip(text: str, n: int = 100) -> str:
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    return text if len(text) <= n else text[: n - 3] + "..."


def explanation_lines(explanation: ExplanationJSON) -> list[str]:
    """The body of one divergence block: first the most useful line, then
    the numbers, each span with its place, kind and text, then headers."""
    lines = [click.style("  " + explanation.get("first_line", ""), bold=True)]
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
            lines.append(f"    {span.get('change')}: " + click.style(_clip(element), fg="yellow"))
            continue
        lines.append("    recorded: " + click.style(_clip(span.get("recorded_context", "")), fg="green"))
        lines.append("    live:     " + click.style(_clip(span.get("live_context", "")), fg="red"))
    if explanation.get("spans_omitted"):
        lines.append(f"  ... and {explanation['spans_omitted']} more differing spans")
    for diff in explanation.get("header_differences", []):
        tag = "decides the match" if diff.get("semantic") else "informational"
        lines.append(f"  header {diff.get('name')} ({tag}): {diff.get('recorded')} -> {diff.get('live')}")
    return lines


def verdict_details(v: Verdict) -> list[str]:
    """One block per non-exact request, in order, then the unused exchanges."""
    lines = []
    for row in v.requests:
        kind = row["kind"]
        if kind == "exact":
            continue
        detail = row.get("detail", {})
        where = f"recorded #{row['seq']}" if row.get("seq") is not None else "no recorded counterpart"
        served = "served" if row.get("served") else "rejected"
        head = f"request {row['index']} {row['method']} {row['target']}: {kind} ({where}, {served})"
        lines.append(click.style(head, fg=_KIND_COLOUR.get(kind), bold=True))
        for old, new, count in detail.get("substitutions", []):
            lines.append(f"  substitution {old!r} -> {new!r} fired {count} time(s)")
        explanation = detail.get("explanation")
        if explanation:
            lines.extend(explanation_lines(explanation))
        elif detail.get("fields"):
            lines.append("  differs in: " + ", ".join(detail["fields"]))
    files = v.outcome.get("files", {}) if v.outcome else {}
    for d in files.get("differing", []):
        lines.append(click.style(f"file {d['path']}: recorded {d['recorded']}, replay {d['replayed']}",
                                 fg="yellow", bold=True))
        for where, rec, rep in d.get("real", [])[:3]:
            lines.append(f"  at {where}: {_clip(rec, 60)!r} -> {_clip(rep, 60)!r}")
        for label in ("recorded_diff", "replayed_diff"):
            if d.get(label):
                lines.append(f"  {label.split('_')[0]} change:")
                lines.extend("    " + line for line in d[label].splitlines()[:12])
    if files.get("differing_count", 0) > len(files.get("differing", [])):
        lines.append(f"  ... and {files['differing_count'] - len(files['differing'])} more files")
    for vol in files.get("volatile", []):
        lines.append(f"file {vol['path']}: same up to {vol['values']}")
        for where, rec, rep in vol.get("examples", [])[:3]:
            lines.append(f"  at {where}: {_clip(rec, 40)} -> {_clip(rep, 40)}")
        if vol.get("count", 0) > 3:
            lines.append(f"  ... and {vol['count'] - 3} more such values")
    stdout = v.outcome.get("stdout", {}) if v.outcome else {}
    if stdout.get("same") is False and stdout.get("diff"):
        lines.append(click.style("stdout differs:", fg="yellow", bold=True))
        for where, rec, rep in stdout.get("real", [])[:3]:
            lines.append(f"  at {where}: {_clip(rec, 60)!r} -> {_clip(rep, 60)!r}")
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
        lines.append(click.style(f"unused recorded exchanges ({len(v.unused_exchanges)}):", bold=True))
        for u in v.unused_exchanges:
            lines.append(f"  #{u['seq']} {u.get('method', '?')} {u.get('target', '?')}: "
                         f"{u.get('summary', '')}")
    return lines


def verdict_json(v: Verdict) -> str:
    return json.dumps(v.to_json(), indent=2, default=str)


def when(ns: int | None) -> str:
    if not ns:
        return "-"
    return dt.datetime.fromtimestamp(ns / 1e9).strftime("%Y-%m-%d %H:%M:%S")


def table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header).rstrip()] + [fmt.format(*map(str, r)).rstrip() for r in rows]


def run_heading(info: RunInfo, path: str) -> list[str]:
    argv = " ".join(info.argv) or "(serve)"
    origins = ", ".join(f"{o.name}={o.upstream} (port {o.port})" for o in info.origins)
    return [f"run {info.run_id}  {path}", f"  command: {argv}", f"  cwd: {info.cwd}",
            f"  started: {when(info.started_at_ns)}  exit status: {info.exit_status}",
            f"  origins: {origins}"]


def diff_lines(result: RunDiff, name_a: str, name_b: str) -> list[str]:
    """A run diff for a person: one block per differing pair, then a summary."""
    lines = []
    for pair in result.pairs:
        route = f"{pair.a.request.method.decode()} {pair.a.request.path.decode('latin-1')}"
        if pair.explanation is None:
            lines.append(f"#{pair.a.seq} <-> #{pair.b.seq} {route}: same")
            continue
        lines.append(click.style(f"#{pair.a.seq} <-> #{pair.b.seq} {route}: differs", fg="red", bold=True))
        lines.extend(explanation_lines(pair.explanation.to_json()))
    from wiretape.inspect.summary import request_summary

    for label, name, items in (("only in", name_a, result.only_a), ("only in", name_b, result.only_b)):
        for e in items:
            lines.append(click.style(f"#{e.seq} {e.request.method.decode()} "
                                     f"{e.request.target.decode('latin-1')}: {label} {name}",
                                     fg="yellow") + f": {request_summary(e.request)}")
    lines.append(f"wiretape: diff {name_a} -> {name_b}: {len(result.pairs)} paired exchanges, "
                 f"{result.same} same, {result.differ} differ; {len(result.only_a)} only in "
                 f"{name_a}, {len(result.only_b)} only in {name_b}")
    return lines
