"""nanobot's Python SDK (nanobot-ai 0.3.5) in this process, recorded once
through ``wiretape.recording`` against the scripted fake provider, then
replayed through ``wiretape.replaying`` with the provider gone.

The SDK reads its origin from config.json (``providers.custom.apiBase``),
so the config is written with ``proxy.url`` once the proxy listens. The
scene (tests/e2e/nanobot_support.py) pins what would vary between two runs;
``reset()`` lays it out again before the replay, so no session history from
the recording is resent.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import nanobot_support as ns
import pytest
from loguru import logger
from nanobot import Nanobot, RunResult

import wiretape
from wiretape.testing import FakeProvider

pytestmark = pytest.mark.timeout(120)


async def ask(scene: ns.NanobotScene, api_base: str) -> RunResult:
    scene = scene.set_api_base(api_base)
    async with Nanobot.from_config(scene.config_path, workspace=scene.workspace) as bot:
        return await bot.run(scene.prompt, session_key="sdk:wiretape")


@pytest.fixture(autouse=True)
def quiet_nanobot() -> None:
    logger.disable("nanobot")  # its runtime log goes to stderr in SDK use


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[ns.NanobotScene, wiretape.Run, RunResult]:
    scene = ns.make_scene(tmp_path / "scene", "http://127.0.0.1:9/v1")
    with (FakeProvider(ns.session_script()) as provider,
          wiretape.recording(upstream={"custom": provider.url + "/v1"},
                             out=tmp_path / "sdk.wtape") as proxy):
        result = asyncio.run(ask(scene, proxy.url))
        assert len(provider.requests) == 4
    return scene, proxy.run, result


def test_sdk_run_recorded_then_replayed_gives_the_same_result(recorded) -> None:  # type: ignore[no-untyped-def]
    scene, run, live = recorded
    assert live.error is None and live.stop_reason == "completed"
    assert live.content == ("notes.txt says: The launch code is PELICAN-42. "
                            "The first step of docs/plan.md is: Water the ferns.")
    assert live.tools_used == ["read_file", "list_dir", "read_file"]
    assert (run.exchanges, run.exit_status) == (4, None)

    scene.reset()  # as it was before recording; the fake provider is stopped

    async def replayed() -> tuple[RunResult, wiretape.Verdict]:
        async with wiretape.replaying(run.path, port=0) as proxy:
            result = await ask(scene, proxy.url)
        return result, proxy.verdict

    again, verdict = asyncio.run(replayed())
    assert again.content == live.content
    assert again.tools_used == live.tools_used
    assert (verdict.recorded, verdict.exact, verdict.substituted, verdict.diverged,
            verdict.missing, verdict.unused) == (4, 4, 0, 0, 0, 0)
    assert verdict.passed and verdict.exit_code == 0


def test_sdk_replay_against_a_changed_file_names_the_tool(recorded) -> None:  # type: ignore[no-untyped-def]
    scene, run, live = recorded
    scene.reset()
    scene.notes.write_text(scene.notes.read_text().replace("PELICAN-42", "HERON-7"))
    with wiretape.replaying(run.path, port=0) as proxy:
        changed = asyncio.run(ask(scene, proxy.url))
    verdict = proxy.verdict
    # Strict mode refused the second request, so the agent never got its answer.
    assert changed.content != live.content and "PELICAN-42" not in changed.content
    assert (verdict.exact, verdict.diverged, verdict.passed, verdict.exit_code) == (1, 1, False, 3)
    explanation = verdict.requests[1]["detail"]["explanation"]
    assert explanation["first_line"].startswith(
        "the result of read_file (call_fake_1_0) differs at /messages/3/content")
