"""Lay out a nanobot (nanobot-ai 0.3.5) test scene and run its one-shot CLI.

nanobot reads its model origin from ``providers.custom.apiBase`` in its
config file, never from ``OPENAI_BASE_URL``, so a scene is a config file
pointing at a given URL (a fake provider, or a wiretape proxy), plus a
workspace the agent's file tools work in::

    ROOT/
      home/                      HOME for the child (nanobot writes nothing here)
      nanobot/config.json        config dir: nanobot also writes sessions/,
                                 media/ and cli-apps/ next to config.json
      workspace/                 what the agent's tools see
        notes.txt                the file the agent is asked to read
        docs/plan.md             the second file it reads
        .nanobot/workspace-id    fixed, else nanobot writes a random one
        .git/                    empty, else nanobot commits a git store with
                                 the current time and logs a timestamped line

Everything that can vary between two identical runs is pinned here, so two
runs against the same answers send byte-identical requests (headers too,
when the port is the same: ``Host`` carries it) and print identical stdout,
leave an empty stderr and an identical workspace:

* the per-process random ``x-session-affinity`` header: fixed with
  ``providers.custom.extraHeaders``;
* the host time zone, which reaches the ``cron`` tool's description: pinned
  with ``agents.defaults.timezone`` (and ``TZ=UTC`` in the environment);
* the skills summary in the system prompt, which says which of ``gh``,
  ``summarize``, ``tmux``, ``curl`` are on PATH: every bundled skill disabled;
* session history and idle compaction: a fresh config dir per run
  (:meth:`NanobotScene.reset`) and ``idleCompactAfterMinutes: 0``;
* the workspace id, git store and its log line: pre-seeded (above);
* ``NANOBOT_*`` variables, which override config keys: removed from the env;
* Rich wraps and pads output to the terminal width: ``--no-markdown`` and
  ``COLUMNS=200``.

What stays: the system prompt names the OS, machine and Python version
(``Linux x86_64, Python 3.11.7``), and stdout's first line is
``Using config: <absolute config path>``. Record and replay on the same
interpreter, and compare stdout at the same paths.

nanobot exits 0 when the model call fails: it prints ``Error: ...`` or
``Error calling LLM: ...`` as its answer. Check the answer with
:func:`final_answer` / :func:`model_error`, never the exit status alone.

Use it with the fake provider::

    from wiretape.testing import FakeProvider, script_from_json

    with FakeProvider(script_from_json(session_turns())) as fp:
        scene = make_scene(tmp_path / "scene", fp.url + "/v1")
        result = run_nanobot(scene)
    assert model_error(result.stdout) is None
    assert EXPECTED_QUOTE in final_answer(result.stdout)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "API_KEY",
    "BOT_HEADER",
    "EXPECTED_QUOTE",
    "LAUNCH_CODE",
    "MODEL",
    "NOTES_TEXT",
    "PLAN_TEXT",
    "PROMPT",
    "SESSION_AFFINITY",
    "WORKSPACE_ID",
    "NanobotScene",
    "build_config",
    "child_env",
    "final_answer",
    "make_scene",
    "model_error",
    "nanobot_command",
    "run_nanobot",
    "session_script",
    "session_turns",
    "tool_hints",
]

MODEL = "fake-model"
"""``agents.defaults.model``; sent verbatim as the request's ``model``."""

API_KEY = "sk-wiretape-e2e-dummy"
"""A dummy key; nanobot sends it as ``authorization: Bearer ...``."""

SESSION_AFFINITY = "wiretape-e2e"
"""Replaces the random ``x-session-affinity`` header nanobot sends by default."""

WORKSPACE_ID = "0123456789abcdef0123456789abcdef"
"""Written to ``workspace/.nanobot/workspace-id`` (nanobot wants 32 hex digits)."""

LAUNCH_CODE = "PELICAN-42"
NOTES_TEXT = f"Launch notes\nThe launch code is {LAUNCH_CODE}.\nDo not share it outside the team.\n"
PLAN_TEXT = "# Plan\n\n1. Water the ferns.\n2. Launch at dawn.\n"
EXPECTED_QUOTE = f"The launch code is {LAUNCH_CODE}"
"""A sentence of notes.txt that the scripted final answer quotes."""

