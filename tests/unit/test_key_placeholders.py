"""What a replay gives an agent for the credentials its recording had and
this environment lacks: placeholders shaped like the provider's keys, for
credential variables only, and one line saying so; and the names as a run
file keeps them (never values; older runs have none)."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from wiretape.errors import RunFileError
from wiretape.launch.origins import key_placeholders, placeholder_note
from wiretape.model import RunInfo
from wiretape.origins import KEY_PLACEHOLDER, key_placeholder, key_variables
from wiretape.redaction import KEY_SHAPES
from wiretape.store.runfile import RunFile, open_run

INFO = RunInfo(run_id="run_0123456789ab", wiretape_version="t", argv=("agent",), cwd="/x",
               env_names=(), origins=(), started_at_ns=5)


def shape(value: str) -> str | None:
    return next((label for label, pattern in KEY_SHAPES if pattern.fullmatch(value.encode())),
                None)


def test_placeholders_look_like_the_provider_s_keys() -> None:
    assert shape(key_placeholder("OPENAI_API_KEY")) == "openai-key"
    assert shape(key_placeholder("ANTHROPIC_API_KEY")) == "anthropic-key"
    assert shape(key_placeholder("GEMINI_API_KEY")) == "google-key"
    assert shape(key_placeholder("GOOGLE_API_KEY")) == "google-key"
    assert len(key_placeholder("AZURE_OPENAI_API_KEY")) == 32
    assert key_placeholder("MY_GATEWAY_TOKEN") == KEY_PLACEHOLDER
    # Each says what it is, to anyone who finds it in a log.
    assert all("replay" in key_placeholder(name) and "placeholder" in key_placeholder(name)
               for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY",
                            "AZURE_OPENAI_API_KEY"))


def test_the_known_origins_name_their_key_variables() -> None:
    assert key_variables(["openai", "anthropic", "gemini"]) == (
        "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "GEMINI_API_KEY",
        "GOOGLE_API_KEY")
    assert key_variables(["custom"]) == ()


def test_only_missing_credentials_get_one_and_never_another_variable() -> None:
    names = ("OPENAI_API_KEY", "GATEWAY_TOKEN", "GEMINI_API_KEY", "PATH", "LD_PRELOAD")
    given = key_placeholders(names, {"GEMINI_API_KEY": "AIza-mine", "GATEWAY_TOKEN": ""})
    assert given == {"OPENAI_API_KEY": key_placeholder("OPENAI_API_KEY"),
                     "GATEWAY_TOKEN": KEY_PLACEHOLDER}
    assert key_placeholders(names, {"OPENAI_API_KEY": "k", "GATEWAY_TOKEN": "t",
                                    "GEMINI_API_KEY": "g"}) == {}


def test_the_note_is_one_line_naming_each_variable() -> None:
    assert placeholder_note(["OPENAI_API_KEY"]) == (
        "wiretape: OPENAI_API_KEY is not set here; the agent gets a placeholder: a replay "
        "needs no key")
    assert placeholder_note(["A_KEY", "B_TOKEN", "C_SECRET"]) == (
        "wiretape: A_KEY, B_TOKEN and C_SECRET are not set here; the agent gets placeholders: "
        "a replay needs no key")


def test_a_run_keeps_the_names_and_an_older_run_has_none(tmp_path: Path) -> None:
    run = RunFile.create(tmp_path / "new.wtape", replace(INFO, credential_env=("OPENAI_API_KEY",)))
    run.set_credential_env(["GATEWAY_TOKEN", "OPENAI_API_KEY"])
    run.close(compact=True)
    with open_run(tmp_path / "new.wtape") as again:
        assert again.info().credential_env == ("GATEWAY_TOKEN", "OPENAI_API_KEY")
    # A run recorded before names were kept has no such metadata.
    old = RunFile.create(tmp_path / "old.wtape", INFO)
    old.close(compact=True)
    with sqlite3.connect(tmp_path / "old.wtape") as db:
        db.execute("DELETE FROM meta WHERE key = 'credential_env'")
    db.close()
    with open_run(tmp_path / "old.wtape") as again:
        assert again.info().credential_env == ()


@pytest.mark.parametrize("stored", ['["OPENAI_API_KEY", "A=B"]', '"OPENAI_API_KEY"', "[1]"])
def test_a_name_that_is_not_a_variable_s_is_one_error_line(tmp_path: Path, stored: str) -> None:
    run = RunFile.create(tmp_path / "r.wtape", INFO)
    run.close(compact=True)
    with sqlite3.connect(tmp_path / "r.wtape") as db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'credential_env'", (stored,))
    db.close()
    with open_run(tmp_path / "r.wtape") as again, pytest.raises(RunFileError) as raised:
        again.info()
    assert "credential_env" in str(raised.value) and "\n" not in str(raised.value)
