"""Scenes for the real coding agents: a workspace, a home of their own, the
command, and the script the fake provider plays for it.

Every agent is asked the same question about the same file and does one
real tool round-trip: the model asks for ``notes.txt`` (each agent with its
own tool), the agent reads it, sends the result back, and the model answers
with the code it found::

    ROOT/
      home/          HOME (and CODEX_HOME, ~/.gemini, ~/.claude): config and
                     the state the agent keeps; laid out anew by reset_home()
      tmp/           TMPDIR
      workspace/     the working directory, snapshotted by the recordings
        notes.txt

How each agent is pointed at the proxy:

    agent        origin      how
    claude       anthropic   ANTHROPIC_BASE_URL, set by wiretape
    codex        openai      a model provider in CODEX_HOME/config.toml that
                             names a fixed proxy port (codex does not read
                             OPENAI_BASE_URL for a configured provider), with
                             supports_websockets: Responses over WebSocket
    gemini       gemini      GOOGLE_GEMINI_BASE_URL, set by wiretape; API-key
                             auth selected in ~/.gemini/settings.json
    nanobot      custom      providers.custom.apiBase in its config.json,
                             naming a fixed proxy port

Telemetry, error reports and update checks are off for each, through the
variables and settings each documents; the agents reach only loopback.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agent_install import bin_path

from e2e import nanobot_support as ns
from wiretape.testing import TextTurn, ToolCall, ToolCallTurn, Turn

AGENTS = ("claude", "codex", "gemini", "nanobot")

CODE = "PELICAN-42"
NOTES = f"Launch notes\nThe launch code is {CODE}.\nDo not share it outside the team.\n"
CHANGED_CODE = "HERON-7"
PROMPT = "What is the launch code in notes.txt?"
ANSWER = f"The launch code is {CODE}."

CLAUDE_MODEL = "claude-sonnet-4-6"
CODEX_MODEL = "gpt-5.5"
GEMINI_MODEL = "gemini-2.5-flash"

# What the child never inherits: other origins and keys, proxies, the
# caller's own config and cache folders (each agent keeps its state under
# HOME instead), and the CI flag some agents change their behaviour on.
_DROPPED_PREFIXES = ("ANTHROPIC_", "OPENAI_", "GEMINI_", "GOOGLE_", "CODEX_", "CLAUDE_",
                     "NANOBOT_", "WIRETAPE_")
_DROPPED = {"XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "CI", "GITHUB_ACTIONS",
            "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
            "http_proxy", "https_proxy", "all_proxy", "no_proxy", "NODE_OPTIONS"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def base_env(home: Path, tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in _DROPPED and not k.startswith(_DROPPED_PREFIXES)}
    env.update({
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "TZ": "UTC",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "COLUMNS": "200",
        "NO_PROXY": "127.0.0.1,localhost",
    })
    return env


@dataclass
class Scene:
    """One agent's scene, laid out under ``root``. ``origin``, ``suffix`` and
    ``port`` say how ``wiretape record`` reaches the fake provider:
    ``--upstream ORIGIN=URL+SUFFIX`` (and ``--port ORIGIN=PORT`` when the
    agent's config names the proxy's port)."""

    name: str
    root: Path
    home: Path
    workspace: Path
    argv: list[str]
    env: dict[str, str]
    origin: str
    suffix: str
    turns: list[Turn]
    lay_out_home: Callable[[Path], None]
    port: int | None = None
    cwd: Path | None = None
    """The agent's working directory (default: the workspace)."""
    tool_result_at: str = ""
    """JSON pointer of the tool result in the request (or message) that carries it."""
    websocket: bool = False
    """Whether the agent speaks to its provider over one WebSocket session (each
    request a client message of it) rather than one HTTP exchange per request."""
    warm_ups: int = 0
    """Client messages of the session that are not turns (Codex's warm-up)."""

    @property
    def exchanges(self) -> int:
        """The exchanges a recording of the scene holds."""
        return 1 if self.websocket else len(self.turns)

    @property
    def workdir(self) -> Path:
        return self.cwd or self.workspace

    @property
    def notes(self) -> Path:
        return self.workspace / "notes.txt"

    def reset_home(self) -> None:
        """The home as a fresh machine has it: config only, no state of an earlier run."""
        shutil.rmtree(self.home, ignore_errors=True)
        self.home.mkdir(parents=True)
        self.lay_out_home(self.home)

    def upstream_args(self, provider_url: str) -> list[str]:
        args = ["--upstream", f"{self.origin}={provider_url}{self.suffix}"]
        if self.port is not None:
            args += ["--port", f"{self.origin}={self.port}"]
        return args


