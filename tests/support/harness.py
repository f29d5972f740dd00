"""Glue for the integration tests: which client script plays which case,
how to run a client (directly or under the wiretape CLI), and what each
client must observe.

Everything here uses 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .raw_upstream import cases_dir, corpus_dir, data_dir

__all__ = [
    "CASES",
    "CLIENTS_DIR",
    "ENV_VAR",
    "CaseSpec",
    "cases_dir",
    "check_observation",
    "child_env",
    "client_cmd",
    "corpus_dir",
    "corpus_split",
    "data_dir",
    "parse_observation",
    "raw_client_cmd",
    "run_direct",
]

CLIENTS_DIR = Path(__file__).resolve().parent / "clients"

ENV_VAR = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL"}

# Variables that would send a client somewhere else than where a test points it.
_SCRUB = (
    "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_API_URL",
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
    "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "OPENAI_LOG", "ANTHROPIC_LOG",
)


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a client or wiretape run: scrubbed of base URLs
    and proxies, with placeholder keys."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env["OPENAI_API_KEY"] = "sk-test-REDACTED"
    env["ANTHROPIC_API_KEY"] = "sk-ant-test-REDACTED"
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


@dataclass(frozen=True)
class CaseSpec:
    """How a case is played: the client script, the origin it talks to, the
    base path of its upstream, the upstream's time scale, what it must
    observe (``expect``, checked by :func:`check_observation`)."""

    case: str
    script: str
    origin: str  # openai | anthropic
    base_path: str  # appended to the upstream's http://127.0.0.1:PORT
    args: tuple[str, ...] = ()
    time_scale: float = 1.0
    expect: dict[str, Any] = field(default_factory=dict)

    @property
    def dir(self) -> Path:
        return cases_dir() / self.case

    @property
    def env_var(self) -> str:
        return ENV_VAR[self.origin]


CASES: dict[str, CaseSpec] = {
    s.case: s
    for s in [
        CaseSpec("B01", "openai_chat_stream.py", "openai", "/v1",
                 expect={"text": "Red, yellow, blue", "stop_reason": "stop", "exception": None}),
        CaseSpec("B05", "openai_transcribe.py", "openai", "/v1",
                 expect={"text": "Testing, one, two, three.", "exception": None}),
        CaseSpec("B07", "openai_chat.py", "openai", "/v1",
                 expect={"text": "pong", "exception": None}),
        CaseSpec("B10", "openai_chat_stream.py", "openai", "/api/v1", time_scale=0.3,
                 expect={"text": "Olá!", "exception": None}),
        CaseSpec("B12", "anthropic_stream.py", "anthropic", "",
                 expect={"stop_reason": "tool_use", "exception": None,
                         "tool_calls": [{"name": "get_weather",
                                         "input": {"city": "Lisbon", "unit": "celsius"}}]}),
        CaseSpec("B14", "openai_chat_stream.py", "openai", "/v1", time_scale=0.1,
                 expect={"text": "1, 2, 3", "exception": None}),
        CaseSpec("B15", "openai_chat_stream.py", "openai", "/v1",
                 expect={"text": "c-a-t", "exception": None}),
        CaseSpec("B17", "anthropic_stream.py", "anthropic", "",
                 expect={"text": "Hi there!", "exception": None}),
        CaseSpec("B18", "openai_chat_stream.py", "openai", "/v1",
                 expect={"stop_reason": "tool_calls", "exception": None,
                         "tool_calls": [
                             {"name": "get_weather", "arguments": '{"city": "Porto"}',
                              "id_prefix": "call_B18weather"},
                             {"name": "get_local_time", "arguments": '{"city": "Porto"}',
                              "id_prefix": "call_B18localtime"}],
                         "total_tokens": 144}),
        CaseSpec("B19", "openai_responses_stream.py", "openai", "/v1",
                 expect={"text": "Let me check the weather in Paris.", "exception": None,
                         "tool_calls": [{"name": "get_weather", "arguments": '{"city":"Paris"}'}]}),
        CaseSpec("B20", "anthropic_stream.py", "anthropic", "",
                 expect={"text": "Moon pulls the",
                         "exception": {
                             "type": "RemoteProtocolError",
                             "message": "peer closed connection without sending complete "
                                        "message body (incomplete chunked read)"}}),
        CaseSpec("B22", "openai_chat.py", "openai", "/v1",
                 expect={"text": "Quick.", "exception": None, "statuses": [429, 200]}),
    ]
}

# B22 with the SDK's retries switched off: attempt 0 only, the 429 surfaces.
B22_NO_RETRY = CaseSpec("B22", "openai_chat.py", "openai", "/v1", args=("--max-retries", "0"),
                        expect={"text": None, "statuses": [429],
                                "exception": {"type": "RateLimitError"}})


def client_cmd(spec: CaseSpec, *extra: str, timing_file: str | os.PathLike | None = None,
               python: str = sys.executable) -> list[str]:
    cmd = [python, str(CLIENTS_DIR / spec.script), str(spec.dir), *spec.args, *extra]
    if timing_file is not None:
        cmd += ["--timing-file", str(timing_file)]
    return cmd


def raw_client_cmd(spec: CaseSpec, request: str = "request.http", *,
                   timing_file: str | os.PathLike | None = None,
                   python: str = sys.executable) -> list[str]:
    """The generic httpx client sending a case's raw request file (headers
    and body as in the file, apart from Host/Content-Length/Connection)."""
    req = spec.dir / request
    target = req.read_bytes().split(b"\r\n", 1)[0].split(b" ")[1].decode("latin-1")
    if not target.startswith(spec.base_path):
        raise ValueError(f"{req}: target {target} is not under {spec.base_path!r}")
    cmd = [python, str(CLIENTS_DIR / "raw_http.py"), str(req), "--env", spec.env_var,
           "--rest", target[len(spec.base_path):]]
    if timing_file is not None:
        cmd += ["--timing-file", str(timing_file)]
    return cmd


def parse_observation(stdout: str | bytes) -> dict[str, Any]:
    """The client's JSON line among whatever else is on stdout (the last
    line that is a JSON object with a ``wiretape_client`` key)."""
    if isinstance(stdout, bytes):
        stdout = stdout.decode("utf-8", "replace")
    found = None
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and "wiretape_client" in obj:
            found = obj
    if found is None:
        raise AssertionError(f"no client observation on stdout: {stdout[-2000:]!r}")
    return found


def run_direct(spec: CaseSpec, upstream_url: str, *extra: str,
               timeout: float = 60) -> tuple[dict[str, Any], subprocess.CompletedProcess]:
    """Run a client straight against an upstream (no proxy)."""
    env = child_env(**{spec.env_var: upstream_url.rstrip("/") + spec.base_path})
    proc = subprocess.run(client_cmd(spec, *extra), env=env, capture_output=True,
                          timeout=timeout, check=False)
    return parse_observation(proc.stdout), proc


def check_observation(spec: CaseSpec, obs: dict[str, Any]) -> list[str]:
    """What a case's client must observe (expect.md); a list of problems."""
    problems = []
    exp = spec.expect
    if "text" in exp and obs.get("text") != exp["text"]:
        problems.append(f"text {obs.get('text')!r} != {exp['text']!r}")
    if "stop_reason" in exp and obs.get("stop_reason") != exp["stop_reason"]:
        problems.append(f"stop_reason {obs.get('stop_reason')!r} != {exp['stop_reason']!r}")
    if "statuses" in exp and obs.get("statuses") != exp["statuses"]:
        problems.append(f"statuses {obs.get('statuses')} != {exp['statuses']}")
    if "exception" in exp:
        want, got = exp["exception"], obs.get("exception")
        if want is None:
            if got is not None:
                problems.append(f"unexpected exception {got}")
        elif got is None:
            problems.append(f"expected exception {want}, got none")
        else:
            for k, v in want.items():
                if got.get(k) != v:
                    problems.append(f"exception {k} {got.get(k)!r} != {v!r}")
    if "tool_calls" in exp:
        calls = obs.get("tool_calls") or []
        if len(calls) != len(exp["tool_calls"]):
            problems.append(f"{len(calls)} tool calls, expected {len(exp['tool_calls'])}: {calls}")
        for got, want in zip(calls, exp["tool_calls"], strict=False):
            for k, v in want.items():
                if k == "id_prefix":
                    if not str(got.get("id") or "").startswith(v):
                        problems.append(f"tool call id {got.get('id')!r} !~ {v!r}")
                elif got.get(k) != v:
                    problems.append(f"tool call {k} {got.get(k)!r} != {v!r}")
    if "total_tokens" in exp:
        usage = obs.get("usage") or {}
        if usage.get("total_tokens") != exp["total_tokens"]:
            problems.append(f"usage {usage} has no total_tokens {exp['total_tokens']}")
    return problems


