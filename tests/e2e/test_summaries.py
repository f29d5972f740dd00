"""Summaries that tell the truth: a recording names the agent's non-zero
exit and the provider's error answers (a count per status); ``ls`` shows
the agent's exit status and the latest verdict; the verdict shows both exit
codes when they differ, and the first lines of a failed agent's stderr.

Real processes; the provider is a small HTTP server of the test's own that
answers 200, then 500.
"""

from __future__ import annotations

import http.server
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

PROBE = str(Path(__file__).resolve().parent / "clients_modes" / "probe.py")
_SCRUB = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY",
          "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "WIRETAPE_HOME")
ANSWER = {"id": "c1", "object": "chat.completion", "model": "m",
          "choices": [{"index": 0, "finish_reason": "stop",
                       "message": {"role": "assistant", "content": "fine"}}]}


class _Provider(http.server.BaseHTTPRequestHandler):
    """200 for the first request, 500 for every later one."""

    answered = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        type(self).answered += 1
        status, body = ((200, ANSWER) if type(self).answered == 1 else
                        (500, {"error": {"message": "the model is overloaded", "type": "server"}}))
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def provider() -> Iterator[str]:
    handler = type("Provider", (_Provider,), {"answered": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def wiretape(*args: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(PYTHONUNBUFFERED="1", NO_PROXY="127.0.0.1", OPENAI_API_KEY="sk-test", **extra)
    return subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)


@pytest.mark.slow  # a long scenario: make test-slow
def test_a_failed_recording_says_so_and_ls_and_the_verdict_show_exit_codes(
        provider: str, tmp_path: Path) -> None:
    store = tmp_path / "store"
    run = store / "runs" / "run_00000000f001.wtape"
    done = wiretape("record", "-o", str(run), "--no-snapshot", "--upstream",
                    f"openai={provider}", "--", sys.executable, PROBE, "hi", "--count", "3",
                    "--raw", cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # the agent's own status
    lines = done.stderr.splitlines()
    assert lines[0].startswith("wiretape: recorded run_") and ": 2 exchanges," in lines[0]
    assert lines[1:] == [
        # -o named a folder that was not there: made, and said so
        f"wiretape: made the folder {store} for the run file (it did not exist)",
        "wiretape: the provider answered with errors: 1 x 500 (recorded as they were)",
        "wiretape: the agent exited with status 1"], done.stderr

    # A replay whose agent exits otherwise, complaining on stderr.
    complaint = "; ".join(f"echo 'complaint {i}' >&2" for i in range(1, 16))
    done = wiretape("replay", str(run), "--", "sh", "-c", f"{complaint}; exit 3", cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    lines = done.stderr.splitlines()
    verdict = next(ln for ln in lines if ln.startswith("wiretape: verdict "))
    assert "outcome: exit_status differs (1 -> 3), stdout differs" in verdict, verdict
    at = lines.index("exit status: recorded 1, replay 3")
    command = shlex.join(["sh", "-c", f"{complaint}; exit 3"])
    assert lines[at + 1] == f"  the agent exited with status 3: {command[:197]}..."
    assert lines[at + 2: at + 16] == [
        "  the agent's stderr:",
        *(f"    complaint {i}" for i in range(1, 9)),
        "    ... (3 more lines)",
        *(f"    complaint {i}" for i in range(12, 16))], done.stderr

    # With WIRETAPE_HOME set, replay logs live in its replays folder too.
    shutil.copytree(Path(os.environ["XDG_STATE_HOME"]) / "wiretape" / "replays",
                    store / "replays", dirs_exist_ok=True)
    listed = wiretape("ls", cwd=tmp_path, WIRETAPE_HOME=str(store))
    header, row = listed.stdout.splitlines()
    assert header.split() == ["run", "when", "command", "exchanges", "exit", "last", "verdict"]
    assert row.split()[-5:] == ["2", "1", "fail", "(exit", "3)"], row
    [data] = json.loads(wiretape("ls", "--json", cwd=tmp_path,
                                 WIRETAPE_HOME=str(store)).stdout)
    assert data["exit_status"] == 1 and data["last_verdict"] == "fail"
    assert data["last_verdict_exit_code"] == 3


class _Gateway(http.server.BaseHTTPRequestHandler):
    """A provider whose own gateway answers 502 to everything."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        data = json.dumps({"error": {"message": "upstream overloaded", "type": "server"}}).encode()
        self.send_response(502)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port bound but not listening: connecting to it is refused."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_an_origin_that_never_answered_is_wiretapes_answer_not_a_provider_error(
        closed_port: int, tmp_path: Path) -> None:
    """The 502 wiretape gives the agent for an unreachable origin is named
    as wiretape's, in the recording's summary and in ``show``; it is not
    counted among the provider's errors."""
    run = tmp_path / "unreachable.wtape"
    done = wiretape("record", "-o", str(run), "--no-snapshot", "--upstream",
                    f"openai=http://127.0.0.1:{closed_port}/v1", "--", sys.executable, PROBE,
                    "hi", "--raw", cwd=tmp_path)
    lines = done.stderr.splitlines()
    assert lines[0].startswith("wiretape: recorded run_") and ": 1 exchange," in lines[0]
    assert lines[1].startswith("wiretape: exchange #0 origin_unreachable: "), done.stderr
    assert lines[2] == ("wiretape: answered by wiretape, not the provider (the origin never "
                        "answered): 1 x 502 origin unreachable"), done.stderr
    assert not any("the provider answered with errors" in line for line in lines), done.stderr

    shown = wiretape("show", str(run), "--exchange", "0", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    head = shown.stdout.splitlines()
    assert head[0] == ("exchange 0: POST /v1/chat/completions -> wiretape's 502 (origin "
                       "unreachable), not the provider's"), shown.stdout
    assert any(line.startswith("answer made by wiretape (") for line in head), shown.stdout


@pytest.mark.slow  # a long scenario: make test-slow
def test_a_502_from_the_provider_itself_is_the_providers_error(tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Gateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    run = tmp_path / "gateway.wtape"
    try:
        done = wiretape("record", "-o", str(run), "--no-snapshot", "--upstream",
                        f"openai=http://127.0.0.1:{server.server_address[1]}/v1", "--",
                        sys.executable, PROBE, "hi", "--raw", cwd=tmp_path)
    finally:
        server.shutdown()
        server.server_close()
    lines = done.stderr.splitlines()
    assert "wiretape: the provider answered with errors: 1 x 502 (recorded as they were)" \
        in lines, done.stderr
    assert not any("answered by wiretape" in line for line in lines), done.stderr
    shown = wiretape("show", str(run), "--exchange", "0", cwd=tmp_path)
    first = shown.stdout.splitlines()[0]
    assert first == "exchange 0: POST /v1/chat/completions -> 502", shown.stdout
