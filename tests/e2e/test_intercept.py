"""TLS interception (``--intercept``) end to end, with clients whose origin
is their library's default: ``https://api.openai.com``, ``https://api.anthropic.com``.

The "real origin" is a scripted fake provider speaking HTTPS with a
certificate from a test CA of its own; the recording reaches it with
``--resolve HOST=127.0.0.1:PORT`` and trusts it with ``--upstream-ca``. The
client trusts only the usual roots plus the run's CA (the bundle wiretape
names in SSL_CERT_FILE and friends). The replay runs with the provider
stopped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from test_sdk_clients import (
    ANTHROPIC_SCRIPT,
    CHAT_SCRIPT,
    CLIENTS,
    assert_closed,
    child_env,
    explain,
)

from wiretape.intercept.ca import RunCA
from wiretape.store import open_run
from wiretape.testing import FakeProvider, TextTurn, Turn

PYTHON = sys.executable
TIMEOUT = 90
INTERCEPT_CLIENTS = Path(__file__).resolve().parent / "clients_intercept"

pytestmark = pytest.mark.timeout(240)


def wiretape(args: Sequence[str], cwd: Path, env: dict[str, str] | None = None,
             ) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([PYTHON, "-m", "wiretape", *args], cwd=cwd, env=env or child_env(),
                          capture_output=True, timeout=TIMEOUT)


def verdict_of(run: Path, cwd: Path) -> dict[str, Any]:
    out = wiretape(["verdict", str(run), "--json"], cwd)
    verdict: dict[str, Any] = json.loads(out.stdout)
    assert out.returncode == verdict["exit_code"], explain(out)
    return verdict


def record_intercepted(tmp_path: Path, upstream_ca: tuple[RunCA, Path], script: Sequence[Turn],
                       host: str, command: Sequence[str], *extra: str,
                       env: dict[str, str] | None = None,
                       ) -> tuple[Path, subprocess.CompletedProcess[bytes], list[Any]]:
    ca, pem = upstream_ca
    run = tmp_path / "run.wtape"
    with FakeProvider(script, ssl_context=ca.server_context(host)) as fp:
        rec = wiretape(["record", "--intercept", "-o", str(run), "--no-snapshot",
                        "--upstream-ca", str(pem), "--resolve", f"{host}=127.0.0.1:{fp.port}",
                        *extra, "--", *command], tmp_path, env)
        port = fp.port
    assert_closed(port)
    return run, rec, fp.requests


def replay_exact(tmp_path: Path, run: Path, rec: subprocess.CompletedProcess[bytes],
                 received: list[Any], command: Sequence[str],
                 env: dict[str, str] | None = None) -> dict[str, Any]:
    """Replay with the provider gone: exit 0, every exchange exact, the
    client saw the same bytes."""
    rep = wiretape(["replay", str(run), "--", *command], tmp_path, env)
    assert rep.returncode == 0, explain(rep)
    assert rep.stdout == rec.stdout
    verdict = verdict_of(run, tmp_path)
    assert verdict["recorded"] == len(received) > 0, verdict
    assert (verdict["exact"], verdict["missing"], verdict["unused"], verdict["diverged"]) == (
        len(received), 0, 0, 0), verdict
    assert verdict["pass"] is True, verdict
    return verdict


@pytest.mark.slow  # a long scenario: make test-slow
def test_openai_sdk_with_its_default_base_url(
    tmp_path: Path, upstream_ca: tuple[RunCA, Path]
) -> None:
    command = [PYTHON, str(CLIENTS / "openai_client.py"), "chat-stream"]
    run, rec, received = record_intercepted(tmp_path, upstream_ca, CHAT_SCRIPT, "api.openai.com",
                                            command)
    assert rec.returncode == 0, explain(rec)
    assert [r.target for r in received] == ["/v1/chat/completions"] * 2
    # The origin saw its own name, not wiretape's address.
    assert all({k.lower(): v for k, v in r.headers}[b"host"] == b"api.openai.com"
               for r in received)
    with open_run(run) as rf:
        info = rf.info()
        exchanges = rf.exchanges()
    assert "api.openai.com" in info.intercept
    assert {e.origin for e in exchanges} == {"openai"}
    # No base URL was set: the agent kept its own origin.
    assert not {"OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"} & set(info.env_names)
    assert {"HTTPS_PROXY", "SSL_CERT_FILE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
            "REQUESTS_CA_BUNDLE", "NO_PROXY"} <= set(info.env_names)
    replay_exact(tmp_path, run, rec, received, command)
    # Its requests name the provider's own host: only an intercepting replay answers them.
    refused = wiretape(["replay", str(run), "--no-intercept", "--", *command], tmp_path)
    assert refused.returncode == 2 and "was recorded with --intercept" in refused.stderr.decode()


@pytest.mark.slow  # a long scenario: make test-slow
def test_anthropic_sdk_with_its_default_base_url(tmp_path: Path,
                                                 upstream_ca: tuple[RunCA, Path]) -> None:
    command = [PYTHON, str(CLIENTS / "anthropic_client.py")]
    run, rec, received = record_intercepted(tmp_path, upstream_ca, ANTHROPIC_SCRIPT,
                                            "api.anthropic.com", command)
    assert rec.returncode == 0, explain(rec)
    assert [r.target for r in received] == ["/v1/messages"] * 2
    with open_run(run) as rf:
        assert {e.origin for e in rf.exchanges()} == {"anthropic"}
    replay_exact(tmp_path, run, rec, received, command)


def test_curl_over_https(tmp_path: Path, upstream_ca: tuple[RunCA, Path]) -> None:
    command = [str(INTERCEPT_CLIENTS / "curl_https.sh")]
    script = [TextTurn("Red, yellow and blue.")]
    run, rec, received = record_intercepted(tmp_path, upstream_ca, script, "api.openai.com",
                                            command)
    assert rec.returncode == 0, explain(rec)
    assert b"data: [DONE]" in rec.stdout and b"Red" in rec.stdout
    replay_exact(tmp_path, run, rec, received, command)


def test_curl_http2_over_https(tmp_path: Path, upstream_ca: tuple[RunCA, Path]) -> None:
    """ALPN offers h2 inside the tunnel: curl --http2 speaks it, the
    exchange is recorded as HTTP/2, and the replay serves it HTTP/2 again."""
    command = [str(INTERCEPT_CLIENTS / "curl_h2.sh")]
    script = [TextTurn("Red, yellow and blue.")]
    run, rec, received = record_intercepted(tmp_path, upstream_ca, script, "api.openai.com",
                                            command)
    assert rec.returncode == 0, explain(rec)
    assert b"data: [DONE]" in rec.stdout and rec.stdout.endswith(b"\nhttp_version 2\n")
    with open_run(run) as rf:
        [exchange] = rf.exchanges()
    assert exchange.request.http_version == b"2"
    assert dict(exchange.request.headers)[b"host"] == b"api.openai.com"
    assert exchange.response is not None and exchange.response.http_version == b"1.1"
    replay_exact(tmp_path, run, rec, received, command)


TOOL_HOST = "tools.example.test"


def test_a_host_off_the_list_is_tunnelled_then_refused(tmp_path: Path,
                                                       upstream_ca: tuple[RunCA, Path]) -> None:
    """The agent calls its provider (intercepted) and a tool's own HTTPS
    service (not a provider: tunnelled untouched while recording, its bytes
    never stored; refused while replaying, and the replay says so)."""
    ca, pem = upstream_ca
    secret = "tool-answer-7f3a9c"
    tool_fetch = (
        f"curl -sS --fail-with-body --cacert {pem} -H 'content-type: application/json' "
        '--data-binary \'{"model":"m","messages":[{"role":"user","content":"x"}]}\' '
        f"https://{TOOL_HOST}/v1/chat/completions >tool.out && echo 'tool fetch ok' "
        "|| echo 'tool fetch failed'"
    )
    command = ["sh", "-c", f"{INTERCEPT_CLIENTS / 'curl_https.sh'}; echo; {tool_fetch}"]
    with FakeProvider([TextTurn(secret)], ssl_context=ca.server_context(TOOL_HOST)) as tool:
        run, rec, _received = record_intercepted(
            tmp_path, upstream_ca, [TextTurn("Red, yellow and blue.")], "api.openai.com",
            command, "--resolve", f"{TOOL_HOST}=127.0.0.1:{tool.port}")
        assert len(tool.requests) == 1
    assert rec.returncode == 0, explain(rec)
    # The tool's service answered through the tunnel.
    assert b"tool fetch ok" in rec.stdout and secret in (tmp_path / "tool.out").read_text()
    stderr = rec.stderr.decode()
    assert f"tunnelled {TOOL_HOST}:443 untouched (1 connection(s))" in stderr, stderr
    with open_run(run) as rf:
        report = rf.connect_report()
        (only,) = rf.exchanges()  # the provider's exchange; the tunnel's bytes are not kept
        assert only.origin == "openai" and only.response is not None
        assert secret.encode() not in only.response.body
    assert report is not None
    (tunnel,) = report["tunnels"]
    assert (tunnel["host"], tunnel["port"], tunnel["connections"]) == (TOOL_HOST, 443, 1)
    assert tunnel["bytes_up"] > 500 and tunnel["bytes_down"] > 500  # TLS handshake and data
    assert secret.encode() not in run.read_bytes()

    rep = wiretape(["replay", str(run), "--", *command], tmp_path)
    # The provider's exchange is exact; the tool's fetch failed, so stdout differs.
    assert rep.returncode == 1, explain(rep)
    assert b"tool fetch failed" in rep.stdout
    assert f"refused 1 tunnel(s) to {TOOL_HOST}:443" in rep.stderr.decode()
    verdict = verdict_of(run, tmp_path)
    assert (verdict["exact"], verdict["recorded"]) == (1, 1)
    assert verdict["outcome"]["intercept"]["refused"] == {f"{TOOL_HOST}:443": 1}


def test_a_client_that_does_not_trust_the_ca_is_reported_by_host(
        tmp_path: Path, upstream_ca: tuple[RunCA, Path]) -> None:
    """curl told to trust only another CA (--cacert) rejects the run's
    certificate: the summary names the host instead of a silent empty run."""
    _ca, pem = upstream_ca
    command = ["curl", "-sS", "--cacert", str(pem), "https://api.openai.com/v1/models"]
    _run, rec, received = record_intercepted(tmp_path, upstream_ca, [], "api.openai.com", command)
    assert rec.returncode == 60, explain(rec)  # curl: peer certificate cannot be authenticated
    assert received == []
    assert ("the client rejected the certificate for api.openai.com (TLSV1_ALERT_UNKNOWN_CA): "
            "it may pin certificates or ignore SSL_CERT_FILE") in rec.stderr.decode()


def test_the_ca_key_is_gone_and_no_key_material_is_in_the_run(
        tmp_path: Path, upstream_ca: tuple[RunCA, Path]) -> None:
    command = ["sh", "-c", 'echo "$SSL_CERT_FILE"; ls -A "$(dirname "$SSL_CERT_FILE")"; '
               'stat -c %a "$(dirname "$SSL_CERT_FILE")"; '
               f"{INTERCEPT_CLIENTS / 'curl_https.sh'} >/dev/null"]
    run, rec, _received = record_intercepted(tmp_path, upstream_ca, [TextTurn("Blue.")],
                                             "api.openai.com", command)
    assert rec.returncode == 0, explain(rec)
    bundle, listing, mode = rec.stdout.decode().splitlines()
    # While the agent ran: a private directory holding only the bundle (leaf
    # keys are deleted as soon as they are loaded; the CA key is never written).
    assert (listing, mode) == ("ca-bundle.pem", "700")
    assert not Path(bundle).exists() and not Path(bundle).parent.exists()
    data = run.read_bytes()
    assert b"PRIVATE KEY" not in data and b"BEGIN CERTIFICATE" not in data
    with open_run(run) as rf:
        for exchange in rf.exchanges():
            assert exchange.response is not None
            for blob in (exchange.request.body, exchange.response.body):
                assert b"PRIVATE KEY" not in blob and b"BEGIN CERTIFICATE" not in blob


@pytest.mark.slow  # a long scenario: `make test-slow`
def test_nanobot_default_openai_provider_with_no_config_change(
        tmp_path: Path, upstream_ca: tuple[RunCA, Path]) -> None:
    """nanobot's ``providers.openai`` with no ``apiBase`` talks to
    https://api.openai.com/v1 through the openai SDK: recorded and replayed
    with --intercept and the config left as the user wrote it."""
    import nanobot_support as ns

    ca, pem = upstream_ca
    scene = ns.make_scene(tmp_path / "scene", None)
    config_before = scene.config_path.read_bytes()
    assert b"apiBase" not in config_before and b'"openai"' in config_before
    env = {k: v for k, v in scene.env(child_env()).items()}
    run = tmp_path / "nanobot.wtape"
    with FakeProvider(ns.session_script(), ssl_context=ca.server_context("api.openai.com")) as fp:
        rec = wiretape(["record", "--intercept", "-o", str(run), "--upstream-ca", str(pem),
                        "--resolve", f"api.openai.com=127.0.0.1:{fp.port}",
                        "--snapshot", str(scene.workspace), "--", *scene.argv()],
                       scene.root, env)
        received = fp.requests
    assert rec.returncode == 0, explain(rec)
    live = rec.stdout.decode()
    assert ns.model_error(live) is None, live
    assert ns.EXPECTED_QUOTE in ns.final_answer(live)
    assert [r.target for r in received] == ["/v1/chat/completions"] * 4
    # nanobot's tokenizer download (not a provider) went to the tunnel, not the tape.
    assert "tunnelled openaipublic.blob.core.windows.net:443 untouched" in rec.stderr.decode()
    assert "refused before forwarding" not in rec.stderr.decode()

    scene.reset()  # a fresh config directory: no session history is resent
    assert scene.config_path.read_bytes() == config_before
    rep = wiretape(["replay", str(run)], scene.root, env)
    assert rep.returncode == 0, explain(rep)
    assert ns.final_answer(rep.stdout.decode()) == ns.final_answer(live)
    verdict = verdict_of(run, scene.root)
    assert (verdict["recorded"], verdict["exact"], verdict["missing"], verdict["unused"]) == (
        4, 4, 0, 0), verdict
    assert verdict["outcome"]["intercept"]["intercepted"]["api.openai.com"] >= 1


def _serve(args: Sequence[str], cwd: Path) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    """Start ``wiretape serve ...``; return it and the variables it printed."""
    proc = subprocess.Popen([PYTHON, "-m", "wiretape", "serve", *args], cwd=cwd, env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    exported: dict[str, str] = {}
    while "SSL_CERT_FILE" not in exported or "NO_PROXY" not in exported:
        line = proc.stdout.readline().decode()
        assert line, proc.stderr.read().decode() if proc.stderr else "serve ended"
        name, _, value = line.removeprefix("export ").strip().partition("=")
        exported[name] = value
    return proc, exported


@pytest.mark.slow  # a long scenario: `make test-slow`
def test_serve_prints_what_to_export_and_records_then_replays(
        tmp_path: Path, upstream_ca: tuple[RunCA, Path]) -> None:
    import signal

    ca, pem = upstream_ca
    run = tmp_path / "served.wtape"
    command = [PYTHON, str(CLIENTS / "openai_client.py"), "chat"]
    outputs = []
    with FakeProvider(CHAT_SCRIPT, ssl_context=ca.server_context("api.openai.com")) as fp:
        proc, exported = _serve(["--record", "--intercept", "-o", str(run), "--upstream-ca",
                                 str(pem), "--resolve", f"api.openai.com=127.0.0.1:{fp.port}"],
                                tmp_path)
        assert exported["HTTPS_PROXY"].startswith("http://127.0.0.1:")
        client = subprocess.run(command, env={**child_env(), **exported}, capture_output=True,
                                timeout=TIMEOUT)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=TIMEOUT)
    assert client.returncode == 0, client.stderr
    outputs.append(client.stdout)
    assert not Path(exported["SSL_CERT_FILE"]).exists()

    proc, exported = _serve(["--replay", str(run)], tmp_path)
    client = subprocess.run(command, env={**child_env(), **exported}, capture_output=True,
                            timeout=TIMEOUT)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=TIMEOUT)
    assert client.returncode == 0, client.stderr
    assert client.stdout == outputs[0]
    verdict = verdict_of(run, tmp_path)
    assert (verdict["recorded"], verdict["exact"], verdict["unused"]) == (2, 2, 0), verdict


@pytest.mark.slow  # a long scenario: make test-slow
def test_from_python(tmp_path: Path, upstream_ca: tuple[RunCA, Path],
                     monkeypatch: pytest.MonkeyPatch) -> None:
    import wiretape

    ca, pem = upstream_ca
    for name, value in child_env().items():
        monkeypatch.setenv(name, value)
    for name in ("OPENAI_BASE_URL", "HTTPS_PROXY", "https_proxy", "SSL_CERT_FILE"):
        monkeypatch.delenv(name, raising=False)
    command = [PYTHON, str(CLIENTS / "openai_client.py"), "chat"]
    with FakeProvider(CHAT_SCRIPT, ssl_context=ca.server_context("api.openai.com")) as fp:
        run = wiretape.record(command, out=tmp_path / "api.wtape", snapshots=[], intercept=True,
                              upstream_ca=pem, resolve={"api.openai.com": f"127.0.0.1:{fp.port}"})
    assert run.exit_status == 0 and run.exchanges == 2, run.stderr
    verdict = wiretape.replay(run.path)
    assert verdict.passed and verdict.exact == 2, verdict