def corpus_split(fixture: str | os.PathLike) -> tuple[str, str, str, str]:
    """(origin name, env var, upstream base path, rest) for a corpus fixture.

    Anthropic fixtures go through the ``anthropic`` origin, whose base URL
    has no path (the SDK appends ``/v1/messages``). Every other provider
    goes through the ``openai`` origin with the base path cut after the
    version segment (``/v1``, ``/v1beta``, ``/openai/v1``, ``/api/v1``); the
    rest (path and query, encoded as recorded) is appended by the client.
    """
    req = json.loads((Path(fixture) / "request.json").read_text())
    url = req["url"]
    after_scheme = url.split("://", 1)[1]
    slash = after_scheme.find("/")
    target = after_scheme[slash:] if slash >= 0 else "/"
    target = target.split("#", 1)[0]  # a fragment never reaches the wire
    meta = json.loads((Path(fixture) / "meta.json").read_text())
    if meta.get("provider") == "anthropic":
        return "anthropic", ENV_VAR["anthropic"], "", target
    path, q, query = target.partition("?")
    segs = path.split("/")
    base_len = 1
    for i, s in enumerate(segs):
        if s.startswith("v") and s[1:2].isdigit():
            base_len = i + 1
            break
    base = "/".join(segs[:base_len])
    rest = path[len(base):] + (q + query if q else "")
    return "openai", ENV_VAR["openai"], base, rest