def _lay_out(root: Path) -> tuple[Path, Path, Path]:
    home, tmp, workspace = root / "home", root / "tmp", root / "workspace"
    for folder in (home, tmp, workspace):
        folder.mkdir(parents=True, exist_ok=True)
    (workspace / "notes.txt").write_text(NOTES, encoding="utf-8")
    return home, tmp, workspace


def _write_json(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")


# --- Claude Code ---------------------------------------------------------------------------


def claude_scene(root: Path, agents: Path) -> Scene:
    """``claude -p PROMPT``: its Read tool, Anthropic messages (SSE) with a tool_use block."""
    home, tmp, workspace = _lay_out(root)
    env = base_env(home, tmp)
    env.update({
        "ANTHROPIC_API_KEY": "sk-ant-wiretape-agents-dummy",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_UPDATES": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
    })
    scene = Scene(
        name="claude",
        root=root,
        home=home,
        workspace=workspace,
        argv=[str(bin_path(agents, "claude")), "-p", PROMPT, "--model", CLAUDE_MODEL],
        env=env,
        origin="anthropic",
        suffix="",
        turns=[
            ToolCallTurn([ToolCall("Read", {"file_path": "notes.txt"})], expect=PROMPT),
            TextTurn(ANSWER, expect=CODE),
        ],
        lay_out_home=lambda home: None,
        tool_result_at="/messages/2/content/0/content",
    )
    scene.reset_home()
    return scene


# --- Codex ---------------------------------------------------------------------------------


def _codex_config(port: int) -> str:
    return "\n".join([
        f'model = "{CODEX_MODEL}"',
        'model_provider = "wiretape"',
        "check_for_update_on_startup = false",
        "",
        "[model_providers.wiretape]",
        'name = "wiretape proxy"',
        f'base_url = "http://127.0.0.1:{port}/v1"',
        'env_key = "WIRETAPE_AGENTS_API_KEY"',
        'wire_api = "responses"',
        "# Responses over WebSocket (GET /v1/responses, Upgrade: websocket), as Codex",
        "# speaks to OpenAI's own provider; a custom provider has it off by default.",
        "supports_websockets = true",
        "# No retries: a scripted error ends the run at once (codex retries 5xx otherwise).",
        "request_max_retries = 0",
        "stream_max_retries = 0",
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[feedback]",
        "enabled = false",
        "",
        "[otel]",
        'exporter = "none"',
        "",
        "# The plugin marketplace is synced from api.github.com and chatgpt.com at start.",
        "[features]",
        "plugins = false",
        "",
    ])


def codex_scene(root: Path, agents: Path) -> Scene:
    """``codex exec PROMPT``: its exec_command tool (``cat notes.txt``), OpenAI
    Responses over one WebSocket session (``supports_websockets``): a warm-up
    ``response.create`` with ``generate: false``, then one per turn, each after
    the first naming the previous response (``previous_response_id``) and
    sending only the input items after it; a function_call item in turn 1."""
    home, tmp, workspace = _lay_out(root)
    port = free_port()
    env = base_env(home, tmp)
    env.update({"CODEX_HOME": str(home / ".codex"),
                "WIRETAPE_AGENTS_API_KEY": "sk-wiretape-agents-dummy"})

    def lay_out_home(home: Path) -> None:
        (home / ".codex").mkdir()
        (home / ".codex" / "config.toml").write_text(_codex_config(port), encoding="utf-8")

    scene = Scene(
        name="codex",
        root=root,
        home=home,
        workspace=workspace,
        argv=[str(bin_path(agents, "codex")), "exec", "--strict-config", "--skip-git-repo-check",
              "--color", "never", PROMPT],
        env=env,
        origin="openai",
        suffix="/v1",
        port=port,
        turns=[
            ToolCallTurn([ToolCall("exec_command", {"cmd": "cat notes.txt"})], expect=PROMPT),
            TextTurn(ANSWER, expect=CODE),
        ],
        lay_out_home=lay_out_home,
        tool_result_at="/input/0/output",
        websocket=True,
        warm_ups=1,
    )
    scene.reset_home()
    return scene


# --- gemini-cli ----------------------------------------------------------------------------


_GEMINI_SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    # maxAttempts 1: a scripted error fails the run at once, where gemini-cli
    # would otherwise retry a 5xx for minutes (it does not read x-should-retry).
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False,
                "maxAttempts": 1},
    "telemetry": {"enabled": False},
    "privacy": {"usageStatisticsEnabled": False},
}


