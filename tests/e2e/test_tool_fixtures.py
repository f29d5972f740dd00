"""Tool fixtures end to end (``record --tools``): the agent's own HTTP and
HTTPS requests, not only its model calls, recorded through the forward
proxy and served back by the replay, never forwarded.

The pages live on local servers (one HTTPS, with a certificate from a test
CA the recording trusts with ``--upstream-ca``; one plain HTTP) addressed
by host names only wiretape resolves (``--resolve HOST=127.0.0.1:PORT``):
loopback itself stays direct. The agent is curl, a real process, and the
model is the scripted fake provider behind the provider's own host. The
replays run with every server stopped, offline where the system allows it.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from test_intercept import wiretape
from test_sdk_clients import assert_closed, child_env, explain

from wiretape.intercept.ca import RunCA
from wiretape.launch.isolate import capabilities
from wiretape.store import open_run
from wiretape.testing import FakeProvider, TextTurn

CURL_PROVIDER = Path(__file__).resolve().parent / "clients_intercept" / "curl_https.sh"
CAPS = capabilities()
#: A secret a tool sends to its own service: secret-named in the environment.
SEARCH_KEY = "srch-live-0123456789abcdef0123456789"

pytestmark = pytest.mark.timeout(240)

PAGES = {"/guide.txt": b"The guide says: turn left at the lighthouse.\n",
         "/search?q=tides": b'{"results": ["high tide at 06:12"]}\n'}


class PageServer:
    """A local web server with the pages above; ``seen`` keeps each
    request's (method, target, headers)."""

    def __init__(self, ssl_context: Any = None) -> None:
        seen: list[tuple[str, str, dict[str, str]]] = []
        self.seen = seen

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(("GET", self.path, {k.lower(): v for k, v in self.headers.items()}))
                body = PAGES.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *_args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if ssl_context is not None:
            self.server.socket = ssl_context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> PageServer:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def verdict_of(run: Path, cwd: Path) -> dict[str, Any]:
    out = wiretape(["verdict", str(run), "--json"], cwd)
    verdict: dict[str, Any] = json.loads(out.stdout)
    return verdict


#: The agent: asks the model, then its "tools" fetch a page over HTTPS, and
#: search over plain HTTP with the search service's key.
AGENT = ('"$0"; echo; curl -sS --fail-with-body https://docs.test/guide.txt; '
         'curl -sS --fail-with-body -H "X-Api-Key: $SEARCH_API_KEY" '
         '"http://search.test:8080/search?q=tides"')


def record_with_tools(tmp_path: Path, upstream_ca: tuple[RunCA, Path], command: Sequence[str],
                      *extra: str) -> tuple[Path, subprocess.CompletedProcess[bytes],
                                            list[tuple[str, str, dict[str, str]]]]:
    ca, pem = upstream_ca
    run = tmp_path / "run.wtape"
    env = {**child_env(), "SEARCH_API_KEY": SEARCH_KEY}
    with FakeProvider([TextTurn("Red, yellow and blue.")],
                      ssl_context=ca.server_context("api.openai.com")) as fp, \
            PageServer(ca.server_context("docs.test")) as docs, PageServer() as search:
        rec = wiretape(["record", "--tools", "-o", str(run), "--no-snapshot",
                        "--upstream-ca", str(pem),
                        "--resolve", f"api.openai.com=127.0.0.1:{fp.port}",
                        "--resolve", f"docs.test=127.0.0.1:{docs.port}",
                        "--resolve", f"search.test=127.0.0.1:{search.port}",
                        *extra, "--", *command], tmp_path, env)
        ports = (fp.port, docs.port, search.port)
    for port in ports:
        assert_closed(port)
    return run, rec, docs.seen + search.seen


