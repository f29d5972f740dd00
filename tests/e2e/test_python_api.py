"""The Python API on real processes and sockets: ``wiretape.record`` and
``wiretape.replay`` around the example agent (the real openai SDK in a tool
loop), and the ``recording``/``replaying`` proxies around an openai client
in this process, in their thread (``with``) and event-loop (``async with``)
forms. The scripted fake provider plays the model and is stopped before
every replay.
"""

from __future__ import annotations

import asyncio
import io
import socket
import sys
from pathlib import Path

import openai
import pytest

import wiretape
from wiretape.testing import FakeProvider, TextTurn, demo_script

pytestmark = pytest.mark.timeout(120)

QUESTION = "How many pieces of fruit are listed in inventory.txt?"
ANSWER = "There are 42 pieces of fruit: 17 apples and 25 pears."
AGENT = [sys.executable, "-m", "wiretape.examples.tool_agent"]
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture
def recorded(tmp_path: Path) -> wiretape.Run:
    with FakeProvider(demo_script()) as provider:
        (tmp_path / "rec").mkdir()
        # The run goes to a folder made for it inside the snapshotted directory.
        run = wiretape.record([*AGENT, QUESTION], out=tmp_path / "rec" / "runs" / "agent.wtape",
                              upstreams={"openai": provider.url + "/v1"}, cwd=tmp_path / "rec")
        assert len(provider.requests) == 3
    return run


def test_record_returns_the_run_and_replay_its_exact_verdict(recorded: wiretape.Run,
                                                             tmp_path: Path) -> None:
    run = recorded
    assert run.path == tmp_path / "rec" / "runs" / "agent.wtape" and run.path.is_file()
    assert run.run_id.startswith("run_") and len(run.run_id) == 16
    assert (run.exchanges, run.exit_status, run.failures) == (3, 0, ())
    assert run.stdout == (ANSWER + "\n").encode()
    assert run.stderr.decode().splitlines() == [
        'tool read_file {"path": "inventory.txt"}', 'tool add {"a": 17, "b": 25}']
    assert [o.name for o in run.origins] == ["openai", "anthropic", "gemini"]
    assert run.body_bytes > 0 and run.duration_s > 0

    shown = io.BytesIO()
    verdict = wiretape.replay(run.path, stdout=shown)  # the recorded command, no provider
    assert isinstance(verdict, wiretape.Verdict)
    assert (verdict.recorded, verdict.exact, verdict.substituted, verdict.diverged,
            verdict.missing, verdict.unused) == (3, 3, 0, 0, 0, 0)
    assert verdict.passed and verdict.exit_code == 0 and verdict.mode == "strict"
    assert verdict.outcome["exit_status"]["same"] is True
    assert verdict.outcome["stdout"]["same"] is True
    # The working directory was snapshotted; the folder made for the run is
    # not the agent's doing.
    assert verdict.outcome["files"]["same"] is True
    assert shown.getvalue() == (ANSWER + "\n").encode()  # passed through as it arrived


@pytest.mark.slow  # a long scenario: make test-slow
def test_replay_by_run_id_against_a_changed_workspace_diverges(recorded: wiretape.Run,
                                                                tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    store = tmp_path / "store"
    (store / "runs").mkdir(parents=True)
    recorded.path.rename(store / "runs" / f"{recorded.run_id}.wtape")
    monkeypatch.setenv("WIRETAPE_HOME", str(store))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "inventory.txt").write_text("apples: 19\npears: 25\n")

    # A command given to replay runs in ``cwd``: here, the changed workspace.
    verdict = wiretape.replay(recorded.run_id, [*AGENT, "--workspace", ".", QUESTION],
                              cwd=workspace)
    assert (verdict.exact, verdict.diverged, verdict.missing) == (1, 1, 0)
    assert not verdict.passed and verdict.exit_code == 3
    diverged = verdict.requests[1]
    assert diverged["kind"] == "diverged" and diverged["served"] is False
    first_line = diverged["detail"]["explanation"]["first_line"]
    assert first_line.startswith("the result of read_file (call_fake_1_0) differs at "
                                 "/messages/3/content")
    span = diverged["detail"]["explanation"]["spans"][0]
    assert "apples: 17" in span["recorded_context"] and "apples: 19" in span["live_context"]

    lenient = wiretape.replay(recorded.run_id, [*AGENT, "--workspace", ".", QUESTION],
                              mode="diagnostic", cwd=workspace)
    assert (lenient.mode, lenient.exact, lenient.diverged, lenient.passed) == (
        "diagnostic", 1, 2, False)


@pytest.mark.slow  # a long scenario: make test-slow
def test_the_plain_forms_refuse_a_running_loop_and_the_async_forms_run_on_it(
        recorded: wiretape.Run) -> None:
    async def main() -> wiretape.Verdict:
        with pytest.raises(wiretape.UsageError, match=r"await wiretape\.replay_async"):
            wiretape.replay(recorded.path)
        return await wiretape.replay_async(recorded.path)

    verdict = asyncio.run(main())
    assert (verdict.exact, verdict.passed) == (3, True)


