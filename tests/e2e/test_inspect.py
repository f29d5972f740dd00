"""What an agent did, end to end through the CLI on a real recording (the
demo run: the example agent, the real openai SDK, the fake provider, one
strict replay): `show` (timeline, ledger, one exchange whole, JSON),
`report` (self-contained; opened in headless Chromium in
test_report_browser.py), HAR export and import, a pending tool call of an
interrupted run, and progress on a terminal."""

from __future__ import annotations

import html.parser
import json
import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from wiretape.store.runfile import RunFile
from wiretape.testing import FakeProvider, ToolCall, ToolCallTurn

pytestmark = pytest.mark.timeout(120)

ENV = {k: v for k, v in os.environ.items()
       if k not in ("OPENAI_BASE_URL", "OPENAI_API_BASE", "HTTP_PROXY", "HTTPS_PROXY")}
ENV["OPENAI_API_KEY"] = "sk-proj-" + "Q" * 40


def wiretape(
    *args: str, cwd: Path, check: bool = True, **kw: Any
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=90, stdin=subprocess.DEVNULL, env=ENV, check=False,
                          **kw)
    if check:
        assert done.returncode == 0, f"wiretape {' '.join(args)}: {done.returncode}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's run file: 3 exchanges, 2 tool calls, 1 strict replay (pass)."""
    where = tmp_path_factory.mktemp("demo")
    wiretape("demo", "--keep-dir", str(where), cwd=where)
    (run,) = where.glob("demo*.wtape")
    return run


def columns(header: str, line: str) -> dict[str, str]:
    """A table line cut at the header's column starts."""
    names = header.split("  ")
    names = [n.strip() for n in names if n.strip()]
    starts = [header.index(n) for n in names] + [len(line) + 1]
    return {n: line[starts[i]:starts[i + 1]].strip() for i, n in enumerate(names)}


def test_show_prints_the_timeline_the_ledger_and_the_replays(demo_run: Path) -> None:
    out = wiretape("show", str(demo_run), cwd=demo_run.parent).stdout.splitlines()
    header = next(line for line in out if line.startswith("seq "))
    rows = [columns(header, line) for line in out if line[:2] in ("0 ", "1 ", "2 ")]
    assert list(rows[0]) == ["seq", "at", "method", "target", "status", "model", "ttfb",
                             "duration", "frames", "bytes", "streamed", "ended", "stop", "tokens",
                             "tool calls", "excerpt"]
    assert [(r["seq"], r["method"], r["target"], r["status"], r["model"], r["streamed"],
             r["ended"], r["stop"], r["tokens"], r["tool calls"], r["excerpt"]) for r in rows] == [
        ("0", "POST", "/v1/chat/completions", "200", "gpt-4o-mini", "yes", "complete",
         "tool_calls", "214→6", "read_file", "-"),
        ("1", "POST", "/v1/chat/completions", "200", "gpt-4o-mini", "yes", "complete",
         "tool_calls", "276→4", "add", "-"),
        ("2", "POST", "/v1/chat/completions", "200", "gpt-4o-mini", "yes", "complete",
         "stop", "331→13", "-", "There are 42 pieces of fruit: 17 apples and 2..."),
    ]
    assert all(r["at"].startswith("+") and r["ttfb"].endswith(" ms") for r in rows)
    head = out.index("tool calls: 2 (2 completed, 0 pending)")
    ledger = [columns(out[head + 1], line) for line in out[head + 2:head + 4]]
    assert [tuple(r.values()) for r in ledger] == [
        ("call_fake_1_0", "read_file", '{"path": "inventory.txt"}', "#0", "completed in #1",
         "apples: 17 pears: 25"),
        ("call_fake_2_0", "add", '{"a": 17, "b": 25}', "#1", "completed in #2", "42")]
    assert out[-2] == "replays: 1"
    assert "verdict PASS (strict): recorded 3, exact 3, substituted 0, diverged 0" in out[-1]


