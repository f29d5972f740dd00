"""Stdio MCP servers as fixtures (DESIGN.md, "MCP servers"): an agent with
a real MCP client (the ``mcp`` SDK's stdio client, which gives its server
a reduced environment) starts ``wiretape mcp -- notes-server`` as its
server; ``wiretape record`` stores the session's JSON-RPC messages; a
replay answers the agent from the run with the server's command gone from
PATH, and a changed tool argument diverges, naming the MCP method and the
pointer. Bad input is one line each.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from wiretape.launch.isolate import capabilities
from wiretape.testing import FakeProvider, script_from_json

CAPS = capabilities()

HERE = Path(__file__).resolve().parent / "clients_mcp"
AGENT = str(HERE / "mcp_agent.py")
SERVER = str(HERE / "notes_server.py")
SRC = str(Path(__file__).resolve().parents[2] / "src")
TURNS = [{"tool_calls": [{"name": "read_note", "arguments": {"name": "launch"}}]},
         {"text": "The note says the code is 7-ALPHA-9.", "expect": "7-ALPHA-9"}]
INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "sh", "version": "1"}}})

_SCRUB = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY",
          "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "WIRETAPE_MCP")


class Scene:
    """A folder with ``bin/wiretape`` (this checkout: an MCP client passes
    its server no PYTHONPATH), ``servers/notes-server`` (the MCP server,
    on PATH only while recording) and a store."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.servers = root / "servers"
        for folder in (self.bin, self.servers):
            folder.mkdir(parents=True, exist_ok=True)
        self._script(self.bin / "wiretape",
                     f'PYTHONPATH={SRC} exec {sys.executable} -m wiretape "$@"')
        self._script(self.servers / "notes-server", f'exec {sys.executable} {SERVER} "$@"')
        self.run = root / "run.wtape"

    @staticmethod
    def _script(path: Path, line: str) -> None:
        path.write_text(f"#!/bin/sh\n{line}\n")
        path.chmod(0o755)

    def env(self, *, server_on_path: bool) -> dict[str, str]:
        out = {k: v for k, v in os.environ.items() if k not in _SCRUB}
        path = [str(self.bin), *([str(self.servers)] if server_on_path else []),
                os.environ.get("PATH", "")]
        out.update(OPENAI_API_KEY="sk-mcp-test", PYTHONUNBUFFERED="1", NO_PROXY="127.0.0.1",
                   WIRETAPE_HOME=str(self.root / "store"), PATH=os.pathsep.join(path),
                   PYTHONPATH=SRC)
        return out

    def wiretape(self, *args: str, server_on_path: bool = False,
                 timeout: float = 90) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=self.root,
                              env=self.env(server_on_path=server_on_path), capture_output=True,
                              text=True, timeout=timeout)

    def agent(self, note: str) -> list[str]:
        return [sys.executable, AGENT, note, "--", "wiretape", "mcp", "--name", "notes", "--",
                "notes-server"]


def verdict_of(stdout: str) -> dict[str, object]:
    """The verdict ``replay --json`` printed after what the agent did."""
    start = stdout.index('{\n  "run_id"')
    verdict: dict[str, object] = json.loads(stdout[start:])
    return verdict


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Scene:
    scene = Scene(tmp_path_factory.mktemp("mcp"))
    with FakeProvider(script_from_json(TURNS)) as fp:
        done = scene.wiretape("record", "-o", str(scene.run), "--no-snapshot", "--upstream",
                              f"openai={fp.url}/v1", "--", *scene.agent("launch"),
                              server_on_path=True)
    assert done.returncode == 0, done.stderr
    assert "The note says the code is 7-ALPHA-9." in done.stdout
    return scene


def test_the_session_is_recorded_with_its_messages(recorded: Scene) -> None:
    from wiretape.store.runfile import RunFile

    with RunFile.open(recorded.run) as run:
        exchanges = run.exchanges()
    sessions = [e for e in exchanges if e.kind == "mcp"]
    assert [e.origin for e in sessions] == ["mcp:notes"]
    (session,) = sessions
    assert json.loads(session.request.body) == {"command": ["notes-server"]}
    methods = [json.loads(m.payload).get("method") for m in session.messages
               if m.direction == "client"]
    assert methods == ["initialize", "notifications/initialized", "tools/list", "tools/call"]
    served = [json.loads(m.payload) for m in session.messages if m.direction == "server"]
    assert served[-1]["result"]["content"][0]["text"] == "The launch code is 7-ALPHA-9."
    offsets = [m.offset_ns for m in session.messages]
    assert offsets == sorted(offsets) and offsets[0] >= 0
    # the model's two calls are stored as before
    assert [e.request.target for e in exchanges if e.kind == "model"] == [
        b"/v1/chat/completions"] * 2


