"""Real clients, recorded and then replayed through the wiretape CLI.

Each test runs a real client as a child of ``python -m wiretape record``
against a scripted FakeProvider in this process, stops the provider, and runs
the same client again under ``python -m wiretape replay``. It then checks:

* replay exit status 0 and a verdict with every recorded exchange served
  exactly once, byte for byte (``exact == recorded``, ``missing == unused == 0``);
* every request the provider answered went through the proxy (``recorded``
  equals the number of requests the provider received), and the whole script
  was played;
* what the client observed (its one JSON line on stdout, or curl's raw bytes)
  is the same in both passes and is what the script says it should be, so a
  client that observed nothing fails.

The client programs are in ``clients/``; each takes its base URL from the
variable its library reads, as a user's agent would.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from wiretape.origins import KNOWN_ORIGINS
from wiretape.testing import FakeProvider, TextTurn, ToolCall, ToolCallTurn, Turn

CLIENTS = Path(__file__).resolve().parent / "clients"
PYTHON = sys.executable
TIMEOUT = 60

# Variables that would send a child somewhere other than where a test points it.
_SCRUB = {var for spec in KNOWN_ORIGINS for var in spec.env_vars} | {
    "ANTHROPIC_API_URL", "OPENAI_LOG", "ANTHROPIC_LOG", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE",
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
}


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(
        NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
        OPENAI_API_KEY="sk-test-placeholder", ANTHROPIC_API_KEY="sk-ant-test-placeholder",
        PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def wiretape(args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([PYTHON, "-m", "wiretape", *args], cwd=cwd, env=child_env(),
                          capture_output=True, timeout=TIMEOUT)


def explain(proc: subprocess.CompletedProcess[bytes]) -> str:
    return (f"exit {proc.returncode}\nstdout: {proc.stdout[-3000:]!r}\n"
            f"stderr: {proc.stderr.decode('utf-8', 'replace')[-3000:]}")


def assert_closed(port: int) -> None:
    """Nothing listens on ``port`` any more: the provider is really gone."""
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still accepts connections"


@dataclass
class Passes:
    record: subprocess.CompletedProcess[bytes]
    replay: subprocess.CompletedProcess[bytes]
    verdict: dict[str, Any]
    show: dict[str, Any]
    received: list[Any]  # the FakeProvider's ReceivedRequest list, from the record pass

    def observed(self) -> dict[str, Any]:
        """The client's JSON line, identical in both passes."""
        lines = self.record.stdout.decode().splitlines()
        assert len(lines) == 1, f"expected one JSON line from the client, got {lines!r}"
        assert self.replay.stdout == self.record.stdout, (
            f"the client observed something else in replay:\nrecord: {self.record.stdout!r}\n"
            f"replay: {self.replay.stdout!r}")
        return json.loads(lines[0])


def record_then_replay(tmp_path: Path, script: Sequence[Turn], origin: str, base_path: str,
                       command: Sequence[str]) -> Passes:
    """Record ``command`` against a FakeProvider playing ``script`` as the
    upstream of ``origin``, stop the provider, replay; check the verdict."""
    run = tmp_path / "run.wtape"
    with FakeProvider(script) as fp:
        rec = wiretape(["record", "-o", str(run), "--upstream", f"{origin}={fp.url}{base_path}",
                        "--", *command], tmp_path)
        port = fp.port
    received = fp.requests
    assert rec.returncode == 0, explain(rec)
    assert received, "the provider received no request"
    assert fp.remaining == 0, f"{fp.remaining} script turns were never played"
    assert_closed(port)

    rep = wiretape(["replay", str(run), "--", *command], tmp_path)
    assert rep.returncode == 0, explain(rep)
    ver = wiretape(["verdict", str(run), "--json"], tmp_path)
    assert ver.returncode == 0, explain(ver)
    verdict = json.loads(ver.stdout)
    assert verdict["recorded"] == len(received), verdict
    assert verdict["exact"] == verdict["recorded"], verdict
    assert verdict["missing"] == 0 and verdict["unused"] == 0 and verdict["diverged"] == 0, verdict
    assert verdict["pass"] is True and verdict["complete"] is True, verdict
    assert verdict["outcome"]["stdout"]["same"] is True, verdict["outcome"]
    shown = wiretape(["show", str(run), "--json"], tmp_path)
    assert shown.returncode == 0, explain(shown)
    show = json.loads(shown.stdout)
    assert [e["target"] for e in show["exchanges"]] == [r.target for r in received]
    assert all(e["ending"] == "complete" and e["status"] == 200 for e in show["exchanges"]), show
    assert {e["origin"] for e in show["exchanges"]} == {origin}, show
    return Passes(rec, rep, verdict, show, received)


