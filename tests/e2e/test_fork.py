"""``wiretape fork`` and ``wiretape compare`` on real processes and sockets:
the example agent (the real openai SDK in a tool loop, with its write_file
tool) recorded against the scripted fake provider, then forked after its
first turn onto the fake provider's two scripted "models" (``fake-fixer``
fixes report.txt, ``fake-idle`` does not), on the restored files."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wiretape.inspect.prices import PriceTable
from wiretape.store.runfile import RunFile
from wiretape.testing import (
    FIXER_MODEL,
    IDLE_MODEL,
    FakeProvider,
    TextTurn,
    demo_script,
    fork_models,
)

pytestmark = pytest.mark.timeout(180)

QUESTION = "How many pieces of fruit are listed in inventory.txt?"
VERIFY = "grep -q 'total: 42' report.txt"


def wiretape(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=150, stdin=subprocess.DEVNULL)


def make_project(root: Path) -> Path:
    project = root / "project"
    project.mkdir()
    (project / "inventory.txt").write_text("apples: 17\npears: 25\n")
    (project / "report.txt").write_text("total: 40\n")
    return project


def record(project: Path, out: Path, *extra: str) -> None:
    with FakeProvider(demo_script()) as fp:
        done = wiretape("record", "-o", str(out), "--upstream", f"openai={fp.url}/v1", *extra,
                        "--", sys.executable, "-m", "wiretape.examples.tool_agent", "--write",
                        "--workspace", ".", QUESTION, cwd=project)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def parent(tmp_path: Path) -> tuple[Path, Path]:
    """(project, run): the example agent recorded in a project (3 exchanges)."""
    project = make_project(tmp_path)
    run = tmp_path / "parent.wtape"
    record(project, run)
    return project, run


def test_fork_serves_the_first_turn_from_the_recording_then_goes_live(
        parent: tuple[Path, Path], tmp_path: Path) -> None:
    project, run = parent
    out = tmp_path / "fork.wtape"
    with FakeProvider([], models=fork_models()) as live:
        done = wiretape("fork", str(run), "--from", "1", "--model", FIXER_MODEL,
                        "--upstream", f"openai={live.url}/v1", "-o", str(out),
                        "--verify", VERIFY, "--json", cwd=tmp_path)
        received = live.requests
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["replayed"], result["live"], result["rewritten"]) == (1, 3, 3)
    assert result["verify_status"] == 0 and result["exit_status"] == 0
    assert result["model"] == FIXER_MODEL and result["rewrite"] == FIXER_MODEL
    assert result["input_tokens"] > 0 and result["output_tokens"] > 0
    assert "model rewritten to fake-fixer on 3 of 3 live requests" in done.stderr
    assert f"(try `wiretape show {out}`, `wiretape replay {out}`)" in done.stderr
    # Only the live turns reached the provider, each asking for the rewritten model.
    assert [r.json()["model"] for r in received] == [FIXER_MODEL] * 3
    # The user's project is untouched: the agent wrote into its sandbox.
    assert (project / "report.txt").read_text() == "total: 40\n"
    with RunFile.open(run) as p, RunFile.open(out) as f:
        recorded, forked = p.exchanges(), f.exchanges()
        info = f.info()
        changes = f.outcome_changes()
    assert [e.seq for e in forked] == [0, 1, 2, 3]
    # Exchange 0 is the parent's, byte for byte; the live ones store what the agent sent.
    assert forked[0].request == recorded[0].request
    assert forked[0].response is not None and recorded[0].response is not None
    assert forked[0].response.body == recorded[0].response.body
    assert forked[0].response.headers == recorded[0].response.headers
    assert all(json.loads(e.request.body)["model"] == "gpt-4o-mini" for e in forked)
    assert info.extra["fork_parent"] == p_id(run)
    assert (info.extra["fork_from"], info.extra["fork_model"]) == ("1", FIXER_MODEL)
    assert [c["path"] for rows in changes.values() for c in rows] == ["report.txt"]
    # The fork is a run of its own: shown with its parent, and replayed exact offline.
    shown = json.loads(wiretape("show", str(out), "--json", cwd=tmp_path).stdout)
    assert shown["fork"] == {"parent": p_id(run), "from": 1, "model": FIXER_MODEL}
    reported = wiretape("report", str(out), "-o", str(tmp_path / "fork.html"), cwd=tmp_path)
    assert reported.returncode == 0, reported.stderr
    assert (f'data-fork-parent="{p_id(run)}">forked from <span class="mono">{p_id(run)}</span> '
            f"after its first 1 exchange, the live requests&#x27;"
            in (tmp_path / "fork.html").read_text())
    told = wiretape("show", str(out), cwd=tmp_path).stdout
    assert f"forked from {p_id(run)} at 1: exchange #0 served from it, the rest live" in told
    replayed = wiretape("replay", str(out), cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    assert "recorded 4, exact 4" in replayed.stderr


def p_id(run: Path) -> str:
    with RunFile.open(run) as r:
        return r.info().run_id


@pytest.mark.slow  # a long scenario: make test-slow
def test_show_lists_the_checkpoints(parent: tuple[Path, Path], tmp_path: Path) -> None:
    _, run = parent
    shown = wiretape("show", str(run), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    # The run is not in the runs folder: it is named by its path, which works.
    assert f"checkpoints (wiretape fork {run} --from N): 0 1 2 3" in shown.stdout
    assert json.loads(wiretape("show", str(run), "--json", cwd=tmp_path).stdout)[
        "checkpoints"] == [0, 1, 2, 3]


@pytest.mark.slow  # a long scenario: make test-slow
def test_compare_prints_one_pass_and_one_fail(parent: tuple[Path, Path],
                                              tmp_path: Path) -> None:
    _, run = parent
    (tmp_path / "wiretape.toml").write_text(
        '[prices]\n"fake-fixer" = { input = 1.0, output = 2.0 }\n')
    with FakeProvider([], models=fork_models()) as live:
        done = wiretape("compare", str(run), "--from", "1", "--models",
                        f"{FIXER_MODEL},{IDLE_MODEL}", "--verify", VERIFY, "-j", "2",
                        "--upstream", f"openai={live.url}/v1", "--json", cwd=tmp_path)
        table = wiretape("compare", str(run), "--from", "1", "--models", IDLE_MODEL,
                         "--verify", VERIFY, "--upstream", f"openai={live.url}/v1",
                         cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    forks = {f["model"]: f for f in report["forks"]}
    assert [f["model"] for f in report["forks"]] == [FIXER_MODEL, IDLE_MODEL]
    assert forks[FIXER_MODEL]["verify_status"] == 0
    assert forks[IDLE_MODEL]["verify_status"] == 1
    assert (forks[FIXER_MODEL]["live"], forks[IDLE_MODEL]["live"]) == (3, 1)
    fixer = forks[FIXER_MODEL]
    assert fixer["cost_usd"] == pytest.approx(
        (fixer["input_tokens"] * 1.0 + fixer["output_tokens"] * 2.0) / 1e6)
    assert forks[IDLE_MODEL]["cost_usd"] is None
    assert "no price for model fake-idle" in done.stderr
    assert "1 of 2 models passed verify" in done.stderr
    # Every model failing verify is a failure; the table says which and why.
    assert table.returncode == 1, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split()[:3] == ["model", "verify", "agent"]
    assert row.split()[:3] == [IDLE_MODEL, "FAIL", "(1)"]
    assert "—" in row and row.split()[-1].startswith("run_")
    assert "0 of 1 model passed verify" in table.stderr
    assert (f"wiretape compare: {IDLE_MODEL}: verify failed with exit status 1 (it printed "
            "nothing)") in table.stderr
    assert f"wiretape compare: {IDLE_MODEL}: verify FAILED (exit status 1)" in table.stderr
    # The parent's report includes the comparison, read back from the forks' run files.
    reported = wiretape("report", str(run), "-o", str(tmp_path / "parent.html"), cwd=tmp_path)
    assert reported.returncode == 0, reported.stderr
    assert "3 forks" in reported.stderr
    page = (tmp_path / "parent.html").read_text()
    for fork in report["forks"]:
        row = page.split(f'<tr data-fork="{fork["run_id"]}">', 1)[1].split("</tr>", 1)[0]
        assert f'data-verify="{fork["verify_status"]}"' in row
        assert f'<td class="mono">{fork["model"]}</td>' in row
    assert f"${fixer['cost_usd']:.4f}" in page
    # A bad [prices] entry is named, and the report is still written.
    (tmp_path / "wiretape.toml").write_text('[prices]\n"fake-fixer" = { input = 1.0 }\n')
    (tmp_path / "parent.html").unlink()
    reported = wiretape("report", str(run), "-o", str(tmp_path / "parent.html"), cwd=tmp_path)
    assert reported.returncode == 0, reported.stderr
    assert ("wiretape: note: the price of 'fake-fixer' in wiretape.toml has no output"
            in reported.stderr)
    assert (tmp_path / "parent.html").exists()


@pytest.mark.slow  # a long scenario: make test-slow
def test_a_fork_whose_turn_before_n_diverges_stops_and_names_it(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    run = tmp_path / "parent.wtape"
    record(project, run, "--no-snapshot")  # the fork reads the live files
    (project / "inventory.txt").write_text("apples: 18\npears: 25\n")
    with FakeProvider([], models=fork_models()) as live:
        done = wiretape("fork", str(run), "--from", "2", "--live-files", "--model", FIXER_MODEL,
                        "-o",
                        str(tmp_path / "fork.wtape"), "--upstream", f"openai={live.url}/v1",
                        cwd=tmp_path)
        assert live.requests == []
    assert done.returncode == 3, done.stderr
    assert "stopped before --from 2: diverged request POST /v1/chat/completions" in done.stderr
    assert "apples: 18" in done.stderr and "read_file" in done.stderr


def test_bad_input_is_one_line(parent: tuple[Path, Path], tmp_path: Path) -> None:
    _, run = parent
    beyond = wiretape("fork", str(run), "--from", "9", cwd=tmp_path)
    assert beyond.returncode == 2
    assert beyond.stderr.strip().splitlines() == [
        f"wiretape: error: --from 9 is beyond run {p_id(run)}: it has 3 exchanges; give "
        f"--from 0 to 3 (`wiretape show {run}` lists its checkpoints)"]
    with FakeProvider([]) as gone:
        url = gone.url  # a port that was just given back: nothing listens there
    nowhere = wiretape("fork", str(run), "--from", "1", "--upstream", f"openai={url}/v1",
                       cwd=tmp_path)
    assert nowhere.returncode == 2
    lines = nowhere.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"wiretape: error: cannot reach upstream "
                                                   f"openai at {url}"), lines
    assert not list(tmp_path.glob(".wiretape/runs/*.wtape"))


def test_the_price_table_knows_dated_names_and_says_nothing_of_unknown_ones() -> None:
    table = PriceTable.with_overrides({"fake-fixer": (1.0, 2.0)})
    assert table.price("gpt-4o-mini-2024-07-18") == table.price("gpt-4o-mini") == (0.15, 0.60)
    assert table.price("gpt-4o-2024-08-06") == (2.50, 10.00)
    assert table.price("gpt-4o-mini-tts") is None
    assert table.cost("fake-fixer", 1000, 500) == pytest.approx(0.002)
    assert table.cost("no-such-model", 1000, 500) is None


@pytest.mark.slow  # a long scenario: make test-slow
def test_the_python_api_forks_a_run_at_its_end_offline(parent: tuple[Path, Path],
                                                       tmp_path: Path) -> None:
    import wiretape

    _, run = parent
    result = wiretape.fork(run, after=3, out=tmp_path / "whole.wtape", verify=VERIFY)
    assert (result.replayed, result.live, result.stopped) == (3, 0, None)
    assert result.exit_status == 0 and result.verify_status == 1  # the recording fixed nothing
    assert (result.input_tokens, result.output_tokens) == (None, None)
    assert result.path == tmp_path / "whole.wtape" and result.parent_id == p_id(run)


def recorded_by(source: Path, target: Path, user: str, host: str) -> Path:
    """A copy of ``source`` claiming to be recorded by ``user`` on ``host``."""
    target.write_bytes(source.read_bytes())
    db = sqlite3.connect(target)
    with db:
        extra = json.loads(db.execute("SELECT value FROM meta WHERE key = 'extra'").fetchone()[0])
        extra.update(recorded_user=user, recorded_host=host)
        db.execute("UPDATE meta SET value = ? WHERE key = 'extra'", (json.dumps(extra),))
    db.close()
    return target


@pytest.mark.slow  # a long scenario: make test-slow
def test_fork_and_compare_ask_before_running_someone_elses_command(
        parent: tuple[Path, Path], tmp_path: Path) -> None:
    _, run = parent
    theirs = recorded_by(run, tmp_path / "theirs.wtape", "mallory", "evil")
    out = tmp_path / "fork.wtape"
    with FakeProvider([], models=fork_models()) as live:
        upstream = f"openai={live.url}/v1"
        refused = wiretape("fork", str(theirs), "--from", "1", "--upstream", upstream, "-o",
                           str(out), cwd=tmp_path)
        compared = wiretape("compare", str(theirs), "--from", "1", "--models", FIXER_MODEL,
                            "--verify", VERIFY, "--upstream", upstream, cwd=tmp_path)
        assert live.requests == []
        forked = wiretape("fork", str(theirs), "--from", "1", "--upstream", upstream,
                          "--model", FIXER_MODEL, "-o", str(out), "--yes", cwd=tmp_path)
    for done in (refused, compared):
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.strip().splitlines()
        assert "was recorded by mallory on evil, not here" in line and "pass --yes" in line
    assert not out.exists() or forked.returncode == 0
    assert forked.returncode == 0, forked.stderr
    # The fork runs mallory's command: it says so, and a replay of it asks too.
    with RunFile.open(out) as f:
        extra = f.info().extra
    assert (extra["recorded_user"], extra["recorded_host"]) == ("mallory", "evil")
    replayed = wiretape("replay", str(out), cwd=tmp_path)
    assert replayed.returncode == 2 and "recorded by mallory on evil" in replayed.stderr


@pytest.mark.slow  # a long scenario: make test-slow
def test_a_command_after_dashes_is_run_instead_and_is_the_users_own(
        parent: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import wiretape as api

    project, run = parent
    monkeypatch.chdir(project)  # (the given command runs here, on the restored files)
    theirs = recorded_by(run, tmp_path / "theirs.wtape", "mallory", "evil")
    out = tmp_path / "fork.wtape"
    agent = [sys.executable, "-m", "wiretape.examples.tool_agent", "--write", "--workspace",
             ".", QUESTION]
    with FakeProvider([], models=fork_models()) as live:
        done = wiretape("fork", str(theirs), "--from", "1", "--model", FIXER_MODEL,
                        "--upstream", f"openai={live.url}/v1", "-o", str(out), "--", *agent,
                        cwd=project)
        with pytest.raises(TypeError, match="argv must be a list"):
            api.fork(theirs, after=1, argv="python agent.py")
        result = api.fork(theirs, after=3, argv=agent, out=tmp_path / "api.wtape")
    assert done.returncode == 0, done.stderr
    assert (result.replayed, result.exit_status) == (3, 0)
    with RunFile.open(out) as f:
        info = f.info()
    assert list(info.argv) == agent
    assert info.extra["recorded_user"] != "mallory"


@pytest.mark.slow  # a long scenario: make test-slow
def test_a_run_with_no_snapshot_is_refused_unless_live_files(tmp_path: Path) -> None:
    import wiretape as api
    from wiretape.errors import UsageError

    project = make_project(tmp_path)
    run = tmp_path / "parent.wtape"
    record(project, run, "--no-snapshot")
    with FakeProvider([], models=fork_models()) as live:
        upstream = f"openai={live.url}/v1"
        forked = wiretape("fork", str(run), "--from", "1", "--model", FIXER_MODEL,
                          "--upstream", upstream, cwd=tmp_path)
        compared = wiretape("compare", str(run), "--from", "1", "--models",
                            f"{FIXER_MODEL},{IDLE_MODEL}", "--verify", VERIFY,
                            "--upstream", upstream, cwd=tmp_path)
        with pytest.raises(UsageError, match="no snapshot"):
            api.fork(run, after=1, upstreams={"openai": f"{live.url}/v1"})
        assert live.requests == []
    assert (project / "report.txt").read_text() == "total: 40\n"
    for done in (forked, compared):
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.strip().splitlines()
        assert f"run {p_id(run)} has no snapshot of its files" in line
        assert "record it again with snapshots" in line
    assert "--live-files" in forked.stderr


def wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    while not path.exists() or not path.read_text().strip():
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.slow  # a long scenario: make test-slow
def test_a_signal_during_compare_ends_the_verify_command_too(
        parent: tuple[Path, Path], tmp_path: Path, signum: int) -> None:
    _, run = parent
    pidfile = tmp_path / "verify.pid"
    with FakeProvider([], models=fork_models()) as live:
        proc = subprocess.Popen(
            [sys.executable, "-m", "wiretape", "compare", str(run), "--from", "1", "--models",
             IDLE_MODEL, "--verify", f"echo $$ > {pidfile}; exec sleep 300",
             "--upstream", f"openai={live.url}/v1"],
            cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        try:
            wait_for(pidfile, proc)
            proc.send_signal(signum)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    pid = int(pidfile.read_text())
    while not gone(pid):  # (the kill is sent before compare exits; reaping may lag)
        time.sleep(0.05)
    assert proc.returncode == 128 + signum, err
    assert f"[1/1] {IDLE_MODEL}: fork started" in err
    assert f"interrupted by {signal.Signals(signum).name} during compare" in err
    assert "Traceback" not in err
    leftovers = [p.name for p in tmp_path.glob(".wiretape/runs/*") if p.suffix != ".wtape"]
    assert leftovers == []


@pytest.mark.slow  # a long scenario: make test-slow
def test_a_verify_command_running_too_long_is_ended(parent: tuple[Path, Path],
                                                     tmp_path: Path) -> None:
    _, run = parent
    with FakeProvider([], models=fork_models()) as live:
        done = wiretape("compare", str(run), "--from", "1", "--models", IDLE_MODEL,
                        "--verify", "sleep 300", "--verify-timeout", "0.5",
                        "--upstream", f"openai={live.url}/v1", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    [row] = done.stdout.splitlines()[1:]
    assert row.split()[:3] == [IDLE_MODEL, "FAIL", "(timeout)"]
    assert (f"wiretape compare: {IDLE_MODEL}: verify ended after 0.5 s (--verify-timeout)"
            in done.stderr)


@pytest.mark.slow  # a long scenario: make test-slow
def test_model_is_refused_where_the_live_part_is_a_websocket_session(tmp_path: Path) -> None:
    import wiretape as api
    from wiretape.errors import UsageError

    client = str(Path(__file__).resolve().parent / "clients_ws" / "ws_client.py")
    project = make_project(tmp_path)
    run = tmp_path / "ws.wtape"
    turns = [TextTurn("The sum is 5.")]
    with FakeProvider(turns) as fp:
        done = wiretape("record", "-o", str(run), "--upstream", f"openai={fp.url}/v1", "--",
                        sys.executable, client, "add 2 and 3", cwd=project)
    assert done.returncode == 0, done.stderr
    with FakeProvider(turns) as live:
        refused = wiretape("fork", str(run), "--from", "0", "--model", "alt-model",
                           "--upstream", f"openai={live.url}/v1", cwd=tmp_path)
        empty = wiretape("fork", str(run), "--from", "0", "--model", "",
                         "--upstream", f"openai={live.url}/v1", cwd=tmp_path)
        with pytest.raises(UsageError, match="is a WebSocket session"):
            api.fork(run, after=0, model="alt-model", upstreams={"openai": f"{live.url}/v1"})
        assert live.requests == []
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"wiretape: error: --model cannot be applied to run {p_id(run)} from there: its "
        "exchange #0 is a WebSocket session, whose model is named in the messages the agent "
        "sends (not rewritten); fork without --model, or from after the session"]
    assert empty.returncode == 2 and "--model is empty" in empty.stderr
    # Served from the recording, the session is a fork's like any exchange.
    out = tmp_path / "ws-fork.wtape"
    served = wiretape("fork", str(run), "--from", "1", "-o", str(out), cwd=tmp_path)
    assert served.returncode == 0, served.stderr
    replayed = wiretape("replay", str(out), cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    with RunFile.open(run) as p, RunFile.open(out) as f:
        [parent_session], [forked_session] = p.exchanges(), f.exchanges()
    assert [m.payload for m in forked_session.messages] == [
        m.payload for m in parent_session.messages]


@pytest.mark.slow  # a long scenario: make test-slow
def test_a_forks_checkpoints_follow_its_own_serving_not_its_parents_times(
        parent: tuple[Path, Path], tmp_path: Path) -> None:
    _, run = parent
    slow = tmp_path / "slow.wtape"  # the parent's first answer took ten minutes
    slow.write_bytes(run.read_bytes())
    db = sqlite3.connect(slow)
    with db:
        db.execute("UPDATE exchanges SET duration_ns = 600000000000 WHERE seq = 0")
    db.close()
    out = tmp_path / "fork.wtape"
    with FakeProvider([], models=fork_models()) as live:
        done = wiretape("fork", str(slow), "--from", "1", "--model", FIXER_MODEL,
                        "--upstream", f"openai={live.url}/v1", "-o", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with RunFile.open(out) as f:
        served = f.exchanges()[0]
    assert served.duration_ns < 600_000_000_000  # (its own serving, not the parent's)
    shown = json.loads(wiretape("show", str(out), "--json", cwd=tmp_path).stdout)
    assert shown["checkpoints"] == [0, 1, 2, 3, 4]


@pytest.mark.slow  # a long scenario: make test-slow
def test_a_fork_from_a_point_that_is_not_a_checkpoint_says_so(
        parent: tuple[Path, Path], tmp_path: Path) -> None:
    _, run = parent
    tangled = tmp_path / "tangled.wtape"  # exchange #1 began before #0 ended
    tangled.write_bytes(run.read_bytes())
    db = sqlite3.connect(tangled)
    with db:
        db.execute("UPDATE exchanges SET duration_ns = 600000000000 WHERE seq = 0")
    db.close()
    with FakeProvider([], models=fork_models()) as live:
        done = wiretape("fork", str(tangled), "--from", "2", "--upstream",
                        f"openai={live.url}/v1", "-o", str(tmp_path / "f.wtape"), cwd=tmp_path)
    assert (f"wiretape fork: note: --from 2 is not a checkpoint of {p_id(tangled)} (its "
            "checkpoints: 0)") in done.stderr, done.stderr


@pytest.mark.slow  # a long scenario: make test-slow
def test_a_live_exchange_cut_mid_answer_is_named_in_the_summary(
        parent: tuple[Path, Path], tmp_path: Path) -> None:
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:  # every request: half an answer, then the connection is cut
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(10)
                seen = b""
                while b"\r\n\r\n" not in seen:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    seen += chunk
                if seen:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: 1000\r\n\r\n{\"id\": ")

    threading.Thread(target=serve, daemon=True).start()
    _, run = parent
    try:
        done = wiretape("fork", str(run), "--from", "1", "--upstream",
                        f"openai=http://127.0.0.1:{port}/v1", "-o", str(tmp_path / "f.wtape"),
                        cwd=tmp_path)
    finally:
        server.close()
    lines = [line for line in done.stderr.splitlines()
             if line.startswith("wiretape fork: live exchange #1 ")]
    assert len(lines) == 1 and "#1 origin_" in lines[0], done.stderr


@pytest.mark.slow  # a long scenario: make test-slow
def test_a_fork_whose_agent_asks_less_than_n_says_it_is_not_a_fork_from_n(
        parent: tuple[Path, Path], tmp_path: Path) -> None:
    project, run = parent
    with FakeProvider([], models=fork_models()) as live:
        done = wiretape("fork", str(run), "--from", "2", "--upstream", f"openai={live.url}/v1",
                        "-o", str(tmp_path / "f.wtape"), "--json", "--", "true", cwd=project)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["short"] is True
    assert ("wiretape fork: WARNING: only 0 of the 2 exchanges before --from 2 were served "
            "from the recording") in done.stderr


@pytest.mark.slow  # a long scenario: make test-slow
def test_a_fork_says_which_folder_it_made_and_show_distrusts_a_hostile_fork_from(
        parent: tuple[Path, Path], tmp_path: Path) -> None:
    _, run = parent
    out = tmp_path / "new" / "sub" / "f.wtape"
    done = wiretape("fork", str(run), "--from", "3", "-o", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (f"wiretape fork: made the folder {tmp_path / 'new'} for the run file (it did not "
            "exist)") in done.stderr
    for hostile in ("99", "\u00b2"):  # beyond its 3 exchanges; a digit int() refuses
        db = sqlite3.connect(out)
        with db:
            extra = json.loads(db.execute("SELECT value FROM meta WHERE key = 'extra'")
                               .fetchone()[0])
            extra["fork_from"] = hostile
            db.execute("UPDATE meta SET value = ? WHERE key = 'extra'", (json.dumps(extra),))
        db.close()
        shown = wiretape("show", str(out), "--json", cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["fork"]["from"] is None
        text = wiretape("show", str(out), cwd=tmp_path)
        assert "some exchanges served from it" in text.stdout, text.stderr
        reported = wiretape("report", str(out), "-o", str(tmp_path / "f.html"), cwd=tmp_path)
        assert reported.returncode == 0, reported.stderr
        assert "at a point its metadata does not give" in (tmp_path / "f.html").read_text()


@pytest.mark.slow  # a long scenario: make test-slow
def test_fork_ends_a_verify_command_running_too_long(parent: tuple[Path, Path],
                                                     tmp_path: Path) -> None:
    _, run = parent
    done = wiretape("fork", str(run), "--from", "3", "-o", str(tmp_path / "f.wtape"),
                    "--verify", "sleep 300", "--verify-timeout", "0.5", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["verify_status"], result["verify_timed_out"]) == (124, True)
    assert ("wiretape fork: verify exit status 124 (ended after 0.5 s: --verify-timeout)"
            in done.stderr)
