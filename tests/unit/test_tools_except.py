"""``--tools-except`` never leaves a model provider's host out of the
recording: such a host in NO_PROXY would send the agent's model calls
past the recorder, to the real provider."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from wiretape.cli.main import cli
from wiretape.errors import UsageError
from wiretape.launch.intercept import interception_settings


@pytest.mark.parametrize(("excepted", "message"), [
    ("api.openai.com", "--tools-except api.openai.com: api.openai.com is a model provider's "
                       "host (openai), always recorded"),
    ("API.Anthropic.com", "--tools-except API.Anthropic.com: api.anthropic.com is a model "
                          "provider's host (anthropic)"),
    ("openai.com", "--tools-except openai.com: api.openai.com is a model provider's host"),
])
def test_a_providers_host_is_refused(excepted: str, message: str) -> None:
    with pytest.raises(UsageError) as err:
        interception_settings(None, None, (), tools=True, tools_except=(excepted,))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_host_both_intercepted_and_excepted_is_refused() -> None:
    with pytest.raises(UsageError) as err:
        interception_settings(("llm.internal",), None, (), tools=True,
                              tools_except=("db.test", "llm.internal"))
    assert str(err.value).startswith("--tools-except llm.internal: also given to "
                                     "--intercept-host")


def test_other_hosts_are_left_out() -> None:
    got = interception_settings(("llm.internal",), None, (), tools=True,
                                tools_except=("db.test", "openai.com.example", "Search.Test"))
    assert got["intercept"] is not None
    assert got["intercept"].tools_except == ("db.test", "openai.com.example", "search.test")


def test_the_cli_names_the_conflict_in_one_line(tmp_path: Path) -> None:
    out = CliRunner().invoke(cli, ["record", "--tools", "--tools-except", "api.openai.com",
                                   "-o", str(tmp_path / "r.wtape"), "--", "true"])
    assert out.exit_code == 2, out.output
    lines = [line for line in out.output.splitlines() if "api.openai.com" in line]
    assert len(lines) == 1 and "is a model provider's host (openai)" in lines[0], out.output
    assert not (tmp_path / "r.wtape").exists()
