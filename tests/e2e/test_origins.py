"""Every row of the origins table, verified with the real client library.

For each base-URL variable in ``KNOWN_ORIGINS`` a real library runs as the
child of ``python -m wiretape record``, with its defaults and with every other
base-URL variable removed from its environment, so the one variable under
test is all that tells it where the provider is. The test passes only when
the library's request was recorded on that row's origin and the answer got
back to it. A library that ignored the variable would go to the public
provider, which is unreachable from a test, and record nothing.

The tests are generated from the table: a variable added without a verifier
here fails, and so does a verifier left behind for a variable that was removed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from wiretape.origins import KNOWN_ORIGINS, OriginSpec
from wiretape.testing import FakeProvider, TextTurn

PROBE = Path(__file__).resolve().parent / "clients" / "origin_probe.py"
PYTHON = sys.executable
TIMEOUT = 90
ANSWER = "Hello from the recorded provider."

ALL_VARIABLES = sorted({var for spec in KNOWN_ORIGINS for var in spec.env_vars})
_SCRUB = set(ALL_VARIABLES) | {
    "ANTHROPIC_API_URL", "GOOGLE_VERTEX_BASE_URL", "GOOGLE_GENAI_USE_VERTEXAI",
    "GOOGLE_GENAI_USE_ENTERPRISE", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION",
    "GOOGLE_GENAI_API_VERSION", "GEMINI_API_KEY", "OPENAI_LOG", "ANTHROPIC_LOG",
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
}


@dataclass(frozen=True)
class Upstream:
    url: str
    received: Callable[[], list[str]]  # request targets seen so far


@contextmanager
def fake_provider(base_path: str) -> Iterator[Upstream]:
    """The scripted fake provider (OpenAI and Anthropic wire formats)."""
    with FakeProvider([TextTurn(ANSWER)]) as fp:
        yield Upstream(fp.url + base_path, lambda: [r.target for r in fp.requests])


GENERATE_CONTENT = {
    "candidates": [{"content": {"parts": [{"text": ANSWER}], "role": "model"},
                    "finishReason": "STOP", "index": 0}],
    "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 6, "totalTokenCount": 9},
    "modelVersion": "gemini-2.0-flash",
}


@contextmanager
def gemini_upstream() -> Iterator[Upstream]:
    """A tiny Gemini API: any ``...:generateContent`` gets one fixed answer."""
    targets: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            targets.append(self.path)
            ok = self.path.split("?", 1)[0].endswith(":generateContent")
            body = json.dumps(GENERATE_CONTENT if ok else
                              {"error": {"code": 404, "message": "no such method",
                                         "status": "NOT_FOUND"}}).encode()
            self.send_response(200 if ok else 404)
            self.send_header("content-type", "application/json; charset=UTF-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Upstream(f"http://127.0.0.1:{server.server_port}", lambda: list(targets))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@dataclass(frozen=True)
class Verifier:
    """How a variable is verified: the library that reads it, the origin it
    must belong to, the upstream to record from, the path the library asks for."""

    library: str
    origin: str
    upstream: Callable[[], Any]
    target: str  # a regular expression for the request target


VERIFIERS: dict[str, Verifier] = {
    "OPENAI_BASE_URL": Verifier("openai", "openai", lambda: fake_provider("/v1"),
                                r"/v1/chat/completions"),
    "OPENAI_API_BASE": Verifier("litellm", "openai", lambda: fake_provider("/v1"),
                                r"/v1/chat/completions"),
    "ANTHROPIC_BASE_URL": Verifier("anthropic", "anthropic", lambda: fake_provider(""),
                                   r"/v1/messages"),
    "GOOGLE_GEMINI_BASE_URL": Verifier("google-genai", "gemini", gemini_upstream,
                                       r"/v1(beta)?/models/gemini-2\.0-flash:generateContent"),
}

ROWS = [(spec, var) for spec in KNOWN_ORIGINS for var in spec.env_vars]


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(
        NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
        OPENAI_API_KEY="sk-test-placeholder", ANTHROPIC_API_KEY="sk-ant-test-placeholder",
        GOOGLE_API_KEY="test-placeholder",
        # LiteLLM would otherwise fetch its model price list from the network on import.
        LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_TELEMETRY="False",
        PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def wiretape(args: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([PYTHON, "-m", "wiretape", *args], cwd=cwd, env=child_env(),
                          capture_output=True, timeout=TIMEOUT)


def explain(proc: subprocess.CompletedProcess[bytes]) -> str:
    return (f"exit {proc.returncode}\nstdout: {proc.stdout[-2000:]!r}\n"
            f"stderr: {proc.stderr.decode('utf-8', 'replace')[-4000:]}")


def test_every_variable_has_exactly_one_verifier() -> None:
    variables = [var for _, var in ROWS]
    assert len(variables) == len(set(variables)), f"a variable is in two rows: {variables}"
    assert sorted(VERIFIERS) == sorted(variables), (
        "each variable in KNOWN_ORIGINS needs a verifier here, and each verifier a row")
    assert {spec.name for spec in KNOWN_ORIGINS} >= {v.origin for v in VERIFIERS.values()}


#: LiteLLM takes seconds to import: its row is a long scenario (`make test-slow`).
_SLOW_VARIABLES = frozenset({"OPENAI_API_BASE"})


@pytest.mark.parametrize(("spec", "variable"), [
    pytest.param(s, v, id=f"{s.name}-{v}",
                 marks=[pytest.mark.slow] if v in _SLOW_VARIABLES else [])
    for s, v in ROWS])
def test_library_honours_variable(tmp_path: Path, spec: OriginSpec, variable: str) -> None:
    verifier = VERIFIERS.get(variable)
    if verifier is None:
        pytest.fail(f"{variable} ({spec.name}) has no verifier: add the library that reads it")
    assert verifier.origin == spec.name, f"{variable} belongs to {verifier.origin}, not {spec.name}"
    others = [var for var in ALL_VARIABLES if var != variable]
    drops = [arg for var in others for arg in ("--drop", var)]
    run = tmp_path / "run.wtape"
    with verifier.upstream() as upstream:
        rec = wiretape(["record", "-o", str(run), "--upstream", f"{spec.name}={upstream.url}",
                        "--", PYTHON, str(PROBE), verifier.library, variable, *drops], tmp_path)
        received = upstream.received()
    assert rec.returncode == 0, explain(rec)

    observed = json.loads(rec.stdout.decode().strip().splitlines()[-1])
    assert observed["text"] == ANSWER, observed
    assert observed["dropped"] == sorted(others)
    # wiretape set the variable to its own loopback listener, not the upstream
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+(/v1)?", observed["value"] or ""), observed
    assert observed["value"] != upstream.url

    assert len(received) == 1 and re.fullmatch(verifier.target, received[0]), received
    shown = wiretape(["show", str(run), "--json"], tmp_path)
    assert shown.returncode == 0, explain(shown)
    exchanges = json.loads(shown.stdout)["exchanges"]
    assert [(e["origin"], e["target"], e["status"], e["ending"]) for e in exchanges] == [
        (spec.name, received[0], 200, "complete")], exchanges