def test_show_json_has_every_row_the_ledger_and_the_verdicts(demo_run: Path) -> None:
    data = json.loads(wiretape("show", str(demo_run), "--json", cwd=demo_run.parent).stdout)
    rows = data["exchanges"]
    assert [(r["seq"], r["status"], r["model"], r["stop_reason"], r["input_tokens"],
             r["output_tokens"], r["total_tokens"], r["tool_calls"], r["format"], r["streamed"])
            for r in rows] == [
        (0, 200, "gpt-4o-mini", "tool_calls", 214, 6, 220, ["read_file"], "openai-chat", True),
        (1, 200, "gpt-4o-mini", "tool_calls", 276, 4, 280, ["add"], "openai-chat", True),
        (2, 200, "gpt-4o-mini", "stop", 331, 13, 344, [], "openai-chat", True)]
    assert rows[2]["excerpt"] == "There are 42 pieces of fruit: 17 apples and 25 pears."
    offsets = [r["offset_ns"] for r in rows]
    assert offsets == sorted(offsets) and offsets[0] > 0
    for r in rows:  # what `show` always listed is still there
        assert {"method", "target", "origin", "frames", "bytes", "ttfb_ns", "duration_ns",
                "ending"} <= set(r)
        assert (
            0 < r["ttfb_ns"] <= r["duration_ns"] and r["frames"] > 1 and r["ending"] == "complete"
        )
    assert data["ledger"]["completed"] == 2 and data["ledger"]["pending"] == 0
    assert [(c["call_id"], c["name"], json.loads(c["arguments"]), c["issued_in"], c["answered_in"],
             c["status"], c["result"]) for c in data["ledger"]["calls"]] == [
        ("call_fake_1_0", "read_file", {"path": "inventory.txt"}, 0, 1, "completed",
         "apples: 17 pears: 25"),
        ("call_fake_2_0", "add", {"a": 17, "b": 25}, 1, 2, "completed", "42")]
    (replay,) = data["replays"]
    assert (replay["pass"], replay["exact"], replay["recorded"], replay["mode"]) == (
        True,
        3,
        3,
        "strict",
    )


def test_show_one_exchange_whole(demo_run: Path) -> None:
    data = json.loads(wiretape("show", str(demo_run), "--exchange", "1", "--frames", "--json",
                               cwd=demo_run.parent).stdout)
    assert [m["role"] for m in data["request"]["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
    ]
    assert data["request"]["messages"][3]["result_for"] == "call_fake_1_0"
    assert data["request"]["tools"] == ["read_file", "add"] and data["request"]["streamed"]
    assert data["response"]["tool_calls"] == [
        {"call_id": "call_fake_2_0", "name": "add", "arguments": '{"a": 17, "b": 25}',
         "kind": "function"}]
    assert data["response"]["usage"]["total"] == 280 and data["response"]["errors"] == []
    frames = data["frames_data"]
    assert len(frames) == data["frames"] and sum(f["size"] for f in frames) == data["bytes"]
    assert frames[-1]["text"] == "data: [DONE]\n\n"
    assert [f["offset_ns"] for f in frames] == sorted(f["offset_ns"] for f in frames)
    text = wiretape("show", str(demo_run), "--exchange", "2", cwd=demo_run.parent).stdout
    assert "  text:\n    There are 42 pieces of fruit: 17 apples and 25 pears.\n" in text
    assert "  [tool result call_fake_2_0] 42\n" in text
    missing = wiretape("show", str(demo_run), "--exchange", "7", cwd=demo_run.parent, check=False)
    assert missing.returncode == 2
    with RunFile.open(demo_run) as run:
        run_id = run.info().run_id
    assert missing.stderr.strip().splitlines() == [
        f"wiretape: error: run {run_id} has no exchange 7: its exchanges are 0, 1, 2"]


class _References(html.parser.HTMLParser):
    """Every attribute that could make a browser fetch something."""

    FETCHING = frozenset(
        {
            "src",
            "href",
            "srcset",
            "action",
            "formaction",
            "poster",
            "data",
            "background",
            "xlink:href",
            "ping",
            "manifest",
            "cite",
            "longdesc",
            "codebase",
        }
    )

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str, str]] = []
        self.tags: set[str] = set()
        self.counts: dict[str, str] = {}
        self._count: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        for name, value in attrs:
            if name in self.FETCHING:
                self.found.append((tag, name, value or ""))
            if name == "data-count":
                self._count = value

    def handle_data(self, data: str) -> None:
        if self._count is not None:
            self.counts[self._count] = data
            self._count = None