def test_tool_pages_are_recorded_and_served_back_with_every_server_gone(
    tmp_path: Path, upstream_ca: tuple[RunCA, Path]
) -> None:
    command = ["sh", "-c", AGENT, str(CURL_PROVIDER)]
    run, rec, seen = record_with_tools(tmp_path, upstream_ca, command)
    assert rec.returncode == 0, explain(rec)
    assert b"Red" in rec.stdout and PAGES["/guide.txt"] in rec.stdout
    assert PAGES["/search?q=tides"] in rec.stdout
    assert ("wiretape: 2 of them tool exchanges (--tools): http://search.test:8080, "
            "https://docs.test") in rec.stderr.decode()
    # The sites saw their own names and the tool's key; nothing else.
    assert [(m, t, h["host"]) for m, t, h in seen] == [
        ("GET", "/guide.txt", "docs.test"), ("GET", "/search?q=tides", "search.test:8080")]
    assert seen[1][2]["x-api-key"] == SEARCH_KEY
    with open_run(run) as rf:
        exchanges = rf.exchanges()
        info = rf.info()
        raw = run.read_bytes()
    assert [(e.origin, e.kind) for e in exchanges] == [
        ("openai", "model"), ("tool:https://docs.test", "tool"),
        ("tool:http://search.test:8080", "tool")]
    assert [e.request.target for e in exchanges[1:]] == [b"/guide.txt", b"/search?q=tides"]
    assert exchanges[1].response is not None
    assert b"".join(f.data for f in exchanges[1].response.frames) == PAGES["/guide.txt"]
    # The tool's secret is redacted as a model call's would be.
    key = dict((k.lower(), v) for k, v in exchanges[2].request.headers)[b"x-api-key"]
    assert SEARCH_KEY.encode() not in key and SEARCH_KEY.encode() not in raw
    assert info.extra["tools"] == "1"

    offline = ["--offline"] if CAPS.network_namespaces else []
    env = {**child_env(), "SEARCH_API_KEY": SEARCH_KEY}
    rep = wiretape(["replay", str(run), *offline, "--", *command], tmp_path, env)
    assert rep.returncode == 0, explain(rep)
    assert rep.stdout == rec.stdout
    line = rep.stderr.decode()
    assert ("recorded 1, exact 1, substituted 0, diverged 0, missing 0, unused 0; tools: "
            "recorded 2, exact 2, substituted 0, equivalent 0, diverged 0, missing 0, "
            "unused 0") in line, line
    verdict = verdict_of(run, tmp_path)
    assert (verdict["recorded"], verdict["exact"], verdict["pass"]) == (1, 1, True), verdict
    assert verdict["tools"] == {"recorded": 2, "exact": 2, "substituted": 0, "equivalent": 0,
                                "diverged": 0, "missing": 0, "unused": 0, "unused_seqs": [],
                                "unused_exchanges": [], "passed": True}
    # show lists the tool exchanges as such.
    shown = wiretape(["show", str(run)], tmp_path)
    assert shown.returncode == 0, explain(shown)
    text = shown.stdout.decode()
    lines = text.splitlines()
    assert any(" GET " in line and " tool https://docs.test/guide.txt " in line
               for line in lines), text
    assert any(" tool http://search.test:8080/search?q=tides " in line for line in lines), text
    # An export names each tool exchange by its own URL.
    har = tmp_path / "run.har"
    assert wiretape(["export", str(run), "--har", str(har)], tmp_path).returncode == 0
    urls = [e["request"]["url"] for e in json.loads(har.read_text())["log"]["entries"]]
    assert urls[1:] == ["https://docs.test/guide.txt", "http://search.test:8080/search?q=tides"]
    # So does the HTML report.
    page = tmp_path / "run.html"
    made = wiretape(["report", str(run), "-o", str(page)], tmp_path)
    assert made.returncode == 0, explain(made)
    assert "tool GET https://docs.test/guide.txt" in page.read_text()