def direct_chunks(script: Sequence[Turn], target: str, body: bytes) -> list[bytes]:
    """The body pieces a fresh provider playing ``script`` sends for one
    request, read without wiretape: what the script says a client should see."""
    with FakeProvider(script) as fp, httpx.Client(trust_env=False, timeout=TIMEOUT) as client:
        headers = {"content-type": "application/json"}
        with client.stream("POST", fp.url + target, content=body, headers=headers) as response:
            assert response.status_code == 200, response.read()
            return list(response.iter_raw())


def sse_data(frames: Sequence[bytes]) -> list[str]:
    """The ``data:`` payloads of an SSE body."""
    text = b"".join(frames).decode()
    assert text.endswith("\n\n"), text[-200:]
    return [line[len("data: "):] for event in text.split("\n\n") if event
            for line in event.split("\n") if line.startswith("data: ")]


def check_usage(usage: dict[str, int], inp: str, out: str) -> None:
    assert usage[inp] > 0 and usage[out] > 0, usage
    if "total_tokens" in usage:
        assert usage["total_tokens"] == usage[inp] + usage[out], usage


def check_arguments(got: str | dict, call: ToolCall) -> None:
    assert (json.loads(got) if isinstance(got, str) else got) == dict(call.arguments)


# --- the openai SDK ----------------------------------------------------------------------

CHAT_SCRIPT: list[Turn] = [
    ToolCallTurn([ToolCall("add", {"a": 2, "b": 3}), ToolCall("lookup", {"city": "Lisbon"})]),
    TextTurn("The sum is 5, and it is sunny in Lisbon.", expect="sunny in Lisbon"),
]


def check_chat_turns(turns: list[dict[str, Any]], streamed: bool) -> None:
    assert len(turns) == 2, turns
    first, second = turns
    tool_turn = CHAT_SCRIPT[0]
    assert isinstance(tool_turn, ToolCallTurn)
    assert first["finish_reason"] == "tool_calls"
    assert not first["text"]
    assert [c["name"] for c in first["tool_calls"]] == ["add", "lookup"]
    for got, call in zip(first["tool_calls"], tool_turn.calls, strict=True):
        check_arguments(got["arguments"], call)
        assert got["id"].startswith("call_"), got
    assert len({c["id"] for c in first["tool_calls"]}) == 2
    assert second["finish_reason"] == "stop"
    assert second["text"] == CHAT_SCRIPT[1].text  # type: ignore[union-attr]
    assert second["tool_calls"] == []
    for turn in turns:
        check_usage(turn["usage"], "prompt_tokens", "completion_tokens")
    if streamed:
        # role chunk, deltas, finish chunk, usage chunk; at least one delta each
        assert all(turn["chunks"] >= 4 for turn in turns), turns
        assert all(len(turn["completion_ids"]) == 1 for turn in turns), turns


def test_openai_chat_stream_with_tool_calls(tmp_path: Path) -> None:
    passes = record_then_replay(tmp_path, CHAT_SCRIPT, "openai", "/v1",
                                [PYTHON, str(CLIENTS / "openai_client.py"), "chat-stream"])
    observed = passes.observed()
    check_chat_turns(observed["turns"], streamed=True)
    # the tool results went back to the model, with the ids the model gave
    sent = passes.received[1].json()["messages"]
    ids = [c["id"] for c in observed["turns"][0]["tool_calls"]]
    assert [m["tool_call_id"] for m in sent if m["role"] == "tool"] == ids
    assert [m["content"] for m in sent if m["role"] == "tool"] == ["5", "sunny in Lisbon"]
    assert all(e["frames"] >= 4 for e in passes.show["exchanges"]), passes.show


def test_openai_chat_non_streaming(tmp_path: Path) -> None:
    passes = record_then_replay(tmp_path, CHAT_SCRIPT, "openai", "/v1",
                                [PYTHON, str(CLIENTS / "openai_client.py"), "chat"])
    observed = passes.observed()
    check_chat_turns(observed["turns"], streamed=False)
    assert [t["model"] for t in observed["turns"]] == ["gpt-4o-mini", "gpt-4o-mini"]
    assert len({t["completion_id"] for t in observed["turns"]}) == 2


