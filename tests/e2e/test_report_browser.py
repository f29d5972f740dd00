"""The HTML report in a real browser: headless Chromium (Debian's
``chromium``, installed by ``make system``) opens the report of the demo
run after a passing strict replay and a diverging diagnostic one, with no
console message and no script error, and shows the expected counts and
the divergences side by side. The screenshot is saved under the test's
temporary directory."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(150)

CHROMIUM = shutil.which("chromium")
ENV = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_BASE")}
QUESTION = "How many pieces of fruit are listed in inventory.txt?"


def wiretape(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=90, stdin=subprocess.DEVNULL, env=ENV, check=False)


def chromium(url: str, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
         *extra, url],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make system installs it "
                                             "with apt-get when run as root)")
@pytest.mark.slow  # a long scenario: `make test-slow`
def test_report_opens_in_chromium_without_errors(tmp_path: Path,
                                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    assert wiretape("demo", "--keep-dir", str(tmp_path), cwd=tmp_path).returncode == 0
    (run,) = tmp_path.glob("demo*.wtape")
    # outside the recorded (snapshotted) directory, so the replayed agent reads it
    changed = tmp_path_factory.mktemp("ws2")
    (changed / "inventory.txt").write_text("apples: 19\npears: 25\n")
    diverged = wiretape("replay", str(run), "--diagnostic", "--", sys.executable, "-m",
                        "wiretape.examples.tool_agent", "--workspace", str(changed), QUESTION,
                        cwd=tmp_path)
    assert diverged.returncode == 3, diverged.stderr
    page = tmp_path / "report.html"
    assert wiretape("report", str(run), "-o", str(page), cwd=tmp_path).returncode == 0

    dom = chromium(page.as_uri(), tmp_path / "profile-dom", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line]
    assert console == [], console
    root = re.search(r"<html[^>]*>", dom.stdout)
    assert root is not None
    assert 'data-errors=""' in root.group(0), root.group(0)
    assert 'data-ready="3"' in root.group(0), "the page script did not run to its end"
    counts = dict(re.findall(r'data-count="([a-z-]+)">([0-9]+)<', dom.stdout))
    assert counts == {"exchanges": "3", "tool-calls": "2", "completed": "2", "pending": "0",
                      "tokens": "844", "replays": "2"}
    assert re.findall(r'data-verdict="(\w+)"', dom.stdout) == ["PASS", "FAIL"]
    kinds = re.findall(r'class="divergence" data-kind="(\w+)"', dom.stdout)
    assert kinds == ["diverged", "diverged"]
    text = html.unescape(dom.stdout)
    assert "the result of read_file (call_fake_1_0) differs at /messages/3/content" in text
    assert '"apples: 17\\npears: 25\\n"' in text and '"apples: 19\\npears: 25\\n"' in text

    shot = tmp_path / "report.png"
    taken = chromium(page.as_uri(), tmp_path / "profile-shot", f"--screenshot={shot}",
                     "--window-size=1280,2000", "--hide-scrollbars")
    assert taken.returncode == 0, taken.stderr[-2000:]
    assert [line for line in taken.stderr.splitlines() if "CONSOLE" in line] == []
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
