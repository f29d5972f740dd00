"""How a real difference in the agent's output is shown: a JSON member
added or removed with its value and ``(absent)`` on the other side, a
changed text as whole words (never cut inside the shared suffix)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from wiretape.matching.volatile import ABSENT, compare_volatile


@pytest.mark.parametrize(("recorded", "replayed", "real"), [
    (b'{"a": 1}', b'{"a": 1, "error": "boom"}', ("/error", ABSENT, "boom")),
    (b'{"a": 1, "method": "GET"}', b'{"a": 1}', ("/method", "GET", ABSENT)),
    (b'{"a": 1}', b'{"a": 1, "usage": {"n": 2}}', ("/usage", ABSENT, "{...}")),
    (b"hello [rc=0]\n", b" [rc=7]\n", ("line 1", "hello [rc=0]", " [rc=7]")),
    (b"the answer is yes, friend\n", b"the answer is no, friend\n", ("line 1", "yes,", "no,")),
    (b"12 files\n", b"13 files\n", ("line 1", "12", "13")),
])
def test_real_differences_show_both_sides(recorded: bytes, replayed: bytes,
                                          real: tuple[str, str, str]) -> None:
    assert compare_volatile(recorded, replayed).real == (real,)


def replay_stderr(tmp_path: Path, recorded: str, replayed: str) -> str:
    """What a replay prints when the run recorded ``echo RECORDED`` and the
    replay runs ``echo REPLAYED``."""
    run = tmp_path / "out.wtape"
    rec = subprocess.run([sys.executable, "-m", "wiretape", "record", "-o", str(run),
                          "--no-snapshot", "--", "echo", recorded],
                         cwd=tmp_path, capture_output=True, timeout=120)
    assert rec.returncode == 0, rec.stderr
    rep = subprocess.run([sys.executable, "-m", "wiretape", "replay", str(run), "--",
                          "echo", replayed], cwd=tmp_path, capture_output=True, timeout=120)
    return rep.stderr.decode()


def test_the_replay_summary_shows_the_whole_changed_line(tmp_path: Path) -> None:
    stderr = replay_stderr(tmp_path, "hello [rc=0]", " [rc=7]")
    assert "  at line 1: 'hello [rc=0]' -> ' [rc=7]'" in stderr, stderr


def test_the_replay_summary_shows_an_added_member_with_its_value(tmp_path: Path) -> None:
    stderr = replay_stderr(tmp_path, '{"a": 1}', '{"a": 1, "error": "boom"}')
    assert "  at /error: (absent) -> 'boom'" in stderr, stderr