def test_bad_arguments_are_usage_errors_naming_the_input(tmp_path: Path) -> None:
    with pytest.raises(wiretape.UsageError, match="argv must be a non-empty list"):
        wiretape.record("python agent.py")  # type: ignore[arg-type]
    with pytest.raises(wiretape.UsageError, match=r"invalid port=70000"):
        wiretape.record(["true"], port=70000)
    with pytest.raises(wiretape.RunNotFound, match="no run named 'run_000000000000'"):
        wiretape.replay("run_000000000000")
    with pytest.raises(wiretape.UsageError, match="invalid mode 'lenient'"):
        wiretape.replaying(__file__, mode="lenient")  # type: ignore[arg-type]
    with pytest.raises(wiretape.CommandNotFound, match="no-such-agent"):
        wiretape.record(["no-such-agent"], out=tmp_path / "x.wtape")
    assert not (tmp_path / "x.wtape").exists()
    with pytest.raises(wiretape.UsageError, match="needs an upstream"):
        wiretape.recording({})
    with pytest.raises(wiretape.RunFileError, match="not a wiretape run file"), \
            wiretape.replaying(__file__):
        pass


# --- in-process agents: recording() and replaying() ----------------------------------------


def ask(url: str, text: str = "hello") -> str:
    client = openai.OpenAI(base_url=url, api_key="sk-test", max_retries=0)
    reply = client.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": text}])
    return reply.choices[0].message.content or ""


def test_recording_then_replaying_around_a_client_in_this_process(tmp_path: Path) -> None:
    out = tmp_path / "inproc.wtape"
    with (FakeProvider([TextTurn("Hi! How can I help?")]) as provider,
          wiretape.recording(upstream=provider.url + "/v1", out=out) as proxy):
        assert proxy.url == f"http://127.0.0.1:{proxy.port}/v1"
        assert proxy.urls == {"upstream": proxy.url}
        with pytest.raises(wiretape.UsageError, match="known once its `with` block"):
            proxy.run  # noqa: B018
        recorded_answer = ask(proxy.url)
    assert recorded_answer == "Hi! How can I help?"
    run = proxy.run
    assert (run.path, run.exchanges, run.exit_status) == (out, 1, None)
    assert run.duration_s < 1.5  # an idle pooled connection does not hold the block's end

    with wiretape.replaying(out) as replay_proxy:
        assert replay_proxy.port == proxy.port  # the recorded port, being free
        replayed_answer = ask(replay_proxy.url)
    assert replayed_answer == recorded_answer
    verdict = replay_proxy.verdict
    assert (verdict.recorded, verdict.exact, verdict.unused, verdict.passed) == (1, 1, 0, True)
    # No command ran, so there is no exit status or output to compare.
    assert "exit_status" not in verdict.outcome and "stdout" not in verdict.outcome


def test_strict_replaying_refuses_a_changed_request_and_fails_the_verdict(tmp_path: Path) -> None:
    out = tmp_path / "inproc.wtape"
    with (FakeProvider([TextTurn("Hi!")]) as provider,
          wiretape.recording(upstream=provider.url + "/v1", out=out) as proxy):
        ask(proxy.url)
    with (wiretape.replaying(out, port=0) as replay_proxy,
          pytest.raises(openai.BadRequestError, match="does not match recorded exchange #0")):
        ask(replay_proxy.url, "goodbye")
    verdict = replay_proxy.verdict
    assert (verdict.exact, verdict.diverged, verdict.passed, verdict.exit_code) == (0, 1, False, 3)
    assert verdict.outcome["stopped"]["reason"] == "diverged request POST /v1/chat/completions"


def test_async_with_serves_on_the_running_loop(tmp_path: Path) -> None:
    out = tmp_path / "async.wtape"

    async def ask_async(url: str) -> str:
        client = openai.AsyncOpenAI(base_url=url, api_key="sk-test", max_retries=0)
        reply = await client.chat.completions.create(model="fake-model", messages=HELLO,
                                                     stream=True)
        return "".join([c.choices[0].delta.content or "" async for c in reply if c.choices])

    async def main() -> tuple[str, str, wiretape.Verdict]:
        with FakeProvider([TextTurn("Streamed hello.")]) as provider:
            async with wiretape.recording(upstream={"openai": provider.url + "/v1"},
                                          out=out) as rec:
                first = await ask_async(rec.url)
        async with wiretape.replaying(out, port=0) as rep:
            second = await ask_async(rep.url)
        return first, second, rep.verdict

    first, second, verdict = asyncio.run(main())
    assert first == second == "Streamed hello."
    assert (verdict.exact, verdict.passed) == (1, True)


def test_a_taken_port_is_raised_when_the_block_is_entered(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with (pytest.raises(wiretape.PortInUse, match=f"port {port} on 127.0.0.1"),
              wiretape.recording(upstream="http://127.0.0.1:9/v1", port=port,
                                 out=tmp_path / "never.wtape")):
            raise AssertionError("the block must not run")

        async def main() -> None:
            async with wiretape.recording(upstream="http://127.0.0.1:9/v1", port=port,
                                          out=tmp_path / "never2.wtape"):
                raise AssertionError("the block must not run")

        with pytest.raises(wiretape.PortInUse):
            asyncio.run(main())
    assert not (tmp_path / "never.wtape").exists()
