"""Turning results into text for a person. The only printing is done by
the CLI module with what these functions return."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

from wiretape.launch.record import RecordResult
from wiretape.model import Exchange, RunInfo
from wiretape.playback.verdict import Verdict


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
    if result.exchanges == 0:
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
    return lines


def verdict_line(v: Verdict) -> str:
    status = "PASS" if v.passed else "FAIL"
    if v.mode == "diagnostic" and not v.passed:
        status = "FAIL (diagnostic)"
    outcome = ", ".join(
        f"{name} {'same' if facet.get('same') else 'not compared' if facet.get('same') is None else 'differs'}"
        for name, facet in v.outcome.items() if name != "stopped"
    ) or "not compared"
    extra = "" if v.complete else " [replay did not finish]"
    stopped = v.outcome.get("stopped", {}).get("reason") if v.outcome else None
    tail = f"; stopped at {stopped}" if stopped else ""
    return (
        f"wiretape: verdict {status}{extra} ({v.mode}): recorded {v.recorded}, exact {v.exact}, "
        f"substituted {v.substituted}, diverged {v.diverged}, missing {v.missing}, "
        f"unused {v.unused}; outcome: {outcome}{tail}"
    )


def verdict_details(v: Verdict) -> list[str]:
    lines = []
    for row in v.requests:
        if row["kind"] == "exact":
            continue
        detail = row.get("detail", {})
        where = f"recorded #{row['seq']}" if row.get("seq") is not None else "no recorded counterpart"
        fields = ", ".join(detail.get("fields", [])) or "-"
        lines.append(f"  request {row['index']} {row['method']} {row['target']}: {row['kind']} "
                     f"({where}; differs in: {fields})")
    if v.unused_seqs:
        lines.append("  unused recorded exchanges: " + ", ".join(f"#{s}" for s in v.unused_seqs))
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


def show_rows(exchanges: Sequence[Exchange]) -> list[list[str]]:
    rows = []
    for e in exchanges:
        resp = e.response
        streamed = "-"
        if resp is not None:
            ctype = next((v for k, v in resp.headers if k.lower() == b"content-type"), b"")
            chunked = any(k.lower() == b"transfer-encoding" for k, _ in resp.headers)
            streamed = "yes" if b"event-stream" in ctype or (chunked and len(resp.frames) > 1) else "no"
        target = e.request.target.decode("latin-1")
        rows.append([
            str(e.seq), e.request.method.decode(), target if len(target) <= 48 else target[:45] + "...",
            str(resp.status) if resp else "-", streamed, str(len(resp.frames)) if resp else "0",
            human_bytes(len(resp.body)) if resp else "-", ms(e.ttfb_ns), ms(e.duration_ns),
            e.ending.value,
        ])
    return rows


SHOW_HEADER = ["seq", "method", "target", "status", "streamed", "frames", "bytes", "ttfb",
               "duration", "ended"]


def run_heading(info: RunInfo, path: str) -> list[str]:
    argv = " ".join(info.argv) or "(serve)"
    origins = ", ".join(f"{o.name}={o.upstream} (port {o.port})" for o in info.origins)
    return [f"run {info.run_id}  {path}", f"  command: {argv}", f"  cwd: {info.cwd}",
            f"  started: {when(info.started_at_ns)}  exit status: {info.exit_status}",
            f"  origins: {origins}"]


def show_json(info: RunInfo, exchanges: Sequence[Exchange]) -> dict[str, Any]:
    return {
        "run_id": info.run_id, "argv": list(info.argv), "cwd": info.cwd,
        "exit_status": info.exit_status,
        "exchanges": [
            {"seq": e.seq, "method": e.request.method.decode(), "target": e.request.target.decode("latin-1"),
             "origin": e.origin, "status": e.response.status if e.response else None,
             "frames": len(e.response.frames) if e.response else 0,
             "bytes": len(e.response.body) if e.response else 0, "ttfb_ns": e.ttfb_ns,
             "duration_ns": e.duration_ns, "ending": e.ending.value}
            for e in exchanges
        ],
    }