def test_an_unrecorded_tool_request_is_missing_and_answered_with_an_error(
    tmp_path: Path, upstream_ca: tuple[RunCA, Path]
) -> None:
    command = ["sh", "-c", AGENT, str(CURL_PROVIDER)]
    run, rec, _ = record_with_tools(tmp_path, upstream_ca, command)
    assert rec.returncode == 0, explain(rec)
    other = ["sh", "-c", AGENT.replace("guide.txt", "other.txt"), str(CURL_PROVIDER)]
    env = {**child_env(), "SEARCH_API_KEY": SEARCH_KEY}
    rep = wiretape(["replay", str(run), "--diagnostic", "--", *other], tmp_path, env)
    assert rep.returncode == 3, explain(rep)
    # curl got the error answer, a gateway's status, and went on.
    assert (b"wiretape replay: no recorded tool exchange left for GET "
            b"https://docs.test/other.txt (missing)") in rep.stdout
    assert b"curl: (22) The requested URL returned error: 502" in rep.stderr
    assert PAGES["/search?q=tides"] in rep.stdout
    verdict = verdict_of(run, tmp_path)
    assert verdict["pass"] is False and verdict["exit_code"] == 3
    # The model exchange passed; the tools' line says what failed.
    assert (verdict["recorded"], verdict["exact"], verdict["missing"]) == (1, 1, 0)
    tools = verdict["tools"]
    assert (tools["exact"], tools["missing"], tools["unused"], tools["passed"]) == (
        1, 1, 1, False)
    assert tools["unused_exchanges"][0]["target"] == "https://docs.test/guide.txt"
    details = rep.stderr.decode()
    assert ("tool request 1 GET https://docs.test/other.txt: missing (no recorded "
            "counterpart, rejected)") in details, details
    # Strict (the default) stops there, as for a model request.
    strict = wiretape(["replay", str(run), "--", *other], tmp_path, env)
    assert strict.returncode == 3, explain(strict)
    assert PAGES["/search?q=tides"] not in strict.stdout
    assert "stopped at missing tool request GET https://docs.test/other.txt" in (
        strict.stderr.decode())
    # The HTML report explains the missing tool request as the text does.
    page = tmp_path / "run.html"
    assert wiretape(["report", str(run), "-o", str(page)], tmp_path).returncode == 0
    assert "tool request 1 GET https://docs.test/other.txt" in page.read_text()


def test_excepted_hosts_stay_direct_and_plain_http_is_refused_without_tools(
    tmp_path: Path, upstream_ca: tuple[RunCA, Path]
) -> None:
    command = ["sh", "-c", 'echo "$NO_PROXY"; curl -sS -o /dev/null -w "%{http_code}" '
               '"http://search.test:8080/search?q=tides"']
    _, rec, seen = record_with_tools(tmp_path, upstream_ca, command,
                                     "--tools-except", "db.test")
    assert rec.returncode == 0, explain(rec)
    assert rec.stdout.splitlines()[0] == b"localhost,127.0.0.1,::1,db.test"
    assert rec.stdout.endswith(b"200") and len(seen) == 1
    # Without --tools, a plain-HTTP request through the proxy is refused, as ever.
    plain = tmp_path / "plain.wtape"
    out = wiretape(["record", "--intercept", "-o", str(plain), "--no-snapshot", "--",
                    *command], tmp_path)
    assert out.returncode == 0, explain(out)
    assert out.stdout.endswith(b"400")
    with open_run(plain) as rf:
        assert rf.exchanges() == [] and "tools" not in rf.info().extra


def test_tools_options_are_checked(tmp_path: Path) -> None:
    out = wiretape(["record", "--tools-except", "db.test", "--", "true"], tmp_path)
    assert out.returncode == 2 and b"--tools-except needs --tools" in out.stderr
    out = wiretape(["record", "--tools", "--tools-except", "http://db.test", "--", "true"],
                   tmp_path)
    assert out.returncode == 2 and b"--tools-except 'http://db.test': expected a host name" in (
        out.stderr)
    out = wiretape(["serve", "--replay", "x", "--tools"], tmp_path)
    assert out.returncode == 2 and b"--tools goes with --record" in out.stderr


#: A public address (nanobot's web_fetch refuses private and loopback ones,
#: and resolves names itself) that ``--resolve`` sends to the local server:
#: nothing leaves the machine.
PAGE_IP = "93.184.216.34"
PAGE_URL = f"http://{PAGE_IP}/guide.txt"


@pytest.mark.slow  # a long scenario: `make test-slow`
@pytest.mark.skipif(not CAPS.network_namespaces, reason=CAPS.reasons.get("network_namespaces",
                                                                          ""))
