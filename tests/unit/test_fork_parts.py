"""The pure parts of forking: the model rewrite on the way upstream, the
project's price overrides, and the fake provider's per-model scripts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wiretape.errors import UsageError
from wiretape.launch import config
from wiretape.model import Request
from wiretape.proxy.fork import rewrite_model
from wiretape.testing import TextTurn
from wiretape.testing.playbook import Playbook


def request(body: bytes, target: bytes = b"/v1/chat/completions",
            headers: tuple[tuple[bytes, bytes], ...] = ()) -> Request:
    return Request(b"POST", target, headers, body)


def test_only_the_top_level_model_value_changes() -> None:
    body = (b'{"metadata": {"model": "gpt-4o-mini"}, "messages": [{"role": "user", '
            b'"content": "say \\"model\\": \\"x\\""}], "model" : "gpt-4o-mini", "stream": true}')
    out = rewrite_model(request(body), "gpt-5")
    assert out is not None
    assert out.body == body.replace(b'"model" : "gpt-4o-mini"', b'"model" : "gpt-5"')
    assert json.loads(out.body)["metadata"] == {"model": "gpt-4o-mini"}


def test_gemini_names_its_model_in_the_path() -> None:
    target = b"/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    out = rewrite_model(request(b'{"contents": []}', target), "gemini-2.5-pro")
    assert out is not None
    assert out.target == b"/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    assert out.body == b'{"contents": []}'


def test_a_request_without_a_model_or_with_a_coded_body_is_left_alone() -> None:
    assert rewrite_model(request(b'{"input": "hi"}', b"/v1/embeddings"), "m") is None
    coded = request(b'{"model": "a"}', headers=((b"Content-Encoding", b"gzip"),))
    assert rewrite_model(coded, "m") is None


def test_project_prices_override_the_table(tmp_path: Path) -> None:
    (tmp_path / "wiretape.toml").write_text(
        '[prices]\n"my-model" = { input = 0.5, output = 2 }\n')
    assert config.find(tmp_path).prices == (("my-model", (0.5, 2.0)),)
    for entry, wrong in [
            ('{ input = "cheap" }', "has no output"),
            ('{ input = "cheap", output = 1 }', "has input = 'cheap', not a number"),
            ("{ input = 1, output = 1e308 }", "has output = 1e+308, not a price"),
            ("{ input = -1, output = 1 }", "has input = -1, not a price"),
            ("{ input = nan, output = 1 }", "has input = nan, not a price"),
            ("{ input = 1, output = 1, cached = 0.1 }", "has an unknown key 'cached'"),
            ("3", "is int 3, not a table")]:
        (tmp_path / "wiretape.toml").write_text(f'[prices]\n"my-model" = {entry}\n')
        with pytest.raises(UsageError) as caught:
            config.find(tmp_path)
        assert str(caught.value).startswith(f"the price of 'my-model' in wiretape.toml {wrong}")
        assert "give input and output in US dollars per million tokens" in str(caught.value)


def test_each_model_plays_its_own_script() -> None:
    book = Playbook([TextTurn("default")], {"m-a": [TextTurn("from a")]})

    def ask(model: str) -> bytes:
        body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
        _, reply = book.answer("POST", "/v1/chat/completions", (), body.encode())
        return b"".join(reply.chunks)

    assert b"from a" in ask("m-a")
    assert b"default" in ask("other")
    assert b"script exhausted" in ask("m-a")


def test_the_python_api_refuses_bad_models_and_after_in_one_clear_line(
        tmp_path: Path) -> None:
    import wiretape

    nowhere = tmp_path / "never-read.wtape"  # (refused before the run is looked at)
    with pytest.raises(TypeError, match=r"not a string \('fake-fixer'\): for one model give "
                                        r"\['fake-fixer'\]"):
        wiretape.compare(nowhere, after=1, models="fake-fixer", verify="true")
    with pytest.raises(UsageError, match="names fake-fixer more than once"):
        wiretape.compare(nowhere, after=1, models=["fake-fixer", "fake-fixer"], verify="true")
    with pytest.raises(UsageError, match="at least one model"):
        wiretape.compare(nowhere, after=1, models=[], verify="true")
    with pytest.raises(TypeError, match=r"after must be a number of exchanges .an int., not "
                                        "str '1'"):
        wiretape.compare(nowhere, after="1", models=["a"], verify="true")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"after must be 0 or more .* got -1"):
        wiretape.fork(nowhere, after=-1)
    with pytest.raises(TypeError, match="after must be"):
        wiretape.fork(nowhere, after=True)


def test_a_run_is_named_by_id_only_where_an_id_finds_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from wiretape.store.locate import resolve_run, run_ref, runs_dir

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WIRETAPE_HOME", raising=False)
    runs_dir().mkdir(parents=True)
    inside = runs_dir() / "run_0123456789ab.wtape"
    inside.write_bytes(b"")
    assert run_ref(inside, "run_0123456789ab") == "run_0123456789ab"
    assert resolve_run("run_0123456789ab").resolve() == inside.resolve()
    assert run_ref(tmp_path / "parent.wtape", "run_0123456789ab") == str(
        tmp_path / "parent.wtape")
    assert run_ref(tmp_path / "my runs" / "a.wtape", "run_0123456789ab") == (
        f"'{tmp_path / 'my runs' / 'a.wtape'}'")
    renamed = runs_dir() / "fork-fake-fixer.wtape"  # in the folder, but not by its id
    assert run_ref(renamed, "run_0123456789ab") == str(renamed)


def test_the_reports_fork_table_says_interrupted_and_names_each_verify_that_differs() -> None:
    from wiretape.inspect.forks import ForkSummary
    from wiretape.inspect.prices import PriceTable
    from wiretape.inspect.report import forks_table

    def summary(run_id: str, exit_status: int | None, verify: str) -> ForkSummary:
        return ForkSummary(run_id, Path(f"{run_id}.wtape"), 1, "m", 2, exit_status, 10, 5,
                           verify, 1, 3.0)

    prices = PriceTable.with_overrides({})
    page = forks_table([summary("run_a", None, "pytest -q"), summary("run_b", 0, "make test")],
                       prices)
    a = page.split('data-fork="run_a"', 1)[1].split("</tr>", 1)[0]
    b = page.split('data-fork="run_b"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="muted">interrupted</td>' in a and "None" not in a
    assert "pytest -q" in a and "make test" in b and "pytest -q; make test" not in page
    same = forks_table([summary("run_a", 1, "pytest -q"), summary("run_b", 0, "pytest -q")],
                       prices)
    assert same.count("pytest -q") == 1 and "verify: <code>pytest -q</code>" in same


def test_compare_marks_the_row_of_a_fork_that_served_less_than_n() -> None:
    from wiretape.cli.fork_cmds import compare_rows
    from wiretape.inspect.prices import PriceTable
    from wiretape.launch.fork import ForkResult

    def result(replayed: int) -> ForkResult:
        return ForkResult(f"run_{replayed}", Path(f"run_{replayed}.wtape"), "run_p", 2, "m",
                          "m", replayed, 1, 1, None, None, [], 1, 1, 1.0, 0)

    prices = PriceTable.with_overrides({})
    short, full = compare_rows([result(1), result(2)], prices)
    assert short[1:3] == ["pass (0) (short)", "interrupted"]
    assert full[1] == "pass (0)"


def test_a_failed_verify_is_explained_by_its_last_line_and_a_stopped_fork_is_not_done() -> None:
    from dataclasses import replace

    from wiretape.cli.fork_cmds import _ended, _verify_lines
    from wiretape.launch.fork import ForkResult

    missing = ForkResult("run_1", Path("run_1.wtape"), "run_p", 1, "m", "m", 1, 1, 1, 0, None,
                         [], 1, 1, 1.0, 127, "sh: 1: pytset: not found\n\n")
    assert _verify_lines(missing, 600) == [
        "wiretape compare: m: verify failed with exit status 127: sh: 1: pytset: not found"]
    stopped = replace(missing, stopped="diverged request POST /v1/chat/completions",
                      verify_status=None)
    assert _ended(stopped).startswith("stopped") and _verify_lines(stopped, 600) == []


def test_a_served_copy_is_timed_as_served_its_offsets_scaled_in_order() -> None:
    from wiretape.model import Ending, Exchange, Frame, Message, Opcode, Response
    from wiretape.proxy.fork import served_copy

    parent = Exchange(0, 1, "openai", 1_000, request(b"{}"),
                      Response(200, b"OK", (), (Frame(100, b"a"), Frame(900, b"b"))),
                      Ending.COMPLETE, 100, 1_000,
                      messages=(Message("server", Opcode.TEXT, b"x", 500),))
    copy = served_copy(parent, 5_000, 5_010)
    assert (copy.started_at_ns, copy.duration_ns, copy.ttfb_ns) == (5_000, 10, 1)
    assert copy.response is not None
    assert [f.offset_ns for f in copy.response.frames] == [1, 9]
    assert [m.offset_ns for m in copy.messages] == [5]
    assert copy.response.body == b"ab" and copy.request == parent.request