def test_show_lists_the_mcp_call_next_to_the_models_tool_call(recorded: Scene) -> None:
    done = recorded.wiretape("show", str(recorded.run))
    assert done.returncode == 0, done.stderr
    assert "MCP session of server 'notes', 7 messages (4 from the client" in done.stdout
    ledger = next(line for line in done.stdout.splitlines() if "call_fake_1_0" in line
                  and "read_note" in line and "completed" in line)
    assert "mcp notes #0 message #5" in ledger
    data = json.loads(recorded.wiretape("show", str(recorded.run), "--json").stdout)
    calls = data["mcp_calls"]
    assert [(c["method"], c["tool"], c["caused_by"]) for c in calls] == [
        ("tools/list", None, None), ("tools/call", "read_note", "call_fake_1_0")]
    assert calls[1]["arguments"] == '{"name": "launch"}'
    assert calls[1]["result"] == "The launch code is 7-ALPHA-9."
    report = recorded.root / "r.html"
    assert recorded.wiretape("report", str(recorded.run), "-o", str(report)).returncode == 0
    html = report.read_text()
    assert "MCP session of server notes: 7 messages" in html
    assert 'data-mcp="0:5">MCP notes #0 message #5' in html
    har = recorded.root / "r.har"
    assert recorded.wiretape("export", str(recorded.run), "--har", str(har)).returncode == 0
    entry = json.loads(har.read_text())["log"]["entries"][0]
    assert (entry["request"]["url"], len(entry["_webSocketMessages"])) == ("mcp://notes/stdio", 7)
    again = recorded.root / "again.wtape"
    assert recorded.wiretape("import", "--har", str(har), "-o", str(again)).returncode == 0
    copy = json.loads(recorded.wiretape("show", str(again), "--json").stdout)
    assert copy["exchanges"][0]["origin"] == "mcp:notes"
    assert copy["mcp_calls"] == calls


def test_replay_answers_from_the_run_without_the_server(recorded: Scene) -> None:
    done = recorded.wiretape("replay", str(recorded.run), "--json", "--",
                             *recorded.agent("launch"))
    assert done.returncode == 0, done.stderr
    verdict: Any = verdict_of(done.stdout)
    assert verdict["pass"] is True
    assert (verdict["recorded"], verdict["exact"]) == (2, 2)
    mcp = verdict["mcp"]
    assert mcp["sessions"] == {"recorded": 1, "played": 1, "missing": 0, "unused": 0}
    assert (mcp["exact"], mcp["diverged"], mcp["missing"], mcp["unused"]) == (4, 0, 0, 0)
    assert "messages" not in verdict  # (no WebSocket session)
    line = recorded.wiretape("verdict", str(recorded.run)).stdout.splitlines()[0]
    assert "; mcp: sessions 1/1, exact 4, diverged 0, missing 0, unused 0;" in line


@pytest.mark.skipif(not CAPS.network_namespaces,
                    reason=CAPS.reasons.get("network_namespaces", ""))
@pytest.mark.slow  # a long scenario: make test-slow
def test_an_offline_agent_reaches_the_replay_in_its_own_network(recorded: Scene) -> None:
    """With --offline the agent has only its own loopback: the hub listens there."""
    done = recorded.wiretape("replay", str(recorded.run), "--offline", "--json", "--",
                             *recorded.agent("launch"))
    assert done.returncode == 0, done.stderr
    verdict: Any = verdict_of(done.stdout)
    assert verdict["mcp"]["exact"] == 4 and verdict["pass"] is True


def test_a_changed_tool_argument_diverges_naming_the_method(recorded: Scene) -> None:
    done = recorded.wiretape("replay", str(recorded.run), "--json", "--",
                             *recorded.agent("lunch"))
    assert done.returncode == 3, done.stderr
    verdict: Any = verdict_of(done.stdout)
    assert verdict["pass"] is False
    assert (verdict["mcp"]["exact"], verdict["mcp"]["diverged"]) == (3, 1)
    stopped = verdict["outcome"]["stopped"]["reason"]
    assert stopped == ("diverged message #5 (client tools/call read_note) of MCP server "
                       "'notes' at /params/arguments/name")
    (row,) = [r for r in verdict["requests"] if r["method"] == "MCP"]
    (decision,) = [d for d in row["detail"]["messages"]["decisions"] if d["kind"] != "exact"]
    assert decision["method"] == "tools/call read_note"
    span = decision["explanation"]["spans"][0]
    assert (span["pointer"], span["recorded"], span["live"]) == (
        "/params/arguments/name", "launch", "lunch")
    # the shim told the agent in one line what stopped it
    said = [line for line in done.stderr.splitlines() if line.startswith("wiretape mcp")]
    assert said == ["wiretape mcp (notes): wiretape replay: message #5 (client tools/call "
                    "read_note) diverged at /params/arguments/name"]


