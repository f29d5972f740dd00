"""What reaches the disk, and what survives there.

A wiretape process killed with SIGKILL loses at most what was in flight:
the run file opens afterwards with every completed exchange, bodies and
all, and a killed replay still has a verdict (DESIGN.md, "The run file").
No secret is ever written, only its labelled fingerprint ("Redact on the
way in").
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from support.routed_upstream import RoutedUpstream
from wiretape.store.locate import replay_logs_dir
from wiretape.store.runfile import open_run
from wiretape.testing import FakeProvider, TextTurn

CLIENTS = Path(__file__).resolve().parent / "clients_modes"

PROBE = str(CLIENTS / "probe.py")
SLOW_TAIL = str(CLIENTS / "slow_tail.py")
QUICK = 5

_SCRUB = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY",
          "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "WIRETAPE_HOME")


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    out.update(OPENAI_API_KEY="sk-durability-test", PYTHONUNBUFFERED="1", NO_PROXY="127.0.0.1")
    return out


def wiretape(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=cwd, env=env(),
                          capture_output=True, text=True, timeout=60)


def start_wiretape(*args: str, cwd: Path) -> subprocess.Popen[bytes]:
    with open(cwd / "wiretape.out", "wb") as out, open(cwd / "wiretape.err", "wb") as err:
        return subprocess.Popen([sys.executable, "-m", "wiretape", *args], cwd=cwd, env=env(),
                                stdout=out, stderr=err)


def rows(path: Path, table: str) -> int:
    """Rows in ``table``, read the way an outsider would: read-only, no wiretape code."""
    if not path.exists():
        return 0
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
        try:
            return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
        finally:
            db.close()
    except sqlite3.Error:
        return 0


def logged_requests(run: Path) -> int:
    """Requests decided so far by replays of ``run``: they are in its replay
    log (in the user's folder of replay logs), never in the run file."""
    return sum(rows(log, "replay_requests") for log in replay_logs_dir().glob("run_*.replays")
               if rows(log, "replays") and _replays_source(log, run))


def _replays_source(log: Path, run: Path) -> bool:
    db = sqlite3.connect(f"file:{log}?mode=ro", uri=True, timeout=1)
    try:
        return db.execute("SELECT 1 FROM replays WHERE source = ?",
                          (str(run.absolute()),)).fetchone() is not None
    finally:
        db.close()


def wait_for(what: str, ok: Callable[[], bool], proc: subprocess.Popen[bytes], cwd: Path,
             timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if proc.poll() is not None:
            raise AssertionError(f"wiretape ended ({proc.returncode}) before {what}: "
                                 + (cwd / "wiretape.err").read_text(errors="replace"))
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def reap() -> Iterator[list[Path]]:
    """Pid files of agents to kill (with their process group) at the end:
    a SIGKILLed wiretape leaves its child behind."""
    pidfiles: list[Path] = []
    yield pidfiles
    for pidfile in pidfiles:
        with contextlib.suppress(
            FileNotFoundError, ValueError, ProcessLookupError, PermissionError
        ):
            os.killpg(int(pidfile.read_text()), signal.SIGKILL)


def kill9(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(10) == -signal.SIGKILL


def test_kill9_while_recording_keeps_every_completed_exchange(tmp_path, reap):
    run = tmp_path / "killed.wtape"
    pidfile = tmp_path / "agent.pid"
    reap.append(pidfile)
    with RoutedUpstream() as up:
        wt = start_wiretape("record", "-o", str(run), "--upstream", f"openai={up.url}/v1", "--",
                            sys.executable, SLOW_TAIL, str(QUICK), str(pidfile), cwd=tmp_path)
        try:
            wait_for(f"{QUICK} exchanges committed", lambda: rows(run, "exchanges") == QUICK, wt,
                     tmp_path)
            # the slow stream is in flight: the upstream has begun it and sent a frame
            wait_for("the slow stream to start",
                     lambda: len(up.seen()) == QUICK + 1 and up.seen()[-1].sent_frames != [],
                     wt, tmp_path)
            assert rows(run, "exchanges") == QUICK
            kill9(wt)
        finally:
            if wt.poll() is None:
                wt.kill()
        seen = up.seen()
    quick = seen[:QUICK]
    assert [s.target for s in quick] == [f"/v1/quick/{i}".encode() for i in range(QUICK)]
    assert seen[QUICK].done is False  # cut off by the kill

    shown = wiretape("show", str(run), "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert [(e["seq"], e["method"], e["target"], e["status"], e["ending"])
            for e in data["exchanges"]] == [
        (i, "POST", f"/v1/quick/{i}", 200, "complete") for i in range(QUICK)]
    assert [e["bytes"] for e in data["exchanges"]] == [len(s.sent_body) for s in quick]
    heading = wiretape("show", str(run), cwd=tmp_path).stdout
    assert ("exit status: unknown: the recording did not finish (wiretape was stopped before "
            "the command ended); the exchanges committed until then are kept") in heading

    # full bodies, both ways, byte for byte
    with open_run(run) as rf:
        exchanges = rf.exchanges()
    assert len(exchanges) == QUICK
    for exchange, upstream_saw in zip(exchanges, quick, strict=True):
        assert exchange.request.body == upstream_saw.body
        assert exchange.response is not None
        assert exchange.response.body == upstream_saw.sent_body
        assert json.loads(exchange.response.body)["request_bytes"] == len(upstream_saw.body)


@pytest.fixture(scope="module")
def one_request_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("one")
    with FakeProvider([TextTurn("the only answer")]) as fp:
        done = wiretape("record", "-o", "one.wtape", "--upstream", f"openai={fp.url}/v1", "--",
                        sys.executable, PROBE, "hello", "--raw", cwd=base)
    assert done.returncode == 0, done.stderr
    return base / "one.wtape"


@pytest.fixture
def killed_replay(one_request_run: Path, tmp_path: Path, reap: list[Path]) -> Path:
    """The run after a replay that was SIGKILLed once its first request was decided."""
    run = tmp_path / "one.wtape"
    run.write_bytes(one_request_run.read_bytes())
    pidfile = tmp_path / "agent.pid"
    reap.append(pidfile)
    wt = start_wiretape("replay", str(run), "--", sys.executable, PROBE, "hello", "--raw",
                        "--sleep", "60", "--pidfile", str(pidfile), cwd=tmp_path)
    try:
        wait_for("the first decision", lambda: logged_requests(run) >= 1, wt, tmp_path)
        kill9(wt)
    finally:
        if wt.poll() is None:
            wt.kill()
    return run


@pytest.mark.slow  # a long scenario: make test-slow
def test_verdict_of_a_killed_replay(killed_replay, tmp_path):
    done = wiretape("verdict", str(killed_replay), "--json", cwd=tmp_path)
    assert done.stderr == ""
    verdict = json.loads(done.stdout)
    assert verdict["complete"] is False
    assert verdict["mode"] == "strict"
    assert [(r["index"], r["kind"], r["seq"], r["served"], r["target"])
            for r in verdict["requests"]] == [(0, "exact", 0, True, "/v1/chat/completions")]
    assert (verdict["recorded"], verdict["exact"], verdict["missing"], verdict["unused"]) == (
        1,
        1,
        0,
        0,
    )
    assert verdict["pass"] is False  # it never finished, so it cannot have passed
    text = wiretape("verdict", str(killed_replay), cwd=tmp_path)
    assert "Traceback" not in text.stderr
    assert text.stdout.startswith("wiretape: verdict FAIL [replay did not finish] (strict)")
    # the run itself is intact after the killed replay
    shown = wiretape("show", str(killed_replay), "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert len(json.loads(shown.stdout)["exchanges"]) == 1


def test_verdict_of_a_killed_replay_does_not_exit_0(killed_replay, tmp_path):
    done = wiretape("verdict", str(killed_replay), "--json", cwd=tmp_path)
    assert json.loads(done.stdout)["pass"] is False
    assert done.returncode == 3


def test_a_background_process_holding_stdout_does_not_hold_the_recording(tmp_path):
    """The agent exits at once but leaves a process holding its stdout open:
    the recording ends with the agent (plus a short drain), keeps what was
    printed, and still stops the leftover when asked."""
    started = time.monotonic()
    done = wiretape("record", "-o", str(tmp_path / "bg.wtape"), "--", "sh", "-c",
                    "sleep 30 & echo hi", cwd=tmp_path)
    elapsed = time.monotonic() - started
    assert done.returncode == 0
    assert done.stdout == "hi\n"
    assert elapsed < 15, elapsed


# --- what reaches the disk: redaction --------------------------------------------------------

SECRETS_CLIENT = str(CLIENTS / "secrets_client.py")
_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def make_secrets(tag: str) -> dict[str, str]:
    """A distinct secret for every place, all of fixed lengths."""
    import secrets as rnd

    def token(n: int) -> str:
        return "".join(rnd.choice(_ALNUM) for _ in range(n))

    return {
        "authorization": f"{tag}Auth{token(24)}",
        "proxy_authorization": f"{tag}Proxy{token(24)}",
        "x_api_key": f"{tag}XApi{token(24)}",
        "api_key_header": f"{tag}ApiKey{token(24)}",
        "goog": f"{tag}Goog{token(24)}",
        "cookie": f"{tag}Cookie{token(24)}",
        "set_cookie": f"{tag}SetCookie{token(24)}",
        "key_param": f"{tag}KeyParam{token(24)}",
        "api_key_param": f"{tag}ApiKeyParam{token(24)}",
        "openai_key": "sk-proj-" + token(40),
        "anthropic_key": "sk-ant-api03-" + token(40),
    }


def fp(value: str) -> str:
    import hashlib

    return hashlib.sha256(value.encode()).hexdigest()[:8]


def leaks(root: Path, secrets: dict[str, str]) -> list[str]:
    """Every (file, secret name) where a secret's bytes appear in a file under ``root``."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        found += [f"{path.relative_to(root)}: {name}" for name, value in secrets.items()
                  if value.encode() in data]
    return found


@pytest.mark.slow  # a long scenario: make test-slow
def test_no_secret_reaches_the_disk_and_other_secrets_still_replay_exact(tmp_path):
    store = tmp_path / "store"
    first, second = make_secrets("One"), make_secrets("Two")
    assert {len(v) for v in first.values()} == {len(v) for v in second.values()}

    def run(*args: str, secrets: dict[str, str]) -> subprocess.CompletedProcess[str]:
        extra = {f"WT_SECRET_{k.upper()}": v for k, v in secrets.items() if k != "set_cookie"}
        return subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=tmp_path,
                              env={**env(), **extra, "WIRETAPE_HOME": str(store)},
                              capture_output=True, text=True, timeout=60)

    cookie = f"sid={first['set_cookie']}; Path=/; HttpOnly"
    with RoutedUpstream(set_cookie=cookie.encode()) as up:
        done = run("record", "--upstream", f"openai={up.url}/v1", "--", sys.executable,
                   SECRETS_CLIENT, secrets=first)
        seen = up.seen()
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"status": 200, "request_bytes": len(seen[0].body),
                                       "set_cookie_seen": True}
    # the upstream got the real request (so the secrets were really there to leak)
    assert seen[0].header("authorization") == f"Bearer {first['authorization']}".encode()
    assert first["openai_key"].encode() in seen[0].body
    assert first["key_param"].encode() in seen[0].target

    [run_file] = list((store / "runs").glob("*.wtape"))
    control = tmp_path / "control.bin"  # the scan does find a secret where there is one
    control.write_bytes(b"..." + first["cookie"].encode() + b"...")
    assert leaks(tmp_path, first) == ["control.bin: cookie"]
    control.unlink()
    assert leaks(tmp_path, first) == []

    # every redaction is a labelled fact with an 8-hex fingerprint of the secret
    with open_run(run_file) as rf:
        facts = {(r.location, r.name.lower()): r.fingerprint for _, r in rf.redactions()}
        [exchange] = rf.exchanges()
    assert all(len(f) == 8 and set(f) <= set("0123456789abcdef") for f in facts.values()), facts
    expected = {
        ("request-header", "authorization"): {fp(first["authorization"])},
        ("request-header", "proxy-authorization"): {fp(first["proxy_authorization"]),
                                                    fp("Basic " + first["proxy_authorization"])},
        ("request-header", "x-api-key"): {fp(first["x_api_key"])},
        ("request-header", "api-key"): {fp(first["api_key_header"])},
        ("request-header", "x-goog-api-key"): {fp(first["goog"])},
        ("request-header", "cookie"): {fp("session=" + first["cookie"]), fp(first["cookie"])},
        ("response-header", "set-cookie"): {fp(cookie), fp(first["set_cookie"])},
        ("query", "key"): {fp(first["key_param"])},
        ("query", "api_key"): {fp(first["api_key_param"])},
        ("request-body", "openai-key"): {fp(first["openai_key"])},
        ("request-body", "anthropic-key"): {fp(first["anthropic_key"])},
    }
    assert set(facts) == set(expected)
    for where, fingerprints in expected.items():
        assert facts[where] in fingerprints, (where, facts[where])
    # what was stored in their place keeps the body's length
    assert len(exchange.request.body) == len(seen[0].body)
    assert exchange.response is not None and exchange.response.body == seen[0].sent_body

    # the same agent with other secrets, the provider gone: still exact
    done = run("replay", str(run_file), "--json", "--", sys.executable, SECRETS_CLIENT,
               secrets=second)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert json.loads(lines[0]) == {"status": 200, "request_bytes": len(seen[0].body),
                                    "set_cookie_seen": True}
    verdict = json.loads("\n".join(lines[1:]))
    assert (verdict["exact"], verdict["diverged"], verdict["recorded"], verdict["pass"]) == (
        1, 0, 1, True)
    assert leaks(tmp_path, first) == []
    assert leaks(tmp_path, second) == []


# --- SIGKILL at random moments, with streams in flight ----------------------------------------

CRASH_TRIALS = int(os.environ.get("WIRETAPE_CRASH_TRIALS", "30"))
CRASH_CLIENTS = 4


@dataclass
class Trial:
    """What the clients of one trial saw: for each exchange that reached its
    end (the terminating chunk read), the request body and the body read."""

    completed: list[tuple[bytes, bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)


def stream_client(base: str, trial: int, client: int, seen: Trial) -> None:
    """Chat requests one after another, each body unique, two in three
    streamed (their end is the terminating chunk) and one not (its end is the
    last byte of a Content-Length body), until the proxy goes away (or the
    trial ends)."""
    with httpx.Client(timeout=10, trust_env=False) as http:
        for n in itertools.count():
            if seen.stop.is_set():
                return
            body = json.dumps({"model": "m", "stream": n % 3 != 2, "messages": [
                {"role": "user", "content": f"trial {trial} client {client} request {n}"}]})
            try:
                with http.stream("POST", f"{base}/chat/completions", content=body,
                                 headers={"content-type": "application/json"}) as resp:
                    data = b"".join(resp.iter_raw())
                    status = resp.status_code
            except httpx.HTTPError:
                return  # the proxy was killed: this exchange never ended for the client
            if status == 200:
                with seen.lock:
                    seen.completed.append((body.encode(), data))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sigkill_at_random_moments_never_loses_an_exchange_a_client_saw_end(tmp_path):
    """``serve --record`` killed with SIGKILL at a random moment while four
    clients stream through it, CRASH_TRIALS times (WIRETAPE_CRASH_TRIALS;
    WIRETAPE_CRASH_SEED repeats a failure's timing): every run file opens,
    passes SQLite's integrity check, and holds every exchange whose end its
    client read, request and response byte for byte."""
    seed = int(os.environ.get("WIRETAPE_CRASH_SEED", str(time.time_ns() % 10**6)))
    rng = random.Random(seed)
    words = " ".join(f"word{i}" for i in range(40))
    script = [TextTurn(words) for _ in range(CRASH_TRIALS * CRASH_CLIENTS * 40)]
    report: list[str] = []
    seen_total = 0
    started = time.monotonic()
    with FakeProvider(script, delay=0.002) as fp:
        for trial in range(CRASH_TRIALS):
            run = tmp_path / f"trial{trial:02d}.wtape"
            wt = subprocess.Popen(
                [sys.executable, "-m", "wiretape", "serve", "--record", "--port", "0", "-o",
                 str(run), "--upstream", f"openai={fp.url}/v1"],
                cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                text=True)
            seen = Trial()
            clients: list[threading.Thread] = []
            try:
                assert wt.stdout is not None
                line = wt.stdout.readline()
                assert line.startswith("openai: http://127.0.0.1:"), line
                base = line.split(": ", 1)[1].strip()
                clients = [threading.Thread(target=stream_client, args=(base, trial, c, seen))
                           for c in range(CRASH_CLIENTS)]
                for client in clients:
                    client.start()
                time.sleep(rng.uniform(0.0, 1.5))
                kill9(wt)
            finally:
                seen.stop.set()
                if wt.poll() is None:
                    wt.kill()
                wt.wait(10)
                for client in clients:
                    client.join(30)
            stored = crash_survivors(run)
            missing = [req for req, resp in seen.completed if stored.get(req) != resp]
            seen_total += len(seen.completed)
            report.append(f"trial {trial}: {len(seen.completed)} seen complete, "
                          f"{len(stored)} stored, {len(missing)} missing")
            assert not missing, (f"seed {seed}: trial {trial} lost {len(missing)} exchanges its "
                                 f"client saw end, e.g. {missing[0][:80]!r}")
    elapsed = time.monotonic() - started
    print(f"\n{CRASH_TRIALS} trials in {elapsed:.0f} s (seed {seed}), {seen_total} exchanges "
          f"seen complete, all stored:", *report, sep="\n  ")


def crash_survivors(run: Path) -> dict[bytes, bytes]:
    """A killed recording's run file, checked as a stranger would: it opens
    with wiretape, SQLite finds it intact; its exchanges (request body to
    response body)."""
    assert run.exists(), "serve announced its port before its run file existed"
    db = sqlite3.connect(f"file:{run}?mode=ro", uri=True, timeout=5)
    try:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        db.close()
    with open_run(run) as rf:
        rf.info()
        return {e.request.body: e.response.body if e.response else b"" for e in rf.exchanges()}
