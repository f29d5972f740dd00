"""Real coding agents recorded through wiretape against the scripted fake
provider, then replayed with the provider gone: Claude Code (``claude -p``),
Codex (``codex exec``), gemini-cli (``gemini -p``) and nanobot.

Each agent reads notes.txt with its own tool and answers with the code in
it (agent_scenes.py). Between the recording and each replay its home is laid
out anew, as on a fresh machine, so whatever the agent makes per run (ids,
clock readings, key orders) differs from the recording. What differs, per
agent (JSON pointers into the request body; ``#`` enters JSON held in a string):

claude (ids)
    ``/metadata/user_id#/session_id`` (UUID v4, also the
    ``x-claude-code-session-id`` header) and ``/metadata/user_id#/device_id``
    (64 hex digits, kept in ~/.claude.json), in every request.
codex (ids, clock, key-order), in the messages of its one WebSocket session
    (``GET /v1/responses``, Upgrade: websocket: a warm-up ``response.create``
    with ``generate: false``, then one per turn; the handshake itself is exact)
    ``/prompt_cache_key`` and ``/client_metadata/{session_id,thread_id,turn_id,
    root_turn_id,x-codex-window-id}`` (UUID v7, which carry the time; the
    window id with ``:0`` after it), ``/client_metadata/x-codex-installation-id``
    (UUID v4, kept in CODEX_HOME/installation_id), the same again inside
    ``/client_metadata/x-codex-turn-metadata#/...`` with ``#/context_window_id``
    and ``#/turn_started_at_unix_ms`` (epoch ms),
    ``/client_metadata/x-codex-ws-stream-request-start-ms`` (epoch ms, a
    string), ``/input/N/id`` (``msg_`` + UUID v5 for the first, v7 after), the
    order of ``/client_metadata``'s members (a hash map), and in the tool
    result ``/input/0/id`` (``fco_`` + UUID v7) and ``/input/0/output``, which
    starts ``Chunk ID: <6 hex>\nWall time: <s.ssss> seconds\n`` (a random id,
    and how long ``cat`` took). The response ids it sends back
    (``previous_response_id``) are the recorded ones, served to it.
gemini (ids)
    ``/contents/1/parts/0/functionCall/id`` and
    ``/contents/2/parts/0/functionResponse/id`` in the second request: the call
    id gemini-cli makes when the API gives none, ``read_file_<epoch ms>_0``.
nanobot (nothing)
    Its requests are the same byte for byte from run to run (its random
    ``x-session-affinity`` header is pinned by its scene, and headers other
    than the semantic ones do not decide a match anyway).

Besides, claude, codex and gemini write today's date into the first message
(``Today's date is YYYY-MM-DD.``, ``<current_date>YYYY-MM-DD</current_date>``,
``Today's date is Weekday, Month D, YYYY``), and every agent but nanobot
its working directory's absolute path: the same here, where the replay runs
the same day with the sandbox shown at the original paths.

Marked ``agents``: ``make test-agents`` installs the agents (pinned, into a
cache) and runs these; elsewhere they skip, naming the install command.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agent_install import installed, missing_reason
from agent_scenes import AGENTS, ANSWER, CHANGED_CODE, CODE, Scene, make_scene

from wiretape.launch import isolate
from wiretape.model import Opcode
from wiretape.store.runfile import open_run
from wiretape.testing import FakeProvider

pytestmark = [pytest.mark.agents, pytest.mark.timeout(300)]


@dataclass(frozen=True)
class Expected:
    """What an agent's replays should show."""

    allow: tuple[str, ...]
    """The allowances its replay needs to pass strict."""
    fired: frozenset[str]
    """The rules its passing replay must name."""
    pointers: tuple[str, ...]
    """Pointers (or their beginnings) the fired rules must name, between them."""
    first_diverged: int
    """Index of the first request (or client message, for a WebSocket session) that
    is not exact without allowances."""
    first_pointer: str
    """Where that request first differs (the beginning of the pointer)."""


