"""Turning results into text for a person. The only printing is done by
the CLI module with what these functions return. The verdict's own text is
``wiretape.playback.text``'s (the pytest plugin prints it too); here it is
coloured for a terminal."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from wiretape.printable import UNPRINTABLE
from wiretape.printable import printable as printable  # (used across the CLI)

if TYPE_CHECKING:
    from wiretape.inspect.diff import RunDiff
    from wiretape.launch.record import RecordResult
    from wiretape.model import ExplanationJSON, RunInfo
    from wiretape.playback.verdict import Verdict


def json_text(value: object) -> str:
    """``value`` as indented JSON that keeps its non-ASCII text, with every
    character a terminal would act on (C1 controls, DEL, bidirectional
    overrides; JSON itself escapes C0) and every lone surrogate written as a
    JSON escape, which reads back as the same string."""
    import json  # (not loaded by --help)
    text = json.dumps(value, indent=2, ensure_ascii=False)
    return UNPRINTABLE.sub(lambda m: m.group() if m.group() == "\n"
                           else f"\\u{ord(m.group()):04x}", text)


class Escaped:
    """Printing lines that hold text from a run file, styled: ``style`` (in
    place of ``click.style``) marks where a style begins and ends with a
    token no run file can hold, and calling the object on a line escapes
    every control character in it (:func:`printable`, keeping newlines and
    tabs) before the marks become the styles. So a run's own escape
    sequences are shown as text, and only wiretape's styles reach the
    terminal."""

    def __init__(self) -> None:
        import secrets

        self._nonce = "wiretape-style-" + secrets.token_hex(8)
        self._styles: list[tuple[str, str]] = []
        self._mark = re.compile(re.escape(self._nonce) + r"(\d+)([oc])")

    def style(self, text: str, **styles: object) -> str:
        before, _, after = click.style("\x00", **styles).partition("\x00")  # type: ignore[arg-type]
        self._styles.append((before, after))
        n = len(self._styles) - 1
        return f"{self._nonce}{n}o{text}{self._nonce}{n}c"

    def __call__(self, line: str) -> str:
        out, at = [], 0
        for mark in self._mark.finditer(line):
            out.append(printable(line[at:mark.start()], keep="\n\t"))
            out.append(self._styles[int(mark.group(1))][mark.group(2) == "c"])
            at = mark.end()
        out.append(printable(line[at:], keep="\n\t"))
        return "".join(out)


def command_line(argv: Sequence[str]) -> str:
    """A command as a person reads it: quoted where a shell would need it."""
    import shlex

    return printable(shlex.join(argv))


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def ms(ns: int | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.0f} ms"


#: What each answer wiretape makes for an origin that never answered says
#: (``proxy.shapes.unreachable_response``).
_OWN_ANSWERS = {502: "origin unreachable", 504: "origin timed out"}


def own_answer(status: int) -> str:
    """How to name an answer wiretape made itself: ``wiretape's 502 (origin
    unreachable)``."""
    what = _OWN_ANSWERS.get(status)
    return f"wiretape's {status}" + (f" ({what})" if what else "")


def record_summary(result: RecordResult) -> list[str]:
    lines = [
        f"wiretape: recorded {result.run_id}: {result.exchanges} exchange"
        f"{'s' if result.exchanges != 1 else ''}"
        + (f" ({result.mcp_sessions} MCP session{'s' if result.mcp_sessions != 1 else ''})"
           if result.mcp_sessions else "")
        + f", {human_bytes(result.body_bytes)}, "
        f"{result.duration_s:.1f} s -> {result.path}"
    ]
    if result.tool_exchanges:
        from wiretape.model import TOOL_ORIGIN_PREFIX

        total = sum(result.tool_exchanges.values())
        hosts = ", ".join(printable(o.removeprefix(TOOL_ORIGIN_PREFIX))
                          for o in result.tool_exchanges)
        lines.append(f"wiretape: {total} of them tool exchange{'s' if total != 1 else ''} "
                     f"(--tools): {hosts}")
    if result.made_folder is not None:
        lines.append(f"wiretape: made the folder {printable(str(result.made_folder))} for the "
                     "run file (it did not exist)")
    if result.refused:
        counts: dict[tuple[int, str], int] = {}
        for key in result.refused:
            counts[key] = counts.get(key, 0) + 1
        said = ", ".join(f"{n} x {status} {code}" for (status, code), n in counts.items())
        lines.append(f"wiretape: refused before forwarding (not recorded): {said}")
    why_none = _why_nothing_recorded(result) if result.exchanges == 0 else None
    if why_none is not None:
        lines.append(f"wiretape: WARNING: NO EXCHANGE WAS RECORDED: {why_none}")
    elif result.exchanges == 0 and result.connect is not None:
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
        from wiretape.playback import text

        lines.extend(text.connect_lines(result.connect.to_json()))
    for errors, who in ((result.error_statuses, "the provider"),
                        (result.tool_error_statuses, "the tools' hosts")):
        if errors:
            said = ", ".join(f"{n} x {status}" for status, n in errors.items())
            lines.append(f"wiretape: {who} answered with errors: {said} (recorded as they were)")
    for own, who in ((result.own_statuses, "the provider"),
                     (result.tool_own_statuses, "the tool's host")):
        if own:
            said = ", ".join(f"{n} x {status}" + (f" {_OWN_ANSWERS[status]}"
                                                   if status in _OWN_ANSWERS else "")
                             for status, n in own.items())
            lines.append(f"wiretape: answered by wiretape, not {who} (the origin never "
                         f"answered): {said}")
    if any("CERTIFICATE_VERIFY_FAILED" in failure for failure in result.failures):
        lines.append("wiretape: an origin's certificate did not verify: if a private CA signs "
                     "it (a test server's), give that CA's PEM file with --upstream-ca FILE")
    if result.interrupted is not None:
        from wiretape.errors import signal_name

        lines.append(f"wiretape: interrupted by {signal_name(result.interrupted)}: it was passed "
                     "on to the agent")
    if result.exit_status not in (None, 0):
        lines.append(f"wiretape: the agent exited with status {result.exit_status}")
    if result.write_error is not None:
        lines.append(click.style(write_failure_line(result), fg="red", bold=True))
    return lines


def _why_nothing_recorded(result: RecordResult) -> str | None:
    """What happened to the agent's requests when none was recorded but the
    proxy saw them (refused before forwarding, a tunnel whose TLS the agent
    broke off); None when it saw none (the agent may not use the proxy)."""
    if any(status == 413 for status, _ in result.refused):
        return ("the agent's request was refused with 413: its body is larger than "
                "--max-body allows; record again with a larger --max-body BYTES")
    if result.refused:
        return ("every request that reached the proxy was refused before forwarding "
                "(the line above says why)")
    report = result.connect.to_json() if result.connect is not None else None
    if report is not None and report.get("rejected") and not report.get("intercepted"):
        hosts = ", ".join(sorted(report["rejected"]))
        return (f"no request came through the agent's tunnel to {hosts} (the lines below "
                "say why); it did use the proxy")
    if report is not None and report.get("intercepted"):
        hosts = ", ".join(sorted(report["intercepted"]))
        return (f"the agent opened intercepted connections to {hosts} but sent no complete "
                "request through them")
    return None


def write_failure_line(result: RecordResult) -> str:
    """What a recording whose run file could not be written lost, in one line."""
    assert result.write_error is not None
    error = result.write_error
    lost = [f"{result.not_saved} exchange{'s' if result.not_saved != 1 else ''} not saved"
            ] if result.not_saved else []
    if result.refused_unsaved:
        lost.append(f"{result.refused_unsaved} later request"
                    f"{'s' if result.refused_unsaved != 1 else ''} refused without forwarding")
    if not result.end_saved:
        lost.append("the run's end (exit status, output, changed files) not saved")
    saved = result.exchanges
    kept = (f"; the {saved} exchange{'s' if saved != 1 else ''} saved earlier "
            f"{'stays' if saved == 1 else 'stay'} readable" if saved else "")
    wal = Path(f"{error.path}-wal")
    if saved and wal.exists():
        kept += f" (partly in {wal.name} beside it: keep the two files together)"
    return (f"wiretape: error: {error.reason} while writing {error.path}: {', '.join(lost)}"
            f"{kept} (exit status {error.exit_code})")


def verdict_line(v: Verdict) -> str:
    """The verdict's line, every text from the run or the replay escaped."""
    return printable(v.line())


