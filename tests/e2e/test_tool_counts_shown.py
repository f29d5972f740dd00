"""Tool exchanges (``record --tools``) where a run is looked at: their
counts in the table of ``wiretape check`` (a ``tools`` column) and the HTML
report's replays, and ``show --exchange N`` of one (its request's method,
URL, headers and body, its response's; no model fields)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_sdk_clients import child_env, explain
from test_tool_fixtures import (
    AGENT,
    CURL_PROVIDER,
    SEARCH_KEY,
    record_with_tools,
    wiretape,
)

from wiretape.intercept.ca import RunCA

pytestmark = pytest.mark.timeout(240)


def test_check_and_report_count_the_tool_exchanges(
        tmp_path: Path, upstream_ca: tuple[RunCA, Path]) -> None:
    command = ["sh", "-c", AGENT, str(CURL_PROVIDER)]
    run, rec, _ = record_with_tools(tmp_path, upstream_ca, command)
    assert rec.returncode == 0, explain(rec)
    env = {**child_env(), "SEARCH_API_KEY": SEARCH_KEY}
    checked = wiretape(["check", str(run), "-j", "1"], tmp_path, env)
    assert checked.returncode == 0, explain(checked)
    lines = checked.stdout.decode().splitlines()
    head = next(line for line in lines if line.split()[:2] == ["run", "result"])
    assert head.split() == ["run", "result", "recorded", "exact", "substituted", "diverged",
                            "missing", "unused", "tools", "outcome", "time"], lines
    row = next(line for line in lines if line.split()[:2] == ["run.wtape", "PASS"])
    assert row.split()[2:9] == ["1", "1", "0", "0", "0", "0", "2/2"], lines
    rep = wiretape(["replay", str(run), "--", *command], tmp_path, env)
    assert rep.returncode == 0, explain(rep)
    page = tmp_path / "run.html"
    assert wiretape(["report", str(run), "-o", str(page)], tmp_path).returncode == 0
    html = page.read_text()
    assert ('data-tools="2,2,0,0,0,0,0">tool exchanges: recorded 2, exact 2, substituted 0, '
            "equivalent 0, diverged 0, missing 0, unused 0") in html


def test_show_exchange_prints_a_tool_exchanges_http(
        tmp_path: Path, upstream_ca: tuple[RunCA, Path]) -> None:
    command = ["sh", "-c", AGENT, str(CURL_PROVIDER)]
    run, rec, _ = record_with_tools(tmp_path, upstream_ca, command)
    assert rec.returncode == 0, explain(rec)
    heading = wiretape(["show", str(run)], tmp_path).stdout.decode().splitlines()
    assert "  tool hosts (--tools): http://search.test:8080, https://docs.test" in heading
    shown = wiretape(["show", str(run), "--exchange", "1"], tmp_path)
    assert shown.returncode == 0, explain(shown)
    lines = shown.stdout.decode().splitlines()
    assert lines[0] == "exchange 1: GET /guide.txt -> 200", lines
    at = lines.index("request: GET https://docs.test/guide.txt")
    request = lines[at:lines.index("response: 200 OK")]
    assert "  host: docs.test" in [line.lower() for line in request], lines
    assert request[-1] == "  body: none", lines
    response = lines[lines.index("response: 200 OK"):]
    assert "  Content-Type: text/plain" in response, lines
    assert response[-2:] == ["  body, 45 B:", "    The guide says: turn left at the lighthouse."]
    assert not any("model" in line or "messages" in line for line in lines), lines
    # The search's key is masked in the headers shown.
    search = wiretape(["show", str(run), "--exchange", "2"], tmp_path).stdout.decode()
    assert "x-api-key: <redacted>" in search.lower() and SEARCH_KEY not in search, search