def test_nanobot_web_fetch_replayed_offline_with_the_page_server_gone(
        tmp_path: Path, upstream_ca: tuple[RunCA, Path]) -> None:
    """nanobot (its openai provider, no apiBase) asks the model, whose
    scripted answer calls web_fetch on a page of a local server; recorded
    with --tools, the server stopped, replayed --offline: the same answer,
    every model and tool exchange exact."""
    import nanobot_support as ns

    ca, pem = upstream_ca
    script = [
        {"tool_calls": [{"name": "web_fetch", "arguments": {"url": PAGE_URL}}],
         "expect": "lighthouse"},
        {"text": "The guide says to turn left at the lighthouse.", "expect": "turn left"},
    ]
    scene = ns.make_scene(tmp_path / "scene", None,
                          prompt=f"What does the guide at {PAGE_URL} say? See the lighthouse.")
    config = json.loads(scene.config_path.read_text())
    # The web tools on; the page read here, not through a third-party reader.
    config["tools"]["web"] = {"enable": True, "fetch": {"useJinaReader": False}}
    scene.config_path.write_text(json.dumps(config))
    env = scene.env(child_env())
    run = tmp_path / "nanobot.wtape"
    from wiretape.testing import script_from_json

    with FakeProvider(script_from_json(script),
                      ssl_context=ca.server_context("api.openai.com")) as fp, \
            PageServer() as pages:
        rec = wiretape(["record", "--tools", "-o", str(run), "--upstream-ca", str(pem),
                        "--resolve", f"api.openai.com=127.0.0.1:{fp.port}",
                        "--resolve", f"{PAGE_IP}=127.0.0.1:{pages.port}",
                        "--snapshot", str(scene.workspace), "--", *scene.argv()],
                       scene.root, env)
        ports = (fp.port, pages.port)
        seen = pages.seen
    for port in ports:
        assert_closed(port)
    assert rec.returncode == 0, explain(rec)
    live = rec.stdout.decode()
    assert ns.model_error(live) is None, live
    assert "turn left at the lighthouse" in ns.final_answer(live), live
    assert seen and all(target == "/guide.txt" for _, target, _ in seen), seen
    with open_run(run) as rf:
        exchanges = rf.exchanges()
    tools = [e for e in exchanges if e.kind == "tool"]
    assert f"tool:http://{PAGE_IP}" in {e.origin for e in tools}
    assert sum(e.kind == "model" for e in exchanges) == 2

    scene.reset()
    scene.config_path.write_text(json.dumps(config))
    rep = wiretape(["replay", str(run), "--offline"], scene.root, env)
    assert rep.returncode == 0, explain(rep)
    assert ns.final_answer(rep.stdout.decode()) == ns.final_answer(live)
    verdict = verdict_of(run, scene.root)
    assert (verdict["recorded"], verdict["exact"], verdict["pass"]) == (2, 2, True), verdict
    assert verdict["tools"]["recorded"] == verdict["tools"]["exact"] == len(tools), verdict
    assert verdict["tools"]["passed"] is True
    # show puts the GET the call made beside the web_fetch call.
    shown = wiretape(["show", str(run)], scene.root).stdout.decode()
    ledger = next(line for line in shown.splitlines() if "web_fetch" in line and "#" in line)
    assert f"GET http://{PAGE_IP}/guide.txt" in ledger, shown


def test_python_api_records_tools_and_names_a_client_that_rejects_the_ca(
        tmp_path: Path, upstream_ca: tuple[RunCA, Path]) -> None:
    """``wiretape.record(..., tools=True)``: curl trusting only another CA
    for one host rejects the run's certificate there (named by host, nothing
    recorded for it), and its plain-HTTP search is a tool exchange."""
    import wiretape

    _ca, pem = upstream_ca
    command = ["sh", "-c", f'curl -sS --cacert "{pem}" https://pinned.test/x; '
               'curl -sS "http://search.test:8080/search?q=tides"']
    with PageServer() as search:
        run = wiretape.record(command, out=tmp_path / "api.wtape", snapshots=[], tools=True,
                              resolve={"search.test": f"127.0.0.1:{search.port}"})
    assert run.stdout == PAGES["/search?q=tides"]
    with open_run(run.path) as rf:
        assert [e.origin for e in rf.exchanges()] == ["tool:http://search.test:8080"]
        report = rf.connect_report()
    assert report is not None
    assert report["rejected"]["pinned.test"].startswith(
        "the client rejected the certificate for pinned.test (TLSV1_ALERT_UNKNOWN_CA)")