PROMPT = (
    "Read notes.txt, then look in the docs folder and read the plan there. "
    "What is the launch code, and what is the first step of the plan?"
)

BOT_HEADER = "\U0001f408 nanobot"
"""The line nanobot prints before its answer (bot icon and name)."""

_TOOL_HINT_PREFIX = "  \u21b3 "  # "  ↳ read notes.txt"
_ERROR_PREFIXES = ("Error calling LLM:", "Error:")

# Every skill bundled with nanobot 0.3.5. Disabled so that the system prompt
# does not depend on which of their binaries (gh, summarize, tmux, curl) are on PATH.
_BUNDLED_SKILLS = (
    "clawhub",
    "cron",
    "github",
    "image-generation",
    "memory",
    "my",
    "skill-creator",
    "summarize",
    "tmux",
    "update-setup",
    "weather",
)


# --- the scripted model ------------------------------------------------------------------


def session_turns(*, write_answer: bool = False) -> list[dict[str, Any]]:
    """The model's turns for :data:`PROMPT`, in the fake provider's JSON script form.

    Three tool calls, then a final text that quotes notes.txt::

        read_file {"path": "notes.txt"}
        list_dir  {"path": "docs"}
        read_file {"path": "docs/plan.md"}
        text      "... The launch code is PELICAN-42 ... Water the ferns ..."

    Each turn's ``expect`` is a substring of the last message nanobot sends
    before it (the user prompt, then each tool's result), so a tool that did
    not run, or read something else, fails the fake provider's check.

    ``write_answer`` adds ``write_file {"path": "answer.txt", ...}`` before
    the final text. nanobot's write_file result names the file by its
    absolute path (``Successfully wrote 11 characters to /ABS/workspace/answer.txt``),
    so the last request then contains the workspace's absolute path, and the
    workspace gains a file: use it to exercise path handling and the files outcome.
    """
    turns: list[dict[str, Any]] = [
        {
            "tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}],
            "expect": "notes.txt",
        },
        {
            "tool_calls": [{"name": "list_dir", "arguments": {"path": "docs"}}],
            "expect": LAUNCH_CODE,
        },
        {
            "tool_calls": [{"name": "read_file", "arguments": {"path": "docs/plan.md"}}],
            "expect": "plan.md",
        },
    ]
    final_expect = "Water the ferns"
    if write_answer:
        turns.append(
            {
                "tool_calls": [
                    {
                        "name": "write_file",
                        "arguments": {"path": "answer.txt", "content": f"{LAUNCH_CODE}\n"},
                    }
                ],
                "expect": final_expect,
            }
        )
        final_expect = "answer.txt"
    turns.append(
        {
            "text": (
                f"notes.txt says: {EXPECTED_QUOTE}. "
                "The first step of docs/plan.md is: Water the ferns."
            ),
            "expect": final_expect,
        }
    )
    return turns


def session_script(*, write_answer: bool = False) -> list[Any]:
    """:func:`session_turns` as ``wiretape.testing`` turns, ready for ``FakeProvider``."""
    from wiretape.testing import script_from_json

    return script_from_json(session_turns(write_answer=write_answer))


# --- the scene ---------------------------------------------------------------------------