EXPECTED: dict[str, Expected] = {
    "claude": Expected(
        allow=("ids",),
        fired=frozenset({"ids"}),
        pointers=("/metadata/user_id#/session_id", "/metadata/user_id#/device_id"),
        first_diverged=0,
        first_pointer="/metadata/user_id",
    ),
    "codex": Expected(
        allow=("ids", "clock", "key-order", "durations"),
        fired=frozenset({"ids", "clock", "key-order"}),
        pointers=("/prompt_cache_key", "/client_metadata",
                  "/client_metadata/x-codex-turn-metadata#/turn_started_at_unix_ms",
                  "/client_metadata/x-codex-ws-stream-request-start-ms", "/input/0/id"),
        first_diverged=0,
        first_pointer="/input/0/id",
    ),
    "gemini": Expected(
        allow=("ids",),
        fired=frozenset({"ids"}),
        pointers=("/contents/1/parts/0/functionCall/id",
                  "/contents/2/parts/0/functionResponse/id"),
        first_diverged=1,
        first_pointer="/contents/1/parts/0/functionCall/id",
    ),
    "nanobot": Expected(
        allow=(), fired=frozenset(), pointers=(), first_diverged=-1, first_pointer=""),
}

NEED_ALLOWANCES = [name for name in AGENTS if EXPECTED[name].allow]

# Every allowance at once: what a user who allows everything gets.
ALL_ALLOWANCES = "ids,clock,key-order,durations,paths"


# --- running wiretape ----------------------------------------------------------------------