def explanation_lines(explanation: ExplanationJSON) -> list[str]:
    """The body of one divergence block, coloured for a terminal, its texts
    escaped."""
    from wiretape.playback import text

    escaped = Escaped()
    return [escaped(line) for line in text.explanation_lines(explanation, escaped.style)]


def verdict_details(v: Verdict) -> list[str]:
    """The divergence report, coloured for a terminal; the recorded and
    replayed texts in it (bodies, output, file names) are escaped."""
    escaped = Escaped()
    return [escaped(line) for line in v.details(escaped.style)]


def verdict_json(v: Verdict) -> str:
    import json  # (not loaded by --help)
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
    argv = command_line(info.argv) if info.argv else "(serve)"
    origins = printable(", ".join(f"{o.name}={o.upstream} (port {o.port})"
                                  for o in info.origins))
    user, host = info.extra.get("recorded_user"), info.extra.get("recorded_host")
    by = [f"  recorded by: {printable(str(user))} on {printable(str(host))}"] if user else []
    return [f"run {printable(info.run_id)}  {printable(path)}", f"  command: {argv}",
            f"  cwd: {printable(info.cwd)}", *by,
            f"  started: {when(info.started_at_ns)}  exit status: {exit_status(info)}",
            f"  origins: {origins}"]


def exit_status(info: RunInfo) -> str:
    """The recorded command's exit status as ``show`` says it; a run
    whose recording never finished (wiretape killed: no end was stored)
    says so, with what it holds."""
    if info.exit_status is not None:
        return str(info.exit_status)
    if info.ended_at_ns is None:
        return ("unknown: the recording did not finish (wiretape was stopped before "
                + ("the command ended" if info.argv else "it was closed")
                + "); the exchanges committed until then are kept")
    return "none (no command ran)" if not info.argv else "unknown"


