"""The suite runner's pure parts: which waiting run starts next, which files
are runs, and the JUnit XML they become."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from wiretape.errors import UsageError
from wiretape.playback.verdict import compute
from wiretape.suite.discover import find_runs
from wiretape.suite.junit import junit_xml
from wiretape.suite.runner import CheckResult, Status
from wiretape.suite.schedule import pick


@pytest.mark.parametrize(("waiting", "busy", "expected"), [
    ([], set(), None),
    ([{8089}], set(), 0),
    ([{8089}], {8089}, None),                       # same recorded port: wait
    ([{8089}, {41000, 41001}], {8089}, 1),          # a later run on other ports goes first
    ([{8089, 9000}, {9000}], {9000}, None),         # any shared port is enough to wait
    ([set(), {8089}], {8089}, 0),                   # free ports: never waits
    ([{1}, {2}, {3}], {1, 2}, 2),
])
def test_pick(waiting: list[set[int]], busy: set[int], expected: int | None) -> None:
    assert pick(waiting, busy) == expected


def test_find_runs_takes_files_as_given_and_folders_recursively(tmp_path: Path) -> None:
    for name in ("b.wtape", "a.wtape", "sub/c.wtape", "sub/notes.txt", ".hidden/d.wtape",
                 "other/e.wtape"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / "named.run").write_text("")
    found = find_runs([tmp_path / "named.run", tmp_path, tmp_path / "a.wtape",
                       tmp_path / ".hidden"])
    assert [p.relative_to(tmp_path).as_posix() for p in found] == [
        "named.run", "a.wtape", "b.wtape", "other/e.wtape", "sub/c.wtape",  # each once
        ".hidden/d.wtape"]                                 # a hidden folder only when named
    with pytest.raises(UsageError, match="nope: no such file or folder"):
        find_runs([tmp_path / "a.wtape", "nope"])


def test_junit_xml_counts_and_escapes() -> None:
    passed = compute(run_id="run_1", replay_id="rpl_1", mode="strict", complete=True,
                     recorded_seqs=[0], rows=[{"kind": "exact", "seq": 0}])
    failed = compute(run_id="run_2", replay_id="rpl_2", mode="strict", complete=True,
                     recorded_seqs=[0, 1], rows=[{"kind": "diverged", "seq": 0}])
    results = [
        CheckResult(Path("a.wtape"), Status.PASS, passed, duration_s=1.25),
        CheckResult(Path("b.wtape"), Status.FAIL, failed, duration_s=2.5),
        CheckResult(Path("c.wtape"), Status.ERROR, error="bad \x1b[31m file <x>"),
    ]
    document = junit_xml(
        results, duration_s=4.0, name_of=lambda r: str(r.path),
        describe=lambda r: (f"{r.status} message", "line one\nline \x00two"))
    root = ET.fromstring(document)
    suite = root.find("testsuite")
    assert suite is not None
    assert dict(suite.attrib) == {"name": "wiretape check", "tests": "3", "failures": "1",
                                  "errors": "1", "skipped": "0", "time": "4.000"}
    cases = list(suite)
    assert [(c.get("name"), c.get("time")) for c in cases] == [
        ("a.wtape", "1.250"), ("b.wtape", "2.500"), ("c.wtape", "0.000")]
    assert list(cases[0]) == []
    failure, error = cases[1][0], cases[2][0]
    assert (failure.tag, failure.get("message"), failure.text) == (
        "failure", "fail message", "line one\nline ?two")  # no control characters in XML
    assert (error.tag, error.get("type")) == ("error", "replay")