def gemini_scene(root: Path, agents: Path) -> Scene:
    """``gemini -p PROMPT``: its read_file tool, Gemini streamGenerateContent (SSE)
    with a functionCall part. The model is named, so no routing request is made."""
    home, tmp, workspace = _lay_out(root)
    env = base_env(home, tmp)
    env.update({
        "GEMINI_API_KEY": "wiretape-agents-dummy-key",
        "GEMINI_CLI_NO_RELAUNCH": "true",
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GEMINI_TELEMETRY_ENABLED": "false",
    })
    scene = Scene(
        name="gemini",
        root=root,
        home=home,
        workspace=workspace,
        argv=[str(bin_path(agents, "gemini")), "-p", PROMPT, "-m", GEMINI_MODEL],
        env=env,
        origin="gemini",
        suffix="",
        turns=[
            ToolCallTurn([ToolCall("read_file", {"file_path": "notes.txt"})], expect=PROMPT),
            TextTurn(ANSWER, expect=CODE),
        ],
        lay_out_home=lambda home: _write_json(home / ".gemini" / "settings.json",
                                              _GEMINI_SETTINGS),
        tool_result_at="/contents/2/parts/0/functionResponse/response/output",
    )
    scene.reset_home()
    return scene


# --- nanobot -------------------------------------------------------------------------------


def nanobot_scene(root: Path, agents: Path | None = None) -> Scene:
    """``nanobot agent -m PROMPT``: its read_file tool, OpenAI chat completions (SSE)
    with a tool call, through the tests' nanobot scene (tests/e2e/nanobot_support.py)."""
    port = free_port()
    nb = ns.make_scene(root / "nanobot-scene", f"http://127.0.0.1:{port}/v1", prompt=PROMPT)
    # One layout for every agent: the workspace, its notes.txt and a home.
    nb.notes.write_text(NOTES, encoding="utf-8")
    home, tmp, workspace = root / "home", root / "tmp", nb.workspace
    tmp.mkdir(parents=True, exist_ok=True)

    def lay_out_home(home: Path) -> None:
        # nanobot keeps its sessions next to its config: a fresh home is a fresh config dir.
        shutil.rmtree(nb.config_dir, ignore_errors=True)
        nb.config_dir.mkdir(parents=True)
        nb.config_path.write_text(
            json.dumps(ns.build_config(nb.api_base, workspace), indent=2) + "\n",
            encoding="utf-8")

    env = ns.child_env(home, base_env(home, tmp))
    scene = Scene(
        name="nanobot",
        root=root,
        home=home,
        workspace=workspace,
        argv=nb.argv(),
        env=env,
        origin="custom",
        suffix="/v1",
        port=port,
        cwd=nb.root,  # as nanobot_support runs it: what it writes to its cwd stays out
        turns=[
            ToolCallTurn([ToolCall("read_file", {"path": "notes.txt"})], expect=PROMPT),
            TextTurn(ANSWER, expect=CODE),
        ],
        lay_out_home=lay_out_home,
        tool_result_at="/messages/3/content",
    )
    scene.reset_home()
    return scene


def make_scene(name: str, root: Path, agents: Path | None) -> Scene:
    if name == "nanobot":
        return nanobot_scene(root)
    assert agents is not None
    makers = {"claude": claude_scene, "codex": codex_scene, "gemini": gemini_scene}
    return makers[name](root, agents)
