"""Replay logs (DESIGN.md, "The run file"): a replay never writes its run;
its log is kept per run in the folder of replay logs, tied to the run's
content; a replay that served nobody and ran no agent is not stored; old
runs' in-file replays are still read."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from wiretape.errors import RunFileError
from wiretape.inspect.verdicts import verdict_of
from wiretape.model import Ending, Exchange, Frame, Origin, Request, Response, RunInfo
from wiretape.store.locate import replay_log_path, replay_logs_dir
from wiretape.store.runfile import RunFile, open_run

INFO = RunInfo(run_id="run_0123456789ab", wiretape_version="t", argv=("agent",), cwd="/x",
               env_names=(), origins=(Origin("openai", "https://h/v1", 9, ()),), started_at_ns=5)
SETTINGS = {"pace": "fast", "argv": ["agent"], "cwd": "/x", "allow_substitutions": False,
            "substitutions": [], "sandbox": None, "paths": "none", "ports": {"openai": 9}}
DETAIL = {"fields": [], "header_notes": [], "body_bytes_differ": 0, "first_body_offset": None,
          "substitutions": []}


@pytest.fixture
def run_path(tmp_path: Path) -> Path:
    path = tmp_path / "runs" / "r.wtape"
    run = RunFile.create(path, INFO)
    run.write_exchange(Exchange(0, 1, "openai", 1, Request(b"POST", b"/v1/x", (), b"{}"),
                                Response(200, b"OK", (), (Frame(1, b"ok"),)), Ending.COMPLETE,
                                1, 2))
    run.finish(0, b"", b"")
    run.close(compact=True)
    return path


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def replay(path: Path, logs: Path, replay_id: str, *, requests: int = 1,
           exit_status: int | None = 0) -> None:
    with open_run(path, replay_logs=logs) as run:
        run.prepare_for_writes()
        run.start_replay(replay_id, "strict", SETTINGS)  # type: ignore[arg-type]
        for i in range(requests):
            run.add_replay_request(replay_id, i, "exact", 0, True, b"POST", b"/v1/x",
                                   DETAIL)  # type: ignore[arg-type]
        run.finish_replay(replay_id, exit_status, b"", b"", {})


def test_a_replay_leaves_the_run_as_it_was_and_is_logged_beside_it(run_path: Path,
                                                                  tmp_path: Path) -> None:
    before = sha(run_path)
    replay(run_path, tmp_path / "logs", "rpl_000000000001")
    assert sha(run_path) == before
    assert sorted(p.name for p in run_path.parent.iterdir()) == ["r.wtape"]
    log = tmp_path / "logs" / "run_0123456789ab.replays"
    assert log.is_file()
    assert (tmp_path / "logs" / ".gitignore").read_text().splitlines()[-1] == "*"
    with open_run(run_path, replay_logs=tmp_path / "logs") as run:
        verdict = verdict_of(run)
    assert verdict is not None and verdict.replay_id == "rpl_000000000001"
    assert (verdict.exact, verdict.complete, verdict.passed) == (1, True, True)


def test_the_latest_replay_is_the_verdict(run_path: Path, tmp_path: Path) -> None:
    replay(run_path, tmp_path / "logs", "rpl_000000000001")
    replay(run_path, tmp_path / "logs", "rpl_000000000002", requests=0)
    with open_run(run_path, replay_logs=tmp_path / "logs") as run:
        assert [r["id"] for r in run.replays()] == ["rpl_000000000001", "rpl_000000000002"]
        latest = verdict_of(run)
    assert latest is not None and latest.replay_id == "rpl_000000000002"
    assert latest.passed is False  # the recorded exchange went unused


def test_a_replay_that_served_nobody_and_ran_nothing_is_not_stored(run_path: Path,
                                                                  tmp_path: Path) -> None:
    """``serve --replay`` stopped before any client came: its verdict is
    reported, and nothing is written anywhere."""
    with open_run(run_path, replay_logs=tmp_path / "logs") as run:
        run.prepare_for_writes()
        run.start_replay("rpl_000000000001", "strict", SETTINGS,  # type: ignore[arg-type]
                         serve_only=True)
        run.finish_replay("rpl_000000000001", None, b"", b"", {})
        verdict = verdict_of(run, "rpl_000000000001")
        assert verdict is not None and verdict.reused == 0
    assert not (tmp_path / "logs").exists()
    with open_run(run_path, replay_logs=tmp_path / "logs") as run:
        assert run.replays() == [] and verdict_of(run) is None


def test_a_replay_with_a_command_is_written_as_it_starts(run_path: Path, tmp_path: Path) -> None:
    """Killed before its first request, it still shows as a replay that did
    not finish (and a serving one, once it answered a request)."""
    with open_run(run_path, replay_logs=tmp_path / "logs") as run:
        run.prepare_for_writes()
        run.start_replay("rpl_000000000001", "strict", SETTINGS)  # type: ignore[arg-type]
        run.start_replay("rpl_000000000002", "strict", SETTINGS,  # type: ignore[arg-type]
                         serve_only=True)
        run.add_replay_request("rpl_000000000002", 0, "exact", 0, True, b"POST", b"/v1/x",
                               DETAIL)  # type: ignore[arg-type]
    with open_run(run_path, replay_logs=tmp_path / "logs") as run:  # as after a SIGKILL
        first, second = run.replays()
        assert (first["id"], first["ended_at_ns"]) == ("rpl_000000000001", None)
        assert (second["id"], second["ended_at_ns"]) == ("rpl_000000000002", None)
        verdict = verdict_of(run, "rpl_000000000001")
        assert verdict is not None and not verdict.complete and not verdict.passed


def test_a_copy_shares_the_replays_and_other_bytes_do_not(run_path: Path,
                                                           tmp_path: Path) -> None:
    copy = tmp_path / "copy.wtape"
    shutil.copyfile(run_path, copy)
    replay(copy, tmp_path / "logs", "rpl_000000000001")
    with open_run(run_path, replay_logs=tmp_path / "logs") as run:
        assert [r["id"] for r in run.replays()] == ["rpl_000000000001"]
        assert run.replays(source=copy)[0]["id"] == "rpl_000000000001"
        assert run.replays(source=run_path) == []
    # the same run id over other bytes: none of those replays are its
    db = sqlite3.connect(run_path)
    db.execute("UPDATE meta SET value = '\"edited\"' WHERE key = 'cwd'")
    db.commit()
    db.close()
    with open_run(run_path, replay_logs=tmp_path / "logs") as run:
        assert run.replays() == []


def test_an_old_runs_in_file_replays_are_read_and_never_written(run_path: Path,
                                                                  tmp_path: Path) -> None:
    db = sqlite3.connect(run_path)
    db.execute("INSERT INTO replays (id, started_at_ns, ended_at_ns, mode, settings, exit_status,"
               " outcome) VALUES ('rpl_old', 1, 2, 'strict', ?, 0, '{}')",
               (json.dumps(SETTINGS),))
    db.execute("INSERT INTO replay_requests VALUES ('rpl_old', 0, 'exact', 0, 1, x'504f5354',"
               " x'2f76312f78', 3, ?)", (json.dumps(DETAIL),))
    db.commit()
    db.close()
    logs = tmp_path / "logs"
    with open_run(run_path, replay_logs=logs) as run:
        old = verdict_of(run)
        assert old is not None and (old.replay_id, old.exact) == ("rpl_old", 1)
        # a verdict the file carries never counts for a replay of a given path
        assert verdict_of(run, source=run_path) is None
    before = sha(run_path)
    replay(run_path, logs, "rpl_000000000001", requests=0)
    assert sha(run_path) == before
    with open_run(run_path, replay_logs=logs) as run:
        # once the log has replays of the run, they are its replays
        assert [r["id"] for r in run.replays()] == ["rpl_000000000001"]


def test_a_folder_that_cannot_be_written_keeps_the_log_in_memory(run_path: Path,
                                                                  tmp_path: Path) -> None:
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the folder of replay logs would go\n")
    with open_run(run_path, replay_logs=blocked / "logs") as run:
        run.prepare_for_writes()
        [note] = run.replay_log_notes()
        assert "not kept" in note and "WIRETAPE_HOME" in note
        run.start_replay("rpl_000000000001", "strict", SETTINGS)  # type: ignore[arg-type]
        run.add_replay_request("rpl_000000000001", 0, "exact", 0, True, b"POST", b"/v1/x",
                               DETAIL)  # type: ignore[arg-type]
        run.finish_replay("rpl_000000000001", 0, b"", b"", {})
        verdict = verdict_of(run, "rpl_000000000001")
        assert verdict is not None and verdict.exact == 1
    assert blocked.read_text().startswith("a file")


def test_a_replay_log_with_a_trigger_is_refused(run_path: Path, tmp_path: Path) -> None:
    replay(run_path, tmp_path / "logs", "rpl_000000000001")
    log = tmp_path / "logs" / "run_0123456789ab.replays"
    db = sqlite3.connect(log)
    db.execute("CREATE TRIGGER t AFTER INSERT ON replay_requests BEGIN "
               "UPDATE replay_requests SET kind = 'exact'; END")
    db.commit()
    db.close()
    with open_run(run_path, replay_logs=tmp_path / "logs") as run, \
            pytest.raises(RunFileError, match="trigger 't'"):
        run.replays()
    with open_run(run_path, replay_logs=tmp_path / "logs") as run:
        run.prepare_for_writes()  # the log cannot be used: the replay keeps its own in memory
        assert run.replay_log_notes()


def test_the_log_is_named_by_the_run_id_only_when_it_is_one_wiretape_makes() -> None:
    folder = replay_logs_dir()
    assert replay_log_path("run_0123456789ab", "ab" * 32) == folder / "run_0123456789ab.replays"
    assert replay_log_path("../../etc/x", "ab" * 32).name == "run_" + "ab" * 8 + ".replays"
    assert replay_log_path(7, "cd" * 32).parent == folder


def test_the_folder_of_replay_logs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WIRETAPE_HOME", str(tmp_path / "home"))
    assert replay_logs_dir() == tmp_path / "home" / "replays"
    monkeypatch.delenv("WIRETAPE_HOME")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert replay_logs_dir() == tmp_path / "state" / "wiretape" / "replays"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert replay_logs_dir() == tmp_path / "user" / ".local" / "state" / "wiretape" / "replays"