def test_a_replay_of_a_run_without_mcp_messages_says_so(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    with FakeProvider(script_from_json([{"text": "hi"}])) as fp:
        done = scene.wiretape("record", "-o", str(scene.run), "--no-snapshot", "--upstream",
                              f"openai={fp.url}/v1", "--", "sh", "-c", "true")
    assert done.returncode == 0, done.stderr
    done = scene.wiretape("replay", str(scene.run), "--json", "--", "sh", "-c",
                          f"echo '{INITIALIZE}' | wiretape mcp --name notes -- notes-server")
    said = [line for line in done.stderr.splitlines() if line.startswith("wiretape mcp")]
    assert said == ["wiretape mcp (notes): wiretape replay: no recorded session of MCP server "
                    "'notes' is left (missing; the run recorded no MCP session: record it with "
                    "the server's command behind `wiretape mcp --`)"]
    verdict: Any = verdict_of(done.stdout)
    assert verdict["pass"] is False
    assert verdict["mcp"]["sessions"] == {"recorded": 0, "played": 0, "missing": 1, "unused": 0}


@pytest.fixture(scope="module")
def banner_recorded(tmp_path_factory: pytest.TempPathFactory,
                    ) -> tuple[Scene, subprocess.CompletedProcess[str]]:
    """The agent's session with ``notes-server --banner`` (a line that is
    not JSON on stdout as it starts, naming a key, and one more before
    ``tools/list``'s answer), recorded."""
    scene = Scene(tmp_path_factory.mktemp("mcp-banner"))
    with FakeProvider(script_from_json(TURNS)) as fp:
        done = scene.wiretape("record", "-o", str(scene.run), "--no-snapshot", "--upstream",
                              f"openai={fp.url}/v1", "--", *scene.agent("launch"), "--banner",
                              server_on_path=True)
    return scene, done


def test_a_server_that_writes_what_is_not_json_is_relayed_and_recorded(
        banner_recorded: tuple[Scene, subprocess.CompletedProcess[str]]) -> None:
    """MCP clients skip a stdout line that is not JSON and go on: so does
    the shim, which passes it on, records it in its place, and says so
    once."""
    scene, done = banner_recorded
    assert done.returncode == 0, done.stderr
    assert "The note says the code is 7-ALPHA-9." in done.stdout
    said = [line for line in done.stderr.splitlines() if line.startswith("wiretape mcp")]
    assert said == ["wiretape mcp: MCP server 'notes' wrote a line that is not JSON to stdout: "
                    "b'Starting notes server v1.2 (key <redacted*******************'...; passed"
                    " on to its client as received and recorded (the MCP stdio "
                    "transport expects only JSON-RPC messages on stdout: a server should log "
                    "to stderr)"]
    from wiretape.store.runfile import RunFile

    with RunFile.open(scene.run) as run:
        (session,) = [e for e in run.exchanges() if e.kind == "mcp"]
    assert session.error is None
    texts = [m.payload for m in session.messages if not m.payload.startswith(b"{")]
    assert texts[0].startswith(b"Starting notes server v1.2 (key ")
    assert texts[1:] == [b"listing 1 tool"]
    order = [(m.direction, m.payload if m.payload in texts else
              json.loads(m.payload).get("method")) for m in session.messages]
    assert order.index(("client", "tools/list")) + 1 == order.index(
        ("server", b"listing 1 tool"))
    assert len(session.messages) == 9
    # show, report and the HAR export read the lines as text
    shown = scene.wiretape("show", str(scene.run))
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    assert "MCP session of server 'notes', 9 messages" in shown.stdout
    data = json.loads(scene.wiretape("show", str(scene.run), "--json").stdout)
    assert [c["method"] for c in data["mcp_calls"]] == ["tools/list", "tools/call"]
    report = scene.root / "r.html"
    made = scene.wiretape("report", str(scene.run), "-o", str(report))
    assert made.returncode == 0, made.stderr
    assert "listing 1 tool" in report.read_text()
    har = scene.root / "r.har"
    made = scene.wiretape("export", str(scene.run), "--har", str(har))
    assert made.returncode == 0, made.stderr
    frames = json.loads(har.read_text())["log"]["entries"][0]["_webSocketMessages"]
    assert "listing 1 tool" in [f["data"] for f in frames]


def test_a_key_in_a_servers_banner_line_is_not_stored(
        banner_recorded: tuple[Scene, subprocess.CompletedProcess[str]]) -> None:
    scene, done = banner_recorded
    assert done.returncode == 0, done.stderr
    key = b"sk-proj-" + b"Q7w9E2r4T6y8U1i3O5p7" * 2
    stored = scene.run.read_bytes()
    assert key not in stored and key[:24] not in stored
    from wiretape.store.runfile import RunFile

    with RunFile.open(scene.run) as run:
        (session,) = [e for e in run.exchanges() if e.kind == "mcp"]
        facts = [fact.location for _, fact in run.redactions()]
    banner = next(m.payload for m in session.messages if m.payload.startswith(b"Starting"))
    assert banner.startswith(b"Starting notes server v1.2 (key ") and key not in banner
    assert banner.endswith(b")...") and "server-message" in facts


def test_a_replay_writes_the_lines_that_are_not_json_back(
        banner_recorded: tuple[Scene, subprocess.CompletedProcess[str]]) -> None:
    """Replayed strict with the server gone: the same answer, every message
    exact, the banner line and the stray one written back in their places."""
    scene, recorded = banner_recorded
    assert recorded.returncode == 0, recorded.stderr
    done = scene.wiretape("replay", str(scene.run), "--json", "--", *scene.agent("launch"),
                          "--banner")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("The note says the code is 7-ALPHA-9.\n")
    verdict: Any = verdict_of(done.stdout)
    assert verdict["pass"] is True and verdict["outcome"]["stdout"]["same"] is True
    mcp = verdict["mcp"]
    assert mcp["sessions"] == {"recorded": 1, "played": 1, "missing": 0, "unused": 0}
    assert (mcp["exact"], mcp["diverged"], mcp["missing"], mcp["unused"]) == (4, 0, 0, 0)
    (row,) = [r for r in verdict["requests"] if r["method"] == "MCP"]
    assert row["detail"]["messages"]["not_sent"] == []


def test_a_server_command_that_does_not_exist_is_one_line(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    # outside a recording, and under one
    done = scene.wiretape("mcp", "--", "no-such-mcp-server", "--flag")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "wiretape: error: cannot run command 'no-such-mcp-server': not found on PATH: check "
        "the MCP server's command in the agent's MCP config"]
    with FakeProvider(script_from_json([{"text": "hi"}])) as fp:
        done = scene.wiretape(
            "record", "-o", str(scene.run), "--no-snapshot", "--upstream", f"openai={fp.url}/v1",
            "--", "sh", "-c", f"echo '{INITIALIZE}' | wiretape mcp -- no-such-mcp-server")
    assert done.returncode == 2
    # the shim's line (the record's summary names the session that failed too)
    assert [line for line in done.stderr.splitlines() if line.startswith("wiretape: error")] == [
        "wiretape: error: cannot run command 'no-such-mcp-server': not found on PATH: check "
        "the MCP server's command in the agent's MCP config"]


def test_outside_wiretape_the_server_runs_unrecorded(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    done = subprocess.run([sys.executable, "-m", "wiretape", "mcp", "--", "notes-server"],
                          input=INITIALIZE + "\n", env=scene.env(server_on_path=True),
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"]["serverInfo"]["name"] == "notes"
    assert done.stderr.splitlines() == [
        "wiretape mcp: not under `wiretape record` or `wiretape replay` (WIRETAPE_MCP is not "
        "set): running MCP server 'notes-server' unrecorded", "notes server: started"]


def _serve(scene: Scene, *args: str) -> tuple[subprocess.Popen[str], list[str], dict[str, str]]:
    """``wiretape serve ARGS`` started as its own process: it, the lines it
    printed once listening (the URL first, then the export), and the
    environment for an agent started apart from it (the model's base URL
    and ``WIRETAPE_MCP``, as printed)."""
    proc = subprocess.Popen([sys.executable, "-m", "wiretape", "serve", *args], cwd=scene.root,
                            env=scene.env(server_on_path=False), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    import threading

    # A serve that never prints the second line is stopped, not waited on.
    watchdog = threading.Timer(90, proc.kill)
    watchdog.start()
    try:
        lines = [proc.stdout.readline(), proc.stdout.readline()]
    finally:
        watchdog.cancel()
    if not all(lines) or proc.poll() is not None:
        proc.kill()
        raise AssertionError(f"serve printed {lines!r}: {proc.communicate()[1]}")
    label, _, url = lines[0].strip().partition(": ")
    assert label == "openai" and url.startswith("http://127.0.0.1:"), lines
    name, _, value = shlex.split(lines[1])[-1].partition("=")
    return proc, lines, {"OPENAI_BASE_URL": url, name: value}


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    import signal

    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def _agent_under_serve(scene: Scene, *args: str, server_on_path: bool,
                       ) -> tuple[subprocess.CompletedProcess[str], int, str, str, dict[str, str]]:
    """``wiretape serve ARGS`` started, the agent run apart from it with the
    variables serve printed, serve stopped: (the agent's result, serve's
    exit status, stdout and stderr, the variables)."""
    proc, lines, env = _serve(scene, *args)
    try:
        assert lines[1].startswith("export WIRETAPE_MCP=tcp://127.0.0.1:"), lines
        agent = subprocess.run(scene.agent("launch"),
                               env={**scene.env(server_on_path=server_on_path), **env},
                               capture_output=True, text=True, timeout=90)
    finally:
        code, out, err = _stop(proc)
    return agent, code, out, err, env


def test_serve_prints_where_mcp_servers_are_recorded_and_replayed(tmp_path: Path) -> None:
    """An agent started apart from ``wiretape serve`` with the variable it
    printed: its MCP server's session is recorded by ``serve --record``,
    then answered by ``serve --replay`` with the server gone from PATH, and
    serve's verdict counts every message exact."""
    scene = Scene(tmp_path)
    with FakeProvider(script_from_json(TURNS)) as fp:
        agent, code, _, err, env = _agent_under_serve(
            scene, "--record", "--upstream", f"openai={fp.url}/v1", "-o", str(scene.run),
            server_on_path=True)
    assert agent.returncode == 0, agent.stderr
    assert agent.stdout == "The note says the code is 7-ALPHA-9.\n"
    assert code == 0, err
    assert "wiretape mcp: not under" not in agent.stderr
    from wiretape.store.runfile import RunFile

    with RunFile.open(scene.run) as run:
        exchanges = run.exchanges()
    (session,) = [e for e in exchanges if e.kind == "mcp"]
    assert session.origin == "mcp:notes"
    methods = [json.loads(m.payload).get("method") for m in session.messages
               if m.direction == "client"]
    assert methods == ["initialize", "notifications/initialized", "tools/list", "tools/call"]
    served = [json.loads(m.payload) for m in session.messages if m.direction == "server"]
    assert served[-1]["result"]["content"][0]["text"] == "The launch code is 7-ALPHA-9."
    assert len([e for e in exchanges if e.kind == "model"]) == 2

    agent, code, out, err, replay_env = _agent_under_serve(
        scene, "--replay", str(scene.run), "--json", server_on_path=False)
    assert replay_env["WIRETAPE_MCP"] != env["WIRETAPE_MCP"]
    assert agent.returncode == 0, agent.stderr
    assert agent.stdout == "The note says the code is 7-ALPHA-9.\n"
    assert code == 0, err
    verdict: Any = verdict_of(out)
    assert verdict["pass"] is True
    assert (verdict["recorded"], verdict["exact"]) == (2, 2)
    mcp = verdict["mcp"]
    assert mcp["sessions"] == {"recorded": 1, "played": 1, "missing": 0, "unused": 0}
    assert (mcp["exact"], mcp["diverged"], mcp["missing"], mcp["unused"]) == (4, 0, 0, 0)
    assert "; mcp: sessions 1/1, exact 4, diverged 0, missing 0, unused 0;" in err


def test_the_python_proxies_hand_an_agent_process_the_mcp_variable(tmp_path: Path) -> None:
    """``wiretape.recording()`` / ``replaying()`` (and so the pytest
    plugin's ``wiretape_proxy``): ``proxy.env`` in an agent process's
    environment records, then replays, the MCP servers it starts."""
    import wiretape

    scene = Scene(tmp_path)
    with FakeProvider(script_from_json(TURNS)) as fp, wiretape.recording(
            {"openai": f"{fp.url}/v1"}, out=scene.run) as recording:
        assert list(recording.env) == ["WIRETAPE_MCP"]
        agent = subprocess.run(scene.agent("launch"), env={
            **scene.env(server_on_path=True), "OPENAI_BASE_URL": recording.url,
            **recording.env}, capture_output=True, text=True, timeout=90)
    assert agent.returncode == 0, agent.stderr
    assert agent.stdout == "The note says the code is 7-ALPHA-9.\n"
    assert recording.run.exchanges == 3  # the model's two calls and the MCP session
    with wiretape.replaying(scene.run) as replaying:
        agent = subprocess.run(scene.agent("launch"), env={
            **scene.env(server_on_path=False), "OPENAI_BASE_URL": replaying.url,
            **replaying.env}, capture_output=True, text=True, timeout=90)
    assert agent.returncode == 0, agent.stderr
    assert agent.stdout == "The note says the code is 7-ALPHA-9.\n"
    verdict = replaying.verdict
    assert verdict.passed and verdict.exact == 2
    assert verdict.mcp is not None
    messages = verdict.mcp.messages
    assert (verdict.mcp.played, messages.exact, messages.diverged) == (1, 4, 0)

def _call(rid: int, note: str) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {"name": "read_note", "arguments": {"name": note}}})


def _shim(name: str, *lines: str) -> str:
    """A shell line that feeds ``lines`` to ``wiretape mcp --name NAME``."""
    return (f"printf '%s\\n' {' '.join(shlex.quote(x) for x in lines)} | "
            f"wiretape mcp --name {name} -- notes-server")


@pytest.mark.slow  # a long scenario: make test-slow
def test_several_servers_and_sessions_of_one_are_kept_apart_and_redacted(tmp_path: Path) -> None:
    scene = Scene(tmp_path)
    agent = "; ".join([_shim("a", INITIALIZE, _call(1, "deploy")), _shim("b", INITIALIZE),
                       _shim("a", INITIALIZE, _call(1, "launch"))])
    with FakeProvider(script_from_json([{"text": "hi"}])) as fp:
        done = scene.wiretape("record", "-o", str(scene.run), "--no-snapshot", "--upstream",
                              f"openai={fp.url}/v1", "--", "sh", "-c", agent,
                              server_on_path=True)
    assert done.returncode == 0, done.stderr
    assert "7-ALPHA-9" in done.stdout
    assert ": 3 exchanges (3 MCP sessions), " in done.stderr
    from wiretape.store.runfile import RunFile

    with RunFile.open(scene.run) as run:
        sessions = [e for e in run.exchanges() if e.kind == "mcp"]
        facts = [fact.location for _, fact in run.redactions()]
    assert [e.origin for e in sessions] == ["mcp:a", "mcp:b", "mcp:a"]
    assert [len(e.messages) for e in sessions] == [4, 2, 4]
    stored = b"".join(m.payload for e in sessions for m in e.messages)
    assert b"ghp_" not in stored and b"R2d2C3po" not in stored  # the token never reached the disk
    assert "server-message" in facts

    done = scene.wiretape("replay", str(scene.run), "--json", "--", "sh", "-c", agent)
    assert done.returncode == 0, done.stderr
    verdict: Any = verdict_of(done.stdout)
    assert verdict["mcp"]["sessions"] == {"recorded": 3, "played": 3, "missing": 0, "unused": 0}
    assert verdict["mcp"]["exact"] == 5 and verdict["pass"] is True

    # a replay that never starts b, nor a's second session: two sessions unused
    done = scene.wiretape("replay", str(scene.run), "--json", "--", "sh", "-c",
                          _shim("a", INITIALIZE, _call(1, "deploy")))
    assert done.returncode == 3, done.stderr
    verdict = verdict_of(done.stdout)
    assert verdict["mcp"]["sessions"] == {"recorded": 3, "played": 1, "missing": 0, "unused": 2}
    assert "; mcp: sessions 1/3, exact 2," in done.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_nanobot_calls_a_stdio_mcp_server_through_the_shim(tmp_path: Path) -> None:
    """nanobot (nanobot-ai 0.3.5) with ``tools.mcpServers.notes`` started as
    ``wiretape mcp --name notes -- notes-server``: recorded, then replayed
    strict with notes-server gone from PATH; the same answer, every request
    and MCP message exact."""
    import socket

    import nanobot_support as nbs

    scene = Scene(tmp_path)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    prompt = "What does the launch note say? Use the notes server."
    nano = nbs.make_scene(tmp_path / "nanobot", f"http://127.0.0.1:{port}/v1", prompt=prompt)

    def configure() -> None:
        config = json.loads(nano.config_path.read_text())
        config["tools"]["mcpServers"] = {"notes": {
            "command": "wiretape", "args": ["mcp", "--name", "notes", "--", "notes-server"]}}
        nano.config_path.write_text(json.dumps(config))

    def env(*, server_on_path: bool) -> dict[str, str]:
        return nano.env(scene.env(server_on_path=server_on_path))

    configure()
    turns = [{"tool_calls": [{"name": "mcp_notes_read_note", "arguments": {"name": "launch"}}],
              "expect": "notes"},
             {"text": "The launch note says 7-ALPHA-9.", "expect": "7-ALPHA-9"}]
    with FakeProvider(script_from_json(turns)) as fp:
        done = subprocess.run(
            [sys.executable, "-m", "wiretape", "record", "-o", str(scene.run), "--upstream",
             f"custom={fp.url}/v1", "--port", str(port), "--snapshot", str(nano.workspace),
             "--", *nano.argv()], env=env(server_on_path=True), cwd=nano.root,
            capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
        assert len(fp.requests) == 2, done.stderr
    assert done.returncode == 0, done.stderr
    assert nbs.final_answer(done.stdout) == "The launch note says 7-ALPHA-9."
    assert 'notes::read_note("launch")' in done.stdout

    nano.reset()
    configure()
    done = subprocess.run(
        [sys.executable, "-m", "wiretape", "replay", str(scene.run), "--json"],
        env=env(server_on_path=False), cwd=nano.root, capture_output=True, text=True,
        timeout=180, stdin=subprocess.DEVNULL)
    verdict: Any = verdict_of(done.stdout)
    assert done.returncode == 0, done.stderr
    assert verdict["pass"] is True
    assert (verdict["recorded"], verdict["exact"]) == (2, 2)
    mcp = verdict["mcp"]
    assert mcp["sessions"] == {"recorded": 1, "played": 1, "missing": 0, "unused": 0}
    assert mcp["exact"] >= 3 and mcp["diverged"] == mcp["missing"] == mcp["unused"] == 0
    assert verdict["outcome"]["stdout"]["same"] is True
    shown = json.loads(scene.wiretape("show", str(scene.run), "--json").stdout)
    (call,) = [c for c in shown["mcp_calls"] if c["method"] == "tools/call"]
    assert (call["tool"], call["caused_by"]) == ("read_note", "call_fake_1_0")


def test_a_shim_stopped_by_its_client_stops_the_server_and_keeps_the_session(
        tmp_path: Path) -> None:
    """MCP clients stop their server with SIGTERM: the shim passes it to the
    real server, and the session is kept with what crossed."""
    scene = Scene(tmp_path)
    agent = (
        "import signal, subprocess, sys\n"
        "p = subprocess.Popen(['wiretape', 'mcp', '--name', 'notes', '--', 'notes-server'],"
        " stdin=subprocess.PIPE, stdout=subprocess.PIPE)\n"
        f"p.stdin.write({INITIALIZE!r}.encode() + b'\\n'); p.stdin.flush()\n"
        "print(p.stdout.readline().decode().strip())\n"
        "p.send_signal(signal.SIGTERM)\n"
        "print('shim exit', p.wait())\n")
    with FakeProvider(script_from_json([{"text": "hi"}])) as fp:
        done = scene.wiretape("record", "-o", str(scene.run), "--no-snapshot", "--upstream",
                              f"openai={fp.url}/v1", "--", sys.executable, "-c", agent,
                              server_on_path=True)
    assert done.returncode == 0, done.stderr
    answer, status = done.stdout.splitlines()
    assert json.loads(answer)["result"]["serverInfo"]["name"] == "notes"
    assert status == "shim exit 143"  # (the server's end by SIGTERM, as a shell says it)
    from wiretape.store.runfile import RunFile

    with RunFile.open(scene.run) as run:
        (session,) = [e for e in run.exchanges() if e.kind == "mcp"]
    assert [m.direction for m in session.messages] == ["client", "server"]
    assert session.error is None


#: A raw JSON-RPC server: ``crash`` exits (status 3) at ``tools/call``;
#: ``early`` exits (status 3) at ``initialize``, unanswered; ``linger``
#: answers ``initialize`` and then sleeps, its stdin's end unheeded.
RAW_SERVER = '''
import json, sys, time
mode = sys.argv[1]
for line in sys.stdin:
    msg = json.loads(line)
    if mode == "early" or (mode == "crash" and msg.get("method") == "tools/call"):
        sys.exit(3)
    if "id" in msg:
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {}}), flush=True)
    if mode == "linger":
        time.sleep(3600)
'''

#: An agent that drives ``wiretape mcp -- raw-server MODE`` by hand: it
#: sends ``initialize``, then (answered) a ``tools/call``, reads the
#: shim's stdout to its end and prints what it read and the shim's status.
RAW_AGENT = (
    "import subprocess, sys, json\n"
    "p = subprocess.Popen(['wiretape', 'mcp', '--name', 's', '--', 'raw-server', sys.argv[1]],"
    " stdin=subprocess.PIPE, stdout=subprocess.PIPE)\n"
    f"p.stdin.write({INITIALIZE!r}.encode() + b'\\n'); p.stdin.flush()\n"
    "first = p.stdout.readline()\n"
    "print('answer', bool(first))\n"
    "if first and sys.argv[1] != 'linger':\n"
    f"    p.stdin.write({_call(1, 'launch')!r}.encode() + b'\\n'); p.stdin.flush()\n"
    "if sys.argv[1] == 'linger':\n"
    "    p.stdin.close()\n"
    "print('rest', p.stdout.read())\n"
    "print('shim exit', p.wait())\n")


def _raw_scene(tmp_path: Path) -> Scene:
    scene = Scene(tmp_path)
    (scene.root / "raw_server.py").write_text(RAW_SERVER)
    Scene._script(scene.servers / "raw-server",
                  f'exec {sys.executable} {scene.root / "raw_server.py"} "$@"')
    return scene


@pytest.mark.parametrize("mode", ["crash", "early"])
def test_a_replay_ends_the_servers_output_where_the_recording_did(
        tmp_path: Path, mode: str) -> None:
    """A server whose stdout ended while its client was still connected (it
    exited): the replay closes the shim's stdout at the same point, and the
    shim exits with the recorded status, so the agent sees the end again."""
    scene = _raw_scene(tmp_path)
    agent = [sys.executable, "-c", RAW_AGENT, mode]
    with FakeProvider(script_from_json([{"text": "hi"}])) as fp:
        done = scene.wiretape("record", "-o", str(scene.run), "--no-snapshot", "--upstream",
                              f"openai={fp.url}/v1", "--", *agent, server_on_path=True)
    assert done.returncode == 0, done.stderr
    expected = [f"answer {mode == 'crash'}", "rest b''", "shim exit 3"]
    assert done.stdout.splitlines() == expected
    from wiretape.store.runfile import RunFile

    with RunFile.open(scene.run) as run:
        (session,) = [e for e in run.exchanges() if e.kind == "mcp"]
    assert session.ending.value == "origin_reset"
    assert session.error is not None and "exit status 3" in session.error
    shown = scene.wiretape("show", str(scene.run))
    assert "101 complete" not in shown.stdout

    done = scene.wiretape("replay", str(scene.run), "--json", "--", *agent, timeout=60)
    assert done.stdout.splitlines()[:3] == expected, done.stderr
    verdict: Any = verdict_of(done.stdout)
    assert verdict["mcp"]["sessions"]["played"] == 1
    assert verdict["mcp"]["missing"] == 0 and verdict["mcp"]["unused"] == 0
    assert "Traceback" not in done.stderr


def test_a_server_that_ignores_its_stdins_end_is_stopped_by_the_shim(tmp_path: Path) -> None:
    """MCP's stdio shutdown: the client's end closes the server's stdin;
    a server that stays is sent SIGTERM (then SIGKILL), and the shim exits."""
    scene = _raw_scene(tmp_path)
    with FakeProvider(script_from_json([{"text": "hi"}])) as fp:
        done = scene.wiretape("record", "-o", str(scene.run), "--no-snapshot", "--upstream",
                              f"openai={fp.url}/v1", "--", sys.executable, "-c", RAW_AGENT,
                              "linger", server_on_path=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["answer True", "rest b''", "shim exit 143"]
    assert "Traceback" not in done.stderr and "Exception" not in done.stderr
    from wiretape.store.runfile import RunFile

    with RunFile.open(scene.run) as run:
        (session,) = [e for e in run.exchanges() if e.kind == "mcp"]
    assert [m.direction for m in session.messages] == ["client", "server"]
    assert session.error is None


def test_credential_named_members_of_mcp_messages_are_masked(tmp_path: Path) -> None:
    """``{"password": ...}`` in a tool call's arguments is masked as in a
    request's body: never stored, and a replay still matches it exactly."""
    scene = _raw_scene(tmp_path)
    call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "login", "arguments": {"password": "hunter2hunter2",
                                       "api_key": "abc123def456"}}})
    (scene.root / "in.jsonl").write_text(f"{INITIALIZE}\n{call}\n")
    agent = "wiretape mcp --name s -- raw-server plain < in.jsonl"
    with FakeProvider(script_from_json([{"text": "hi"}])) as fp:
        done = scene.wiretape("record", "-o", str(scene.run), "--no-snapshot", "--upstream",
                              f"openai={fp.url}/v1", "--", "sh", "-c", agent,
                              server_on_path=True)
    assert done.returncode == 0, done.stderr
    assert b"hunter2" not in scene.run.read_bytes()
    from wiretape.store.runfile import RunFile

    with RunFile.open(scene.run) as run:
        (session,) = [e for e in run.exchanges() if e.kind == "mcp"]
        facts = [(fact.location, fact.name) for _, fact in run.redactions()]
    stored = b"".join(m.payload for m in session.messages)
    assert b"hunter2" not in stored and b"abc123def456" not in stored
    (arguments,) = [json.loads(m.payload)["params"]["arguments"] for m in session.messages
                    if b"tools/call" in m.payload]
    assert [len(v) for v in arguments.values()] == [14, 12]  # (masks of their lengths)
    assert ("client-message", "password") in facts and ("client-message", "api_key") in facts

    done = scene.wiretape("replay", str(scene.run), "--json", "--", "sh", "-c", agent)
    assert done.returncode == 0, done.stderr
    verdict: Any = verdict_of(done.stdout)
    assert verdict["mcp"]["exact"] == 2 and verdict["pass"] is True


def test_an_agent_that_leaves_its_shim_behind_gets_no_traceback(tmp_path: Path) -> None:
    """The agent exits without waiting for its shim, whose server ignores
    its stdin's end: the recording ends with the session kept, and no
    traceback."""
    scene = _raw_scene(tmp_path)
    agent = RAW_AGENT.replace("print('rest', p.stdout.read())\n", "").replace(
        "print('shim exit', p.wait())\n", "")
    with FakeProvider(script_from_json([{"text": "hi"}])) as fp:
        done = scene.wiretape("record", "-o", str(scene.run), "--no-snapshot", "--upstream",
                              f"openai={fp.url}/v1", "--", sys.executable, "-c", agent,
                              "linger", server_on_path=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["answer True"]
    assert "Traceback" not in done.stderr and "Exception" not in done.stderr, done.stderr
    from wiretape.store.runfile import RunFile

    with RunFile.open(scene.run) as run:
        (session,) = [e for e in run.exchanges() if e.kind == "mcp"]
    assert [m.direction for m in session.messages] == ["client", "server"]


#: A raw server with a banner: a line that is not JSON as it starts, and
#: for each client line that is not JSON, one that is not JSON either.
BANNER_SERVER = '''
import json, sys
print("Starting raw server v1.2...", flush=True)
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        print("what is " + repr(line.strip()) + "?", flush=True)
        continue
    if "id" in msg:
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {}}), flush=True)
'''

#: An agent that reads the shim's first line before it writes anything,
#: then sends ``initialize`` and a line that is not JSON (its argument),
#: and prints each line it reads and the shim's status.
BANNER_AGENT = (
    "import subprocess, sys\n"
    "p = subprocess.Popen(['wiretape', 'mcp', '--name', 'b', '--', 'banner-server'],"
    " stdin=subprocess.PIPE, stdout=subprocess.PIPE)\n"
    "print('first', p.stdout.readline())\n"
    f"p.stdin.write({INITIALIZE!r}.encode() + b'\\n'); p.stdin.flush()\n"
    "print('answer', p.stdout.readline())\n"
    "p.stdin.write(sys.argv[1].encode() + b'\\n'); p.stdin.flush()\n"
    "print('then', p.stdout.readline())\n"
    "p.stdin.close()\n"
    "print('rest', p.stdout.read())\n"
    "print('shim exit', p.wait())\n")


def test_a_banner_before_the_first_message_is_replayed_first(tmp_path: Path) -> None:
    """A banner the client read before it wrote anything is written first
    again; a client line that is not JSON is matched like a message (exact
    bytes: another one diverges)."""
    scene = Scene(tmp_path)
    (scene.root / "banner_server.py").write_text(BANNER_SERVER)
    Scene._script(scene.servers / "banner-server",
                  f'exec {sys.executable} {scene.root / "banner_server.py"} "$@"')
    agent = [sys.executable, "-c", BANNER_AGENT]
    with FakeProvider(script_from_json([{"text": "hi"}])) as fp:
        done = scene.wiretape("record", "-o", str(scene.run), "--no-snapshot", "--upstream",
                              f"openai={fp.url}/v1", "--", *agent, "hello server",
                              server_on_path=True)
    assert done.returncode == 0, done.stderr
    expected = ["first b'Starting raw server v1.2...\\n'",
                'answer b\'{"jsonrpc": "2.0", "id": 0, "result": {}}\\n\'',
                "then b\"what is 'hello server'?\\n\"", "rest b''", "shim exit 0"]
    assert done.stdout.splitlines() == expected
    from wiretape.store.runfile import RunFile

    with RunFile.open(scene.run) as run:
        (session,) = [e for e in run.exchanges() if e.kind == "mcp"]
    assert [(m.direction, m.payload[:9]) for m in session.messages] == [
        ("server", b"Starting "), ("client", b'{"jsonrpc'), ("server", b'{"jsonrpc'),
        ("client", b"hello ser"), ("server", b"what is '")]

    done = scene.wiretape("replay", str(scene.run), "--json", "--", *agent, "hello server")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:5] == expected
    verdict: Any = verdict_of(done.stdout)
    assert verdict["pass"] is True
    assert (verdict["mcp"]["exact"], verdict["mcp"]["diverged"]) == (2, 0)

    done = scene.wiretape("replay", str(scene.run), "--json", "--", *agent, "hello client")
    assert done.returncode == 3, done.stderr
    verdict = verdict_of(done.stdout)
    assert (verdict["mcp"]["exact"], verdict["mcp"]["diverged"]) == (1, 1)
    assert verdict["outcome"]["stopped"]["reason"].startswith(
        "diverged message #3 (client")
    assert "Traceback" not in done.stderr