def wiretape(scene: Scene, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wiretape", *args], env=scene.env,
                          cwd=scene.workdir, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def verdict_line(stderr: str) -> str:
    return next((line for line in stderr.splitlines() if line.startswith("wiretape: verdict ")),
                f"(no verdict line in: {stderr[-2000:]!r})")


def verdict(scene: Scene, run: Path) -> dict[str, Any]:
    """The latest replay's verdict (``wiretape verdict`` exits with that replay's status)."""
    out = wiretape(scene, "verdict", str(run), "--json")
    assert out.stdout.startswith("{"), out.stderr
    parsed: dict[str, Any] = json.loads(out.stdout)
    return parsed


def same_paths_here() -> bool:
    return isolate.capabilities().mount_namespaces


def with_paths(allow: tuple[str, ...]) -> tuple[str, ...]:
    """Where the sandbox cannot be shown at the original paths, they are mapped:
    a declared substitution, accepted by allowing ``paths``."""
    return allow if same_paths_here() else (*allow, "paths")


@dataclass
class Recording:
    scene: Scene
    run: Path
    result: subprocess.CompletedProcess[str]


def record(scene: Scene, run: Path, *extra: str) -> Recording:
    """Record the scene against the fake provider (stopped on return), and check
    that the agent did its round-trip: every turn played, in order, and the answer,
    nothing refused; a WebSocket scene's turns all in one session, stored."""
    with FakeProvider(scene.turns) as fp:
        result = wiretape(scene, "record", "-o", str(run), *scene.upstream_args(fp.url),
                          "--snapshot", str(scene.workspace), *extra, "--", *scene.argv)
        requests, remaining = fp.requests, fp.remaining
    assert result.returncode == 0, result.stdout + result.stderr
    assert remaining == 0, [(r.target, r.turn, r.body[-300:]) for r in requests]
    assert [r.turn for r in requests] == list(range(1, len(scene.turns) + 1)), [
        (r.target, r.turn) for r in requests]
    assert ANSWER in result.stdout, result.stdout + result.stderr
    count = scene.exchanges
    assert f"{count} exchange{'s' if count != 1 else ''}," in result.stderr, result.stderr
    assert "wiretape: refused" not in result.stderr, result.stderr
    if scene.websocket:
        check_session(scene, run)
    return Recording(scene, run, result)


def check_session(scene: Scene, run: Path) -> None:
    """The run holds one WebSocket session and nothing else: the upgrade answered
    101 by the provider, then a client message per turn (and warm-up), each
    answered by the provider's events. Had the upgrade been refused, the agent
    would have fallen back to one POST per turn, and this fails."""
    with open_run(run) as rf:
        exchanges = rf.exchanges()
    assert [(e.request.method, e.request.path) for e in exchanges] == [
        (b"GET", b"/v1/responses")], [(e.request.method, e.request.target) for e in exchanges]
    (session,) = exchanges
    assert session.response is not None and session.response.status == 101
    headers = {k.lower(): v for k, v in session.request.headers}
    assert headers[b"upgrade"].lower() == b"websocket"
    assert headers[b"openai-beta"].startswith(b"responses_websockets="), headers
    clients = [json.loads(m.payload) for m in session.messages
               if m.direction == "client" and m.opcode is Opcode.TEXT]
    assert [c["type"] for c in clients] == ["response.create"] * (
        len(scene.turns) + scene.warm_ups)
    assert [c.get("generate") for c in clients[:scene.warm_ups]] == [False] * scene.warm_ups
    completed = [json.loads(m.payload)["response"]["id"] for m in session.messages
                 if m.direction == "server" and b'"response.completed"' in m.payload]
    assert len(completed) == len(clients), completed
    # each request after the first names the response before it
    assert [c.get("previous_response_id") for c in clients[1:]] == completed[:-1]


@pytest.fixture(scope="session")
def agents_dir() -> Path | None:
    return installed()


@pytest.fixture(params=AGENTS)
def scene(request: pytest.FixtureRequest, tmp_path: Path, agents_dir: Path | None) -> Scene:
    name: str = request.param
    if name == "nanobot":
        try:
            from e2e.nanobot_support import nanobot_command
            nanobot_command()
        except FileNotFoundError as exc:
            pytest.skip(str(exc))
    elif agents_dir is None:
        pytest.skip(missing_reason())
    return make_scene(name, tmp_path / name, agents_dir)


@pytest.fixture
def recorded(scene: Scene, tmp_path: Path) -> Recording:
    """The scene recorded, the provider stopped, and the agent's home laid out anew."""
    recording = record(scene, tmp_path / f"{scene.name}.wtape")
    scene.reset_home()
    return recording


def fired_rules(v: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["rule"]: entry for entry in v.get("rules", [])}


def sent_messages(scene: Scene) -> int:
    """The requests the agent makes: one per turn, and its warm-ups."""
    return len(scene.turns) + scene.warm_ups


def decided(scene: Scene, v: dict[str, Any]) -> list[str]:
    """How each request was decided: the requests' kinds, or for a WebSocket
    scene its client messages' (its handshake exact, the only request)."""
    if not scene.websocket:
        return [r["kind"] for r in v["requests"]]
    (row,) = v["requests"]
    assert row["kind"] == "exact" and row["target"] == "/v1/responses", row
    return [d["kind"] for d in row["detail"]["messages"]["decisions"]]


# --- the tests -----------------------------------------------------------------------------


def test_replay_passes_strict_with_the_allowances_the_agent_needs(recorded: Recording) -> None:
    """With the provider gone and a fresh home, the replay passes strict once the
    agent's own per-run values are allowed: same stdout, same outcome, and the
    verdict names each rule that fired and where."""
    scene, expected = recorded.scene, EXPECTED[recorded.scene.name]
    allow = with_paths(expected.allow)
    replayed = wiretape(scene, "replay", str(recorded.run),
                        *(("--allow", ",".join(allow)) if allow else ()))
    assert replayed.returncode == 0, verdict_line(replayed.stderr) + "\n" + replayed.stderr
    assert "PASS (strict)" in verdict_line(replayed.stderr)
    assert replayed.stdout == recorded.result.stdout
    v = verdict(scene, recorded.run)
    count = scene.exchanges
    assert v["pass"] is True
    assert (v["recorded"], v["missing"], v["unused"], v["diverged"]) == (count, 0, 0, 0)
    assert v["exact"] + v["equivalent"] + v["substituted"] == count
    equivalent, said = v["equivalent"], f"equivalent {v['equivalent']}"
    if scene.websocket:
        # the handshake is exact; the session's client messages carry the per-run values
        m = v["messages"]
        assert (m["diverged"], m["missing"], m["unused"]) == (0, 0, 0), m
        assert m["exact"] + m["equivalent"] + m["substituted"] == sent_messages(scene)
        equivalent = m["equivalent"]
        said = f"messages: exact {m['exact']}, equivalent {m['equivalent']} (ids, clock"
    outcome = v["outcome"]
    assert outcome["exit_status"]["same"] is True
    assert outcome["stdout"]["same"] is True
    assert outcome["files"]["same"] is True
    rules = fired_rules(v)
    # Every rule expected fires; a rule allowed for what may or may not vary
    # in a run (Codex's tool wall time can be 0.0000 s twice) may fire too.
    assert expected.fired <= set(rules) - {"paths"} <= set(expected.allow), rules
    if not expected.fired:
        assert equivalent == 0 and v["exact"] == count
        return
    assert equivalent >= 1
    named = [pointer for entry in rules.values() for pointer in entry["pointers"]]
    for wanted in expected.pointers:
        assert any(p.startswith(wanted) for p in named), (wanted, named)
    for name in expected.fired:
        assert rules[name]["count"] >= 1 and rules[name]["examples"], rules[name]
    line = verdict_line(replayed.stderr)
    assert said in line, line


@pytest.mark.parametrize("scene", NEED_ALLOWANCES, indirect=True)
def test_replay_fails_strict_without_the_allowances(recorded: Recording) -> None:
    """The same run without allowances: strict stops at the first request that
    differs by the agent's own per-run values, and names where. (nanobot needs
    none: its run is shown strict and exact by the test above.)"""
    scene, expected = recorded.scene, EXPECTED[recorded.scene.name]
    replayed = wiretape(scene, "replay", str(recorded.run),
                        *(() if same_paths_here() else ("--allow", "paths")))
    assert replayed.returncode == 3, verdict_line(replayed.stderr) + "\n" + replayed.stderr
    line = verdict_line(replayed.stderr)
    assert "FAIL (strict)" in line and "diverged 1" in line, line
    if scene.websocket:
        assert (f"messages: exact {expected.first_diverged}, diverged 1" in line), line
        # named by its index in the session, as show lists it
        with open_run(recorded.run) as rf:
            (session,) = rf.exchanges()
        texts = [i for i, m in enumerate(session.messages)
                 if m.direction == "client" and m.opcode is Opcode.TEXT]
        assert (f"stopped at diverged message #{texts[expected.first_diverged]} (client text) "
                f"of the WebSocket session GET /v1/responses at {expected.first_pointer}"
                ) in line, line
    else:
        assert "stopped at diverged request POST" in replayed.stderr
    assert expected.first_pointer in replayed.stderr, replayed.stderr
    assert ANSWER not in replayed.stdout
    v = verdict(scene, recorded.run)
    assert v["pass"] is False
    kinds = decided(scene, v)
    assert kinds == ["exact"] * expected.first_diverged + ["diverged"], kinds
    assert v["outcome"]["stopped"]["reason"].startswith("diverged")


def test_allowances_do_not_hide_a_changed_tool_result(recorded: Recording) -> None:
    """Every allowance given, but notes.txt changed before the replay (replayed
    against the current workspace): the tool result the agent sends back differs
    for real, and strict fails at that request."""
    scene = recorded.scene
    scene.notes.write_text(scene.notes.read_text().replace(CODE, CHANGED_CODE))
    replayed = wiretape(scene, "replay", str(recorded.run), "--state", "current",
                        "--allow", ALL_ALLOWANCES)
    assert replayed.returncode == 3, verdict_line(replayed.stderr) + "\n" + replayed.stderr
    assert "FAIL (strict)" in verdict_line(replayed.stderr)
    assert ANSWER not in replayed.stdout
    v = verdict(scene, recorded.run)
    kinds = decided(scene, v)
    assert kinds[-1] == "diverged" and len(kinds) == sent_messages(scene), kinds
    assert scene.tool_result_at in replayed.stderr, replayed.stderr


@pytest.mark.parametrize("scene", ["gemini"], indirect=True)
def test_allowances_recorded_with_the_run(scene: Scene, tmp_path: Path) -> None:
    """``record --allow`` keeps the allowances with the run: a plain replay uses them
    (shown once, with gemini-cli)."""
    expected = EXPECTED[scene.name]
    recording = record(scene, tmp_path / "allowed.wtape", "--allow",
                       ",".join(with_paths(expected.allow)))
    scene.reset_home()
    replayed = wiretape(scene, "replay", str(recording.run))
    assert replayed.returncode == 0, verdict_line(replayed.stderr) + "\n" + replayed.stderr
    assert "PASS (strict)" in verdict_line(replayed.stderr)
    assert replayed.stdout == recording.result.stdout
    assert set(fired_rules(verdict(scene, recording.run))) - {"paths"} == expected.fired
    assert CODE in replayed.stdout


@pytest.mark.parametrize("scene", ["claude"], indirect=True)
def test_allowances_from_the_project_config(recorded: Recording) -> None:
    """``allow = [...]`` in a wiretape.toml above the working directory is used by a
    plain replay (shown once, with Claude Code; the file is outside the snapshot)."""
    scene, expected = recorded.scene, EXPECTED[recorded.scene.name]
    config = scene.root / "wiretape.toml"
    config.write_text(f"allow = {json.dumps(list(with_paths(expected.allow)))}\n")
    replayed = wiretape(scene, "replay", str(recorded.run))
    assert replayed.returncode == 0, verdict_line(replayed.stderr) + "\n" + replayed.stderr
    assert "PASS (strict)" in verdict_line(replayed.stderr)
    assert replayed.stdout == recorded.result.stdout
    v = verdict(scene, recorded.run)
    assert set(fired_rules(v)) - {"paths"} == expected.fired