def diff_lines(result: RunDiff, name_a: str, name_b: str) -> list[str]:
    """A run diff for a person: one block per differing pair, then a summary;
    every text from the runs escaped."""
    from wiretape.playback import text

    escaped = Escaped()
    lines = []
    for pair in result.pairs:
        route = (f"{pair.a.request.method.decode('latin-1')} "
                 f"{pair.a.request.path.decode('latin-1')}")
        if pair.same:
            lines.append(f"#{pair.a.seq} <-> #{pair.b.seq} {printable(route)}: same")
            continue
        lines.append(escaped.style(f"#{pair.a.seq} <-> #{pair.b.seq} {printable(route)}: differs",
                                   fg="red", bold=True))
        if pair.explanation is not None:
            lines.extend(text.explanation_lines(pair.explanation.to_json(), escaped.style))
        for m in pair.messages:
            if m.explanation is None:
                name, at = (name_a, m.a) if m.b is None else (name_b, m.b)
                lines.append(printable(f"  client message {m.index}: only in {name} "
                                       f"(message #{at} of the session)"))
                continue
            lines.append(f"  client message {m.index} (message #{m.a} <-> #{m.b} of the "
                         "session):")
            lines.extend(text.explanation_lines(m.explanation.to_json(), escaped.style))
    from wiretape.inspect.summary import request_summary

    for label, name, items in (
        ("only in", name_a, result.only_a),
        ("only in", name_b, result.only_b),
    ):
        for e in items:
            what = printable(f"#{e.seq} {e.request.method.decode('latin-1')} "
                             f"{e.request.target.decode('latin-1')}: {label} {name}")
            lines.append(escaped.style(what, fg="yellow")
                         + f": {printable(request_summary(e.request))}")
    lines.append(printable(
        f"wiretape: diff {name_a} -> {name_b}: {len(result.pairs)} paired exchange"
        f"{'s' if len(result.pairs) != 1 else ''}, {result.same} same, {result.differ} "
        f"differ; {len(result.only_a)} only in {name_a}, {len(result.only_b)} only in {name_b}"))
    return [escaped(line) for line in lines]