def build_config(api_base: str | None, workspace: Path) -> dict[str, Any]:
    """nanobot's config.json for a ``custom`` (OpenAI-compatible) provider at ``api_base``.

    ``api_base`` is used verbatim as the OpenAI client's base URL; requests go
    to ``api_base + "/chat/completions"``, so pass ``http://127.0.0.1:PORT/v1``.
    Do not set ``apiType`` here: nanobot 0.3.5 accepts it only under
    ``providers.openai``.

    ``api_base`` None: the ``openai`` provider with no ``apiBase``, so the
    openai SDK's own origin, ``https://api.openai.com/v1`` (nanobot then
    honours HTTPS_PROXY and SSL_CERT_FILE, as the SDK's httpx client does).
    """
    provider = "custom" if api_base is not None else "openai"
    settings: dict[str, Any] = {"apiKey": API_KEY,
                                "extraHeaders": {"x-session-affinity": SESSION_AFFINITY}}
    if api_base is not None:
        settings["apiBase"] = api_base
    return {
        "providers": {provider: settings},
        "agents": {
            "defaults": {
                "workspace": str(workspace),
                "model": MODEL,
                "provider": provider,
                "timezone": "UTC",
                "idleCompactAfterMinutes": 0,
                "disabledSkills": list(_BUNDLED_SKILLS),
            }
        },
        "tools": {
            # The agent's tools run for real, in record and in replay: keep them
            # to the file tools, inside the workspace.
            "restrictToWorkspace": True,
            "exec": {"enable": False},
            "web": {"enable": False},
        },
    }


@dataclass(frozen=True)
class NanobotScene:
    """A laid-out scene; every path is absolute. Build it with :func:`make_scene`."""

    root: Path
    home: Path
    config_dir: Path
    config_path: Path
    workspace: Path
    api_base: str | None
    prompt: str = PROMPT

    @property
    def notes(self) -> Path:
        return self.workspace / "notes.txt"

    @property
    def plan(self) -> Path:
        return self.workspace / "docs" / "plan.md"

    @property
    def sessions_dir(self) -> Path:
        """Where nanobot keeps this workspace's session history (JSONL, with timestamps)."""
        return self.config_dir / "sessions" / WORKSPACE_ID

    def argv(self, command: Sequence[str] | None = None) -> list[str]:
        """The one-shot command: ``nanobot agent -m PROMPT -c CONFIG --no-markdown``.

        ``command`` is how to start nanobot (default :func:`nanobot_command`).
        Runtime logs are off by default in 0.3.5 (``--no-logs``), so stderr stays
        empty in a pinned scene.
        """
        base = list(command) if command is not None else nanobot_command()
        return [
            *base,
            "agent",
            "-m",
            self.prompt,
            "-c",
            str(self.config_path),
            "--no-markdown",
        ]

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The child's environment: ``base`` (default ``os.environ``), pinned by
        :func:`child_env`."""
        return child_env(self.home, base)

    def set_api_base(self, api_base: str) -> NanobotScene:
        """Rewrite config.json for another origin (a proxy port); returns the updated scene."""
        _write_config(self.config_path, build_config(api_base, self.workspace))
        return NanobotScene(
            self.root,
            self.home,
            self.config_dir,
            self.config_path,
            self.workspace,
            api_base,
            self.prompt,
        )

    def reset(self) -> None:
        """Put the scene back as :func:`make_scene` left it, config included.

        Needed before running nanobot again in the same scene: a second run
        otherwise sends the first run's conversation (kept under
        ``config_dir/sessions``) and prints no ``Created ...`` lines.
        """
        for path in (self.home, self.config_dir, self.workspace):
            if path.exists():
                shutil.rmtree(path)
        _lay_out(self)


def make_scene(root: Path, api_base: str | None, *, prompt: str = PROMPT) -> NanobotScene:
    """Create a scene under ``root`` (created if missing) whose config points at ``api_base``.

    ``root`` itself holds only the three directories: run the agent with
    ``root`` as its working directory (as :func:`run_nanobot` does), so that
    files written to the working directory stay out of the workspace.
    """
    root = Path(root).absolute()
    config_dir = root / "nanobot"
    scene = NanobotScene(
        root=root,
        home=root / "home",
        config_dir=config_dir,
        config_path=config_dir / "config.json",
        workspace=root / "workspace",
        api_base=api_base,
        prompt=prompt,
    )
    _lay_out(scene)
    return scene


def _lay_out(scene: NanobotScene) -> None:
    scene.root.mkdir(parents=True, exist_ok=True)
    scene.home.mkdir(exist_ok=True)
    scene.config_dir.mkdir(exist_ok=True)
    _write_config(scene.config_path, build_config(scene.api_base, scene.workspace))
    ws = scene.workspace
    (ws / "docs").mkdir(parents=True, exist_ok=True)
    (ws / "notes.txt").write_text(NOTES_TEXT, encoding="utf-8")
    (ws / "docs" / "plan.md").write_text(PLAN_TEXT, encoding="utf-8")
    # Pre-empt the two things nanobot would otherwise create with random or
    # time-dependent content on its first run in this workspace.
    (ws / ".nanobot").mkdir(exist_ok=True)
    (ws / ".nanobot" / "workspace-id").write_text(WORKSPACE_ID + "\n", encoding="ascii")
    (ws / ".git").mkdir(exist_ok=True)


def _write_config(path: Path, config: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


# --- running it --------------------------------------------------------------------------


def nanobot_command() -> list[str]:
    """How to start nanobot: the ``nanobot`` script next to this interpreter, else on PATH.

    Raises ``FileNotFoundError`` when there is none (a test may skip on it).
    """
    beside = Path(sys.executable).parent / "nanobot"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    found = shutil.which("nanobot")
    if found is None:
        raise FileNotFoundError(
            "the nanobot command is not installed (pip install nanobot-ai==0.3.5)"
        )
    return [found]


def child_env(home: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) without ``NANOBOT_*``, with HOME and output pinned."""
    source = os.environ if base is None else base
    env = {name: value for name, value in source.items() if not name.startswith("NANOBOT_")}
    env.update(
        {
            "HOME": str(home),
            "TZ": "UTC",
            "COLUMNS": "200",  # Rich wraps (and pads markdown) to this width
            "LINES": "50",
            "NO_COLOR": "1",
            "TERM": "dumb",
            "PYTHONIOENCODING": "utf-8",  # the answer header is an emoji
            "PYTHONHASHSEED": "0",
        }
    )
    return env


