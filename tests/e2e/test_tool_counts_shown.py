"""The tool exchanges' counts (``record --tools``) where a run's replays
are summed up: the table of ``wiretape check`` (a ``tools`` column) and
the HTML report's replays."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_sdk_clients import child_env, explain
from test_tool_fixtures import (  # noqa: F401  (upstream_ca: a fixture)
    AGENT,
    CURL_PROVIDER,
    SEARCH_KEY,
    record_with_tools,
    upstream_ca,
    wiretape,
)

from wiretape.intercept.ca import RunCA

pytestmark = pytest.mark.timeout(240)


def test_check_and_report_count_the_tool_exchanges(
        tmp_path: Path, upstream_ca: tuple[RunCA, Path]) -> None:  # noqa: F811
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
