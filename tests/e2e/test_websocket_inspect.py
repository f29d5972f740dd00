"""What ``show``, ``report`` and ``diff`` read inside WebSocket sessions
(DESIGN.md, "WebSockets", "Display"): a session of the Responses API's
WebSocket mode and a Realtime session, each with a function call answered
in a later client message, recorded through ``wiretape record`` from the
fake provider by real clients in their own processes (a raw ``websockets``
client, the openai SDK's Realtime client). The timeline names the model,
tokens and tool calls; the ledger pairs the call with its result by call
id; ``diff`` compares the sessions' client messages and says where.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_websocket import REALTIME, script, wiretape

from wiretape.model import Opcode
from wiretape.store.runfile import open_run
from wiretape.testing import FakeProvider

TOOLS = str(Path(__file__).resolve().parent / "clients_ws" / "tool_client.py")


def record(base: Path, name: str, client: str, *args: str) -> Path:
    with FakeProvider(script()) as fp:
        done = wiretape("record", "-o", name, "--upstream", f"openai={fp.url}/v1", "--",
                        sys.executable, client, *args, cwd=base)
    assert done.returncode == 0, done.stderr
    return base / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("wsinspect")
    return {"tools": record(base, "tools.wtape", TOOLS, "add 2 and 3"),
            "again": record(base, "again.wtape", TOOLS, "add 2 and 3"),
            "prompt": record(base, "prompt.wtape", TOOLS, "add two and three"),
            "result": record(base, "result.wtape", TOOLS, "add 2 and 3", "--off-by", "1"),
            "realtime": record(base, "rt.wtape", REALTIME, "add 2 and 3")}


def show_json(path: Path, *extra: str) -> Any:
    done = wiretape("show", str(path), "--json", *extra, cwd=path.parent)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def usage_sum(path: Path, final: str) -> tuple[int, int]:
    """The input and output tokens of every ``final`` event the server sent."""
    with open_run(path) as rf:
        (exchange,) = rf.exchanges()
    docs = [json.loads(m.payload) for m in exchange.messages
            if m.direction == "server" and m.opcode is Opcode.TEXT]
    usages = [d["response"]["usage"] for d in docs if d["type"] == final]
    assert len(usages) == 2
    return sum(u["input_tokens"] for u in usages), sum(u["output_tokens"] for u in usages)


def test_show_names_the_model_tokens_and_tool_calls_of_a_responses_session(runs):
    path = runs["tools"]
    tokens_in, tokens_out = usage_sum(path, "response.completed")
    shown = show_json(path)
    (row,) = shown["exchanges"]
    assert (row["method"], row["target"], row["status"]) == ("GET", "/v1/responses", 101)
    assert row["format"] == "openai-responses" and row["model"] == "gpt-test"
    assert (row["input_tokens"], row["output_tokens"]) == (tokens_in, tokens_out)
    assert row["total_tokens"] == tokens_in + tokens_out
    assert row["tool_calls"] == ["add"] and row["excerpt"] == "The sum is 5."
    assert row["stop_reason"] == "completed" and row["streamed"] is True
    # the call, made in the first turn, is answered by the next client message
    assert shown["ledger"] == {
        "calls": [{"call_id": "call_fake_1_0", "name": "add", "arguments": '{"a": 2, "b": 3}',
                   "issued_in": 0, "answered_in": 0, "result": "5", "kind": "function",
                   "status": "completed", "made": []}],
        "completed": 1, "pending": 0, "unmatched_results": []}
    one = show_json(path, "--exchange", "0")
    assert [(m["role"], m["text"], m["result_for"]) for m in one["request"]["messages"]] == [
        ("user", "add 2 and 3", None), ("tool", "5", "call_fake_1_0")]
    assert one["request"]["tools"] == ["add"] and one["request"]["model"] == "gpt-test"
    assert one["tool_results"] == [{"call_id": "call_fake_1_0", "name": None}]
    assert one["response"]["tool_calls"] == [{"call_id": "call_fake_1_0", "name": "add",
                                              "arguments": '{"a": 2, "b": 3}',
                                              "kind": "function"}]
    assert one["response"]["unknown_events"] == []
    # the same as text: the timeline's columns and the ledger's lines
    text = wiretape("show", str(path), cwd=path.parent).stdout
    line = next(x for x in text.splitlines() if x.startswith("0 "))
    assert "gpt-test" in line and f"{tokens_in}→{tokens_out}" in line
    assert "completed" in line and " add " in line and "The sum is 5." in line
    assert "tool calls: 1 (1 completed, 0 pending)" in text
    ledger = text[text.index("tool calls: 1"):].splitlines()
    assert re.split(r"\s{2,}", ledger[1].strip()) == [
        "call id", "tool", "arguments", "issued in", "status", "result"]
    assert re.split(r"\s{2,}", ledger[2].strip()) == [
        "call_fake_1_0", "add", '{"a": 2, "b": 3}', "#0", "completed in #0", "5"]


def test_show_reads_a_realtime_session_s_model_tokens_and_answered_call(runs):
    path = runs["realtime"]
    tokens_in, tokens_out = usage_sum(path, "response.done")
    shown = show_json(path)
    (row,) = shown["exchanges"]
    assert row["format"] == "openai-realtime" and row["model"] == "gpt-realtime"
    assert (row["input_tokens"], row["output_tokens"]) == (tokens_in, tokens_out)
    assert row["tool_calls"] == ["add"] and row["excerpt"] == "The sum is 5."
    (call,) = shown["ledger"]["calls"]
    assert (call["call_id"], call["name"], call["status"], call["answered_in"],
            call["result"]) == ("call_fake_1_0", "add", "completed", 0, "5")
    one = show_json(path, "--exchange", "0")
    assert [(m["role"], m["text"]) for m in one["request"]["messages"]] == [
        ("user", "add 2 and 3"), ("tool", "5")]
    assert one["request"]["tools"] == ["add"]
    assert one["response"]["unknown_events"] == []


def test_the_report_lists_a_session_s_tool_calls_and_model(runs, tmp_path):
    page = tmp_path / "report.html"
    done = wiretape("report", str(runs["tools"]), "-o", str(page), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    html = page.read_text()
    assert "The model asked for no tool call" not in html
    assert 'data-call="call_fake_1_0"' in html
    assert '<td class="mono">add</td>' in html
    assert "gpt-test" in html


def diff(a: Path, b: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return wiretape("diff", str(a), str(b), *extra, cwd=a.parent)


def test_diff_of_two_sessions_with_the_same_messages_is_the_same(runs):
    done = diff(runs["tools"], runs["again"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "#0 <-> #0 GET /v1/responses: same" in done.stdout


def test_diff_compares_the_sessions_client_messages_at_their_json_pointer(runs):
    done = diff(runs["tools"], runs["prompt"])
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "#0 <-> #0 GET /v1/responses: differs" in out
    assert "client message 0 (message #0 <-> #0 of the session):" in out
    assert "at /input/0/content" in out and "add two and three" in out
    assert "1 paired exchange, 0 same, 1 differ" in out
    data = json.loads(diff(runs["tools"], runs["prompt"], "--json").stdout)
    (pair,) = data["pairs"]
    assert pair["same"] is False and pair["explanation"] is None
    (message,) = pair["messages"]
    assert (message["index"], message["a"], message["b"]) == (0, 0, 0)
    assert [s["pointer"] for s in message["explanation"]["spans"]] == ["/input/0/content"]


def test_diff_names_the_tool_whose_result_changed_in_a_session(runs):
    done = diff(runs["tools"], runs["result"])
    assert done.returncode == 1
    assert "client message 1 (message #10 <-> #10 of the session):" in done.stdout
    assert "the result of add (call_fake_1_0) differs at /input/0/output" in done.stdout


def test_replay_names_the_tool_whose_result_changed_in_a_session(runs, tmp_path):
    copy = tmp_path / "tools.wtape"
    copy.write_bytes(runs["tools"].read_bytes())
    done = wiretape("replay", str(copy), "--", sys.executable, TOOLS, "add 2 and 3",
                    "--off-by", "1", cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert "the result of add (call_fake_1_0) differs at /input/0/output" in done.stderr
    assert "result of ? " not in done.stderr