def check_self_contained(page: str) -> _References:
    refs = _References()
    refs.feed(page)
    assert refs.found == [], refs.found
    assert not refs.tags & {"link", "iframe", "object", "embed", "img", "base", "frame"}
    lowered = page.lower()
    assert "url(" not in lowered and "@import" not in lowered and "//fonts." not in lowered
    csp = ("<meta http-equiv=\"content-security-policy\" content=\"default-src 'none'; "
           "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">")
    assert csp in lowered
    return refs


def test_report_is_one_self_contained_page(demo_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    done = wiretape("report", str(demo_run), "-o", str(out), cwd=tmp_path)
    assert done.stderr.strip().endswith(f"(3 exchanges, 2 tool calls, 1 replay) -> {out}")
    page = out.read_text()
    refs = check_self_contained(page)
    assert refs.counts == {"exchanges": "3", "tool-calls": "2", "completed": "2", "pending": "0",
                           "tokens": "844", "replays": "1"}
    assert page.count('class="exchange"') == 3 and page.count('class="wf-row link"') == 3
    assert page.count('<span class="badge completed">completed</span>') == 2
    assert 'data-verdict="PASS"' in page


def test_har_export_and_import_round_trip_exactly(demo_run: Path, tmp_path: Path) -> None:
    har = tmp_path / "run.har"
    wiretape("export", str(demo_run), "--har", str(har), cwd=tmp_path)
    text = har.read_text()
    assert "sk-proj-QQQQ" not in text and "sk-test" not in text
    log = json.loads(text)["log"]
    check_har(log)
    assert [e["request"]["headers"][[h["name"].lower() for h in e["request"]["headers"]]
            .index("authorization")]["value"] for e in log["entries"]] == ["Bearer <redacted>"] * 3
    assert [len(e["_frames"]) for e in log["entries"]] == [9, 8, 15]
    stdout = wiretape("export", str(demo_run), "--har", "-", cwd=tmp_path).stdout
    assert json.loads(stdout)["log"]["entries"] == log["entries"]
    done = wiretape("import", "--har", str(har), "-o", str(tmp_path / "back.wtape"), cwd=tmp_path)
    run_id = done.stdout.strip()
    with RunFile.open(demo_run) as a, RunFile.open(tmp_path / "back.wtape") as b:
        assert b.exchanges() == a.exchanges()
        assert b.redactions() == a.redactions()
        ia, ib = a.info(), b.info()
    assert ib.run_id == run_id != ia.run_id
    assert (ib.argv, ib.cwd, ib.origins, ib.exit_status, ib.stdout, ib.started_at_ns) == (
        ia.argv, ia.cwd, ia.origins, ia.exit_status, ia.stdout, ia.started_at_ns)
    assert ib.extra["source_run_id"] == ia.run_id


def check_har(log: dict[str, Any]) -> None:
    """The members HAR 1.2 requires (w3c.github.io/web-performance/specs/HAR)."""
    assert log["version"] == "1.2" and {"name", "version"} <= set(log["creator"])
    for e in log["entries"]:
        assert {"startedDateTime", "time", "request", "response", "cache", "timings"} <= set(e)
        assert {"method", "url", "httpVersion", "cookies", "headers", "queryString",
                "headersSize", "bodySize"} <= set(e["request"])
        assert {"status", "statusText", "httpVersion", "cookies", "headers", "content",
                "redirectURL", "headersSize", "bodySize"} <= set(e["response"])
        assert {"size", "mimeType"} <= set(e["response"]["content"])
        t = e["timings"]
        assert {"send", "wait", "receive"} <= set(t)
        assert abs(sum(t[k] for k in ("send", "wait", "receive")) - e["time"]) < 0.01
        assert e["startedDateTime"].endswith("Z")


def test_an_interrupted_run_leaves_its_tool_call_pending(tmp_path: Path) -> None:
    run = tmp_path / "cut.wtape"
    body = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "read"}]})
    with FakeProvider([ToolCallTurn([ToolCall("read_file", {"path": "notes.txt"})])]) as fp:
        wiretape("record", "-o", str(run), "--upstream", f"openai={fp.url}/v1", "--",
                 "sh", "-c", 'curl -s -X POST "$OPENAI_BASE_URL/chat/completions" '
                 f"-H 'content-type: application/json' -d '{body}'", cwd=tmp_path)
    data = json.loads(wiretape("show", str(run), "--json", cwd=tmp_path).stdout)
    assert data["ledger"]["completed"] == 0 and data["ledger"]["pending"] == 1
    assert [
        (c["call_id"], c["name"], c["status"], c["answered_in"]) for c in data["ledger"]["calls"]
    ] == [("call_fake_1_0", "read_file", "pending", None)]
    out = tmp_path / "cut.html"
    wiretape("report", str(run), "-o", str(out), cwd=tmp_path)
    counts = check_self_contained(out.read_text()).counts
    assert (counts["tool-calls"], counts["completed"], counts["pending"]) == ("1", "0", "1")


def test_long_operations_show_progress_on_a_terminal_only(demo_run: Path, tmp_path: Path) -> None:
    har = tmp_path / "run.har"
    piped = wiretape("export", str(demo_run), "--har", str(har), cwd=tmp_path)
    assert "\r" not in piped.stderr and "exporting" not in piped.stderr
    controller, terminal = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "wiretape", "import", "--har", str(har), "-o",
                               str(tmp_path / "tty.wtape")], cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=terminal, stdin=subprocess.DEVNULL, env=ENV, timeout=90,
                              check=False)
        os.close(terminal)
        seen = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(controller)
    assert done.returncode == 0
    text = seen.decode()
    assert "\r\x1b[2Kimporting [####################] 3/3 (100%)" in text
    assert "wiretape: imported 3 exchanges into" in text