@pytest.mark.slow  # a long scenario: make test-slow
def test_openai_embeddings(tmp_path: Path) -> None:
    passes = record_then_replay(tmp_path, [], "openai", "/v1",
                                [PYTHON, str(CLIENTS / "openai_client.py"), "embeddings"])
    observed = passes.observed()["embeddings"]
    assert len(passes.received) == 2
    # what a provider computes for these inputs, asked directly in float format
    expected = []
    for inputs, dimensions in ((["alpha", "beta"], None), ("gamma", 16)):
        body: dict[str, Any] = {"model": "text-embedding-3-small", "input": inputs}
        if dimensions:
            body["dimensions"] = dimensions
        (raw,) = direct_chunks([], "/v1/embeddings", json.dumps(body).encode())
        expected.append([d["embedding"] for d in json.loads(raw)["data"]])
    assert [[v["length"] for v in r["vectors"]] for r in observed] == [[8, 8], [16]]
    assert [[v["index"] for v in r["vectors"]] for r in observed] == [[0, 1], [0]]
    for result, vectors in zip(observed, expected, strict=True):
        assert [v["first"] for v in result["vectors"]] == [vec[:4] for vec in vectors]
        assert result["model"] == "text-embedding-3-small"
        assert result["usage"]["prompt_tokens"] > 0
    assert observed[0]["vectors"][0]["first"] != observed[0]["vectors"][1]["first"]


RESPONSES_SCRIPT: list[Turn] = [
    ToolCallTurn([ToolCall("get_weather", {"city": "Paris"})]),
    TextTurn("It is sunny in Paris today.", expect="sunny in Paris"),
]


@pytest.mark.slow  # a long scenario: make test-slow
def test_openai_responses_stream(tmp_path: Path) -> None:
    passes = record_then_replay(tmp_path, RESPONSES_SCRIPT, "openai", "/v1",
                                [PYTHON, str(CLIENTS / "openai_client.py"), "responses-stream"])
    turns = passes.observed()["turns"]
    assert len(turns) == 2, turns
    first, second = turns
    assert first["status"] == second["status"] == "completed"
    assert first["text"] == ""
    (call,) = first["function_calls"]
    assert call["name"] == "get_weather" and call["call_id"].startswith("call_")
    check_arguments(call["arguments"], RESPONSES_SCRIPT[0].calls[0])  # type: ignore[union-attr]
    assert second["function_calls"] == []
    assert second["text"] == RESPONSES_SCRIPT[1].text  # type: ignore[union-attr]
    assert first["id"] != second["id"]
    for turn in turns:
        check_usage(turn["usage"], "input_tokens", "output_tokens")
        assert turn["events"][0] == "response.created"
        assert turn["events"][-1] == "response.completed"
    assert "response.function_call_arguments.delta" in first["events"]
    assert "response.output_text.delta" in second["events"]
    sent = passes.received[1].json()["input"]
    outputs = [i for i in sent if i.get("type") == "function_call_output"]
    assert outputs == [{"type": "function_call_output", "call_id": call["call_id"],
                        "output": "sunny in Paris"}]


# --- the anthropic SDK -------------------------------------------------------------------

ANTHROPIC_SCRIPT: list[Turn] = [
    ToolCallTurn([ToolCall("get_weather", {"city": "Lisbon", "unit": "celsius"})]),
    TextTurn("It is 21 degrees in Lisbon.", expect="21 degrees celsius in Lisbon"),
]