def run_nanobot(
    scene: NanobotScene,
    *,
    command: Sequence[str] | None = None,
    timeout: float = 120.0,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the one-shot command in ``scene.root`` and capture stdout and stderr as text.

    A refused connection or a retryable error status (5xx, 408, 409, 429, or a
    body mentioning e.g. "server_error") is retried by nanobot after 1, 2 and
    4 s, so a failing run takes about 8 s; ``x-should-retry: false`` stops that.
    """
    return subprocess.run(
        scene.argv(command),
        cwd=scene.root,
        env=dict(env) if env is not None else scene.env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
        check=False,
    )


# --- reading what it printed -------------------------------------------------------------


def _after_header(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    for index in range(len(lines) - 1, -1, -1):
        if lines[index].strip() == BOT_HEADER:
            return lines[index + 1 :]
    raise ValueError(f"no {BOT_HEADER!r} line in nanobot's output: {stdout[-500:]!r}")


def tool_hints(stdout: str) -> list[str]:
    """The tool-call lines nanobot printed, e.g. ``["read notes.txt", "ls docs"]``."""
    return [
        line[len(_TOOL_HINT_PREFIX) :]
        for line in _after_header(stdout)
        if line.startswith(_TOOL_HINT_PREFIX)
    ]


def final_answer(stdout: str) -> str:
    """The answer nanobot printed: the text after its header and tool-call lines.

    Raises ``ValueError`` when there is no answer header (nanobot did not get
    as far as asking the model).
    """
    lines = [line for line in _after_header(stdout) if not line.startswith(_TOOL_HINT_PREFIX)]
    return "\n".join(line.rstrip() for line in lines).strip()


def model_error(stdout: str) -> str | None:
    """The error nanobot printed in place of an answer, or ``None`` if it answered.

    nanobot exits 0 in that case, e.g. ``Error calling LLM: Connection error.``
    or ``Error: {'message': '...', 'type': 'invalid_request_error', ...}``.
    """
    try:
        answer = final_answer(stdout)
    except ValueError as exc:
        return str(exc)
    return answer if answer.startswith(_ERROR_PREFIXES) else None
