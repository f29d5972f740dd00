"""Install the real coding agents from npm, pinned, into a cache folder shared by every run.

    python tests/agents/agent_install.py          # install when missing; print the folder
    python tests/agents/agent_install.py --check  # exit 1 (and say why) when not installed

The agents (``claude -p``, ``codex exec``, ``gemini -p``) are npm packages:
the pins below are exact versions, and each package pins its platform binaries
exactly in turn. They go to ``$XDG_CACHE_HOME/wiretape-agents/<hash>``
(``~/.cache`` when XDG_CACHE_HOME is unset), where ``<hash>`` is derived from
the pins and the machine's platform: a new pin installs beside the old one,
and an existing folder is reused as it is. An install is written to a
temporary folder and renamed into place once every agent has answered
``--version`` with its pinned version, so a folder that exists is complete.

Needs ``node`` (20 or newer) and ``npm`` on PATH. The tests marked ``agents``
import :func:`installed` and skip, naming this command, when it returns
``None``; ``make test-agents`` runs this script first.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PINS: dict[str, str] = {
    "@anthropic-ai/claude-code": "2.1.332",
    "@openai/codex": "0.171.0",
    "@google/gemini-cli": "0.61.0",
}
"""npm package -> exact version."""

COMMANDS: dict[str, tuple[str, str]] = {
    "claude": ("@anthropic-ai/claude-code", "{version} (Claude Code)"),
    "codex": ("@openai/codex", "codex-cli {version}"),
    "gemini": ("@google/gemini-cli", "{version}"),
}
"""Command -> (its package, what ``COMMAND --version`` prints for the pinned version)."""

MIN_NODE = 20
_COMPLETE = ".complete"  # written last, inside the temporary folder, before the rename


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "wiretape-agents"


def version_hash() -> str:
    """12 hex digits naming the pins and the platform the binaries were chosen for."""
    key = json.dumps(
        {"pins": PINS, "platform": [sys.platform, platform.machine()]}, sort_keys=True
    )
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def install_dir() -> Path:
    return cache_root() / version_hash()


def installed() -> Path | None:
    """The folder of a complete install of the pinned agents, or ``None``."""
    folder = install_dir()
    return folder if (folder / _COMPLETE).is_file() else None


def bin_path(folder: Path, command: str) -> Path:
    """Where ``command`` (claude, codex, gemini) lives in an install folder."""
    return folder / "node_modules" / ".bin" / command


def missing_reason() -> str:
    return (
        f"the coding agents are not installed in {install_dir()}: run `make agents` "
        "(or `python tests/agents/agent_install.py`; needs node >= 20 and npm)"
    )


def _node_major() -> int:
    out = subprocess.run(["node", "--version"], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().lstrip("v").split(".")[0])


def _check_tools() -> None:
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            raise SystemExit(f"agent_install: {tool} is not on PATH: install Node.js {MIN_NODE} "
                             "or newer with npm")
    if _node_major() < MIN_NODE:
        raise SystemExit(f"agent_install: node {MIN_NODE} or newer is needed")


def _verify(folder: Path, env: dict[str, str]) -> None:
    for command, (package, shown) in COMMANDS.items():
        path = bin_path(folder, command)
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                             env=env, timeout=120, stdin=subprocess.DEVNULL)
        expected = shown.format(version=PINS[package])
        if out.returncode != 0 or out.stdout.strip() != expected:
            raise SystemExit(f"agent_install: {path} --version printed {out.stdout.strip()!r} "
                             f"(status {out.returncode}, stderr {out.stderr.strip()[-300:]!r}); "
                             f"expected {expected!r}")


def install() -> Path:
    """Install the pinned agents unless a complete install exists; return its folder."""
    done = installed()
    if done is not None:
        return done
    _check_tools()
    final = install_dir()
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    work.chmod(0o755)
    try:
        manifest = {"name": "wiretape-agents", "private": True, "dependencies": PINS}
        (work / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
        home = work / ".home"  # the agents' --version runs write their state here, not in ~
        home.mkdir()
        print(f"agent_install: installing {', '.join(f'{p}@{v}' for p, v in PINS.items())} "
              f"into {final}", file=sys.stderr, flush=True)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--no-package-lock",
                        "--loglevel=error"], cwd=work, check=True, stdin=subprocess.DEVNULL)
        env = {**os.environ, "HOME": str(home), "CODEX_HOME": str(home / ".codex"),
               "DISABLE_AUTOUPDATER": "1", "GEMINI_CLI_NO_RELAUNCH": "true"}
        (home / ".codex").mkdir()
        _verify(work, env)
        shutil.rmtree(home)
        (work / _COMPLETE).write_text(json.dumps(PINS, indent=2) + "\n")
        try:
            work.rename(final)
        except OSError:  # another install finished first: keep it
            if installed() is None:
                raise
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return final


def main(argv: list[str]) -> int:
    if argv[1:] == ["--check"]:
        folder = installed()
        if folder is None:
            print(missing_reason(), file=sys.stderr)
            return 1
        print(folder)
        return 0
    if argv[1:]:
        print(__doc__, file=sys.stderr)
        return 2
    print(install())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