@pytest.mark.slow  # a long scenario: make test-slow
def test_anthropic_messages_stream_with_tool_use(tmp_path: Path) -> None:
    passes = record_then_replay(tmp_path, ANTHROPIC_SCRIPT, "anthropic", "",
                                [PYTHON, str(CLIENTS / "anthropic_client.py")])
    turns = passes.observed()["turns"]
    assert len(turns) == 2, turns
    first, second = turns
    assert first["stop_reason"] == "tool_use"
    (use,) = first["tool_uses"]
    assert use["name"] == "get_weather" and use["id"].startswith("toolu_")
    check_arguments(use["input"], ANTHROPIC_SCRIPT[0].calls[0])  # type: ignore[union-attr]
    assert first["text"] == first["streamed_text"] == ""
    assert second["stop_reason"] == "end_turn"
    assert second["tool_uses"] == []
    answer = ANTHROPIC_SCRIPT[1]
    assert isinstance(answer, TextTurn)
    assert second["text"] == second["streamed_text"] == answer.text
    for turn in turns:
        check_usage(turn["usage"], "input_tokens", "output_tokens")
    assert [r.target for r in passes.received] == ["/v1/messages", "/v1/messages"]
    results = passes.received[1].json()["messages"][-1]["content"]
    assert [(r["type"], r["tool_use_id"]) for r in results] == [("tool_result", use["id"])]


# --- plain httpx and curl ----------------------------------------------------------------

STREAM_TEXT = "one two three four five"


def check_chat_sse(frames: Sequence[bytes], text: str) -> None:
    """``frames`` are a chat-completions stream whose deltas spell ``text``."""
    payloads = sse_data(frames)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    said = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert said == text
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


@pytest.mark.slow  # a long scenario: make test-slow
def test_httpx_iter_raw_frames(tmp_path: Path) -> None:
    script = [TextTurn(STREAM_TEXT)]
    passes = record_then_replay(tmp_path, script, "openai", "/v1",
                                [PYTHON, str(CLIENTS / "httpx_raw.py")])
    observed = passes.observed()
    frames = [f.encode("latin-1") for f in observed["frames"]]
    (request,) = passes.received
    expected = direct_chunks(script, request.target, request.body)
    assert frames == expected
    # one piece per SSE event: role chunk, one per word, finish chunk, [DONE]
    assert observed["count"] == len(frames) == len(STREAM_TEXT.split()) + 3
    assert all(f.startswith(b"data: ") and f.endswith(b"\n\n") for f in frames)
    check_chat_sse(frames, STREAM_TEXT)
    assert observed["status"] == 200
    assert observed["content_type"].startswith("text/event-stream")
    assert passes.show["exchanges"][0]["frames"] == len(frames)


@pytest.mark.parametrize("mode", ["stream", "plain"])
@pytest.mark.slow  # a long scenario: make test-slow
def test_curl(tmp_path: Path, mode: str) -> None:
    script = [TextTurn("Red, yellow and blue.")]
    passes = record_then_replay(tmp_path, script, "openai", "/v1",
                                ["sh", str(CLIENTS / "curl_client.sh"), mode])
    assert passes.replay.stdout == passes.record.stdout
    (request,) = passes.received
    assert request.header("user-agent").startswith("curl/")
    expected = direct_chunks(script, request.target, request.body)
    assert passes.record.stdout == b"".join(expected)
    if mode == "stream":
        assert len(expected) == len(["Red,", "yellow", "and", "blue."]) + 3
        check_chat_sse(expected, "Red, yellow and blue.")
    else:
        answer = json.loads(passes.record.stdout)
        assert answer["choices"][0]["message"]["content"] == "Red, yellow and blue."
        assert answer["choices"][0]["finish_reason"] == "stop"


# --- no buffering while recording --------------------------------------------------------


def test_stream_reaches_client_frame_by_frame_while_recording(tmp_path: Path) -> None:
    delay = 0.15
    text = "a b c d e f g h i j"
    events = len(text.split()) + 3
    total_delay = delay * (events - 1)
    with FakeProvider([TextTurn(text)], delay=delay) as fp:
        rec = wiretape(["record", "-o", str(tmp_path / "run.wtape"), "--upstream",
                        f"openai={fp.url}/v1", "--", PYTHON, str(CLIENTS / "httpx_raw.py"),
                        "--timing"], tmp_path)
    assert rec.returncode == 0, explain(rec)
    assert len(fp.requests) == 1
    observed = json.loads(rec.stdout)
    assert observed["count"] == events, observed["frames"]
    check_chat_sse([f.encode("latin-1") for f in observed["frames"]], text)
    arrivals = observed["arrivals"]
    spread = arrivals[-1] - arrivals[0]
    # A proxy that buffered the response would hand all frames over at once.
    assert spread >= 0.75 * total_delay, (spread, total_delay, arrivals)
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    # and most frames one by one (a busy machine may now and then hand over two together)
    assert sum(g >= 0.5 * delay for g in gaps) >= len(gaps) // 2, gaps
