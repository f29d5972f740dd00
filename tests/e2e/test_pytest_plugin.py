"""The pytest plugin, driven by pytest's own ``pytester``: a test records its
run once with ``--wiretape-record`` against the scripted fake provider, then
replays it with the provider stopped, and fails with the divergence report
once the agent asks something else. Both forms: a command
(``wiretape_agent``) and an agent in the test's process (``wiretape_proxy``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from wiretape.testing import FakeProvider, TextTurn, demo_script

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.timeout(150)

ANSWER = "There are 42 pieces of fruit: 17 apples and 25 pears."

COMMAND_TEST = '''
import sys

QUESTION = "How many pieces of fruit are listed in inventory.txt?"
EXTRA = []

def test_fruit(wiretape_agent):
    result = wiretape_agent([sys.executable, "-m", "wiretape.examples.tool_agent", *EXTRA,
                             QUESTION])
    assert result.exit_status == 0
    assert result.stdout == b"There are 42 pieces of fruit: 17 apples and 25 pears.\\n"
'''

PROXY_TEST = '''
import openai
import pytest

SAY = "hello"

@pytest.mark.wiretape(upstream="{upstream}")
def test_hello(wiretape_proxy):
    client = openai.OpenAI(base_url=wiretape_proxy.url, api_key="sk-test", max_retries=0)
    reply = client.chat.completions.create(
        model="fake-model", messages=[{{"role": "user", "content": SAY}}])
    assert reply.choices[0].message.content == "Hi!"
'''


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow  # a long scenario: `make test-slow`
def test_a_command_is_recorded_once_then_replayed_offline(pytester: pytest.Pytester) -> None:
    run = pytester.path / "runs" / "test_agent" / "test_fruit.wtape"
    pytester.makepyfile(test_agent=COMMAND_TEST)
    with FakeProvider(demo_script()) as provider:
        pytester.makeconftest(f'''
import pytest

@pytest.fixture
def wiretape_upstream():
    return "{provider.url}/v1"
''')
        recorded = pytester.runpytest_subprocess("--wiretape-record")
        recorded.assert_outcomes(passed=1)
        assert len(provider.requests) == 3
    assert run.is_file()
    before = digest(run)

    # The provider is gone, and no upstream is needed to replay.
    pytester.makeconftest("")
    replayed = pytester.runpytest_subprocess("-rP")
    replayed.assert_outcomes(passed=1)
    replayed.stdout.fnmatch_lines([("*wiretape: verdict PASS (strict): recorded 3, exact 3, "
                                    "substituted 0, diverged 0, missing 0, unused 0*")])
    assert digest(run) == before  # a replay never writes to the committed run

    # The agent now reads a different inventory: the report says where and why.
    (pytester.path / "ws").mkdir()
    (pytester.path / "ws" / "inventory.txt").write_text("apples: 19\npears: 25\n")
    pytester.makepyfile(test_agent=COMMAND_TEST.replace('EXTRA = []',
                                                        'EXTRA = ["--workspace", "ws"]'))
    failed = pytester.runpytest_subprocess()
    failed.assert_outcomes(failed=1)
    failed.stdout.fnmatch_lines([
        ("*wiretape: verdict FAIL (strict): recorded 3, exact 1, substituted 0, diverged 1, "
         "missing 0, unused 1*"),
        "request 1 POST /v1/chat/completions: diverged (recorded #1, rejected)",
        "  the result of read_file (call_fake_1_0) differs at /messages/3/content",
        (f"wiretape: run {run}; if the change is intended, record it again with "
         "`pytest --wiretape-record`"),
    ])
    assert digest(run) == before


@pytest.mark.slow  # a long scenario: `make test-slow`
def test_an_agent_in_the_test_process_uses_the_proxy(pytester: pytest.Pytester) -> None:
    run = pytester.path / "runs" / "test_sdk" / "test_hello.wtape"
    with FakeProvider([TextTurn("Hi!")]) as provider:
        pytester.makepyfile(test_sdk=PROXY_TEST.format(upstream=provider.url + "/v1"))
        pytester.runpytest_subprocess("--wiretape-record").assert_outcomes(passed=1)
        assert [r.target for r in provider.requests] == ["/v1/chat/completions"]
    assert run.is_file()

    pytester.runpytest_subprocess().assert_outcomes(passed=1)

    source = PROXY_TEST.format(upstream="http://127.0.0.1:9/v1")
    pytester.makepyfile(test_sdk=source.replace('SAY = "hello"', 'SAY = "goodbye"'))
    failed = pytester.runpytest_subprocess()
    failed.assert_outcomes(failed=1)
    # Strict replay refused the request; the report comes first, then the
    # test body's own failure.
    failed.stdout.fnmatch_lines([
        ("*wiretape: verdict FAIL (strict): recorded 1, exact 0, substituted 0, diverged 1, "
         "missing 0, unused 0*"),
        "request 0 POST /v1/chat/completions: diverged (recorded #0, rejected)",
        "*(the test body also failed: BadRequestError: Error code: 400*",
    ])


def test_replay_only_by_default_a_missing_run_is_an_error_and_nothing_is_forwarded(
        pytester: pytest.Pytester) -> None:
    with FakeProvider([TextTurn("Hi!")]) as provider:
        pytester.makepyfile(test_sdk=PROXY_TEST.format(upstream=provider.url + "/v1"))
        result = pytester.runpytest_subprocess()
        assert provider.requests == []
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([
        ("*wiretape: no recorded run for test_sdk.py::test_hello at "
         f"{pytester.path / 'runs' / 'test_sdk' / 'test_hello.wtape'}: record it once with "
        "`pytest --wiretape-record`*")])


@pytest.mark.slow  # a long scenario: make test-slow
def test_a_recording_is_saved_only_when_its_test_passed(pytester: pytest.Pytester) -> None:
    run = pytester.path / "runs" / "test_sdk" / "test_hello.wtape"
    with FakeProvider([TextTurn("Something else.")]) as provider:
        pytester.makepyfile(test_sdk=PROXY_TEST.format(upstream=provider.url + "/v1"))
        result = pytester.runpytest_subprocess("--wiretape-record")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("*the new recording was not saved (the test failed); "
                                  f"{run} is unchanged*")])
    assert not run.exists()


@pytest.mark.slow  # a long scenario: `make test-slow`
def test_marker_names_the_run_and_the_mode_and_rejects_unknown_options(
        pytester: pytest.Pytester) -> None:
    with FakeProvider([TextTurn("Hi!")]) as provider:
        source = PROXY_TEST.format(upstream=provider.url + "/v1").replace(
            "@pytest.mark.wiretape(", '@pytest.mark.wiretape("recorded/hello.wtape", ')
        pytester.makepyfile(test_named=source)
        pytester.runpytest_subprocess("--wiretape-record").assert_outcomes(passed=1)
    assert (pytester.path / "recorded" / "hello.wtape").is_file()
    assert not (pytester.path / "runs").exists()

    diagnostic = source.replace('SAY = "hello"', 'SAY = "goodbye"').replace(
        '@pytest.mark.wiretape("recorded/hello.wtape", ',
        '@pytest.mark.wiretape("recorded/hello.wtape", mode="diagnostic", ')
    pytester.makepyfile(test_named=diagnostic)
    result = pytester.runpytest_subprocess()
    # Diagnostic mode served the recorded answer (so the body passed), but a
    # diverged request is never a pass.
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("*wiretape: verdict FAIL (diagnostic): recorded 1, exact 0, "
                                  "substituted 0, diverged 1*"),
                                 ("request 0 POST /v1/chat/completions: diverged (recorded #0, "
                                  "served)")])
    result.stdout.no_fnmatch_line("*the test body also failed*")

    pytester.makepyfile(test_named=source.replace('"recorded/hello.wtape", ',
                                                  '"recorded/hello.wtape", record_mode="all", '))
    bad = pytester.runpytest_subprocess()
    bad.assert_outcomes(errors=1)
    bad.stdout.fnmatch_lines([("*unknown @pytest.mark.wiretape option(s) record_mode; known: "
                               "run, upstream, mode, port, substitutions, allow_substitutions*")])


def test_a_test_has_one_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_both='''
def test_both(wiretape_agent, wiretape_proxy):
    pass
''')
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([("*test_both.py::test_both: a test has one run, so it uses "
                                  "either wiretape_agent or wiretape_proxy, not both*")])


MCP_TEST = '''
import subprocess

import pytest

ENV = {env!r}

@pytest.mark.wiretape(upstream="{upstream}")
def test_notes(wiretape_proxy):
    env = {{**ENV, "OPENAI_BASE_URL": wiretape_proxy.url, **wiretape_proxy.env}}
    agent = subprocess.run({argv!r}, env=env, capture_output=True, text=True, timeout=90)
    assert agent.stdout == "The note says the code is 7-ALPHA-9.\\n", agent.stderr
'''


def test_an_agent_process_started_by_the_test_records_and_replays_its_mcp_server(
        pytester: pytest.Pytester) -> None:
    """``wiretape_proxy.env`` in the environment of an agent process the
    test starts: its stdio MCP server (``wiretape mcp``) is recorded with
    the test's run, then answered from it with the server gone from PATH."""
    from test_mcp import TURNS, Scene

    from wiretape.store.runfile import RunFile
    from wiretape.testing import script_from_json

    scene = Scene(pytester.path / "scene")
    run = pytester.path / "runs" / "test_notes" / "test_notes.wtape"
    with FakeProvider(script_from_json(TURNS)) as provider:
        pytester.makepyfile(test_notes=MCP_TEST.format(
            env=scene.env(server_on_path=True), upstream=f"{provider.url}/v1",
            argv=scene.agent("launch")))
        pytester.runpytest_subprocess("--wiretape-record").assert_outcomes(passed=1)
    with RunFile.open(run) as rf:
        (session,) = [e for e in rf.exchanges() if e.kind == "mcp"]
    assert session.origin == "mcp:notes" and len(session.messages) == 7

    pytester.makepyfile(test_notes=MCP_TEST.format(
        env=scene.env(server_on_path=False), upstream="http://127.0.0.1:9/v1",
        argv=scene.agent("launch")))
    replayed = pytester.runpytest_subprocess("-rP")
    replayed.assert_outcomes(passed=1)
    replayed.stdout.fnmatch_lines(["*wiretape: verdict PASS (strict): recorded 2, exact 2,*"
                                   "; mcp: sessions 1/1, exact 4, diverged 0, missing 0, "
                                   "unused 0;*"])
