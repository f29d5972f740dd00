"""Snapshots: reading a tree, comparing it after the agent ran, and
restoring untrusted entries only inside the sandbox."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from wiretape.errors import RunFileError, UsageError
from wiretape.launch.sandbox import files_facet
from wiretape.snapshot.restore import check_entries, check_roots, restore, system_folder
from wiretape.snapshot.tree import (
    DEFAULT_POLICY,
    LEGACY,
    ChangeJSON,
    ChangeKind,
    Entry,
    LeftOut,
    SnapshotPolicy,
    compare,
    summary,
    walk,
)


def tree(root: Path) -> dict[str, Entry]:
    return {e.path: e for e in walk(root)}


def test_walk_reads_files_dirs_links_and_skips_excluded(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hi")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b.bin").write_bytes(b"\x00\x01")
    os.symlink("../a.txt", tmp_path / "d" / "link")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "big").write_bytes(b"x" * 100)
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "run.wtape").write_bytes(b"run")
    found = {e.path: e for e in walk(tmp_path, exclude=frozenset({tmp_path / "store"}))}
    assert sorted(found) == ["a.txt", "d", "d/b.bin", "d/link"]
    assert found["d/link"].kind == "symlink" and found["d/link"].link == "../a.txt"
    assert found["d/b.bin"].data == b"\x00\x01"


def test_walk_refuses_over_the_limit(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x" * 100)
    with pytest.raises(UsageError, match="--snapshot-max"):
        list(walk(tmp_path, max_bytes=50))


def test_compare_names_added_modified_deleted_with_text_diffs(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("same\n")
    (tmp_path / "edit.txt").write_text("one\n")
    (tmp_path / "gone.bin").write_bytes(b"\x00bin")
    before = tree(tmp_path)
    (tmp_path / "edit.txt").write_text("one\ntwo\n")
    (tmp_path / "gone.bin").unlink()
    (tmp_path / "new.txt").write_text("new\n")
    changes = {c.path: c for c in compare(before, tree(tmp_path))}
    assert {p: c.change for p, c in changes.items()} == {
        "edit.txt": "modified", "gone.bin": "deleted", "new.txt": "added"}
    assert "+two" in changes["edit.txt"].diff
    assert changes["gone.bin"].binary and changes["gone.bin"].before_size == 4


def test_restore_round_trips_a_tree(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f.txt").write_text("content")
    os.chmod(src / "d" / "f.txt", 0o640)
    os.symlink("d/f.txt", src / "link")
    restore(walk(src), tmp_path / "out", source=tmp_path / "run.wtape")
    assert tree(tmp_path / "out") == tree(src)


@pytest.mark.parametrize("bad", ["../escape.txt", "/etc/passwd-wiretape", "d/../../x", ""])
def test_restore_refuses_paths_leaving_the_sandbox(tmp_path: Path, bad: str) -> None:
    with pytest.raises(RunFileError, match="unsafe path"):
        restore([Entry(bad, "file", 0o644, b"x")], tmp_path / "box", source=tmp_path / "r.wtape")
    assert not (tmp_path / "escape.txt").exists()


def test_restore_never_writes_through_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    entries = [Entry("evil", "symlink", 0o777, link=str(outside)),
               Entry("evil/planted.txt", "file", 0o644, b"x")]
    with pytest.raises(RunFileError):
        restore(entries, tmp_path / "box", source=tmp_path / "r.wtape")
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("link", ["/etc/passwd", "../../outside", "../d/../../x", "../..", ""])
def test_restore_refuses_links_leading_out_of_the_tree(tmp_path: Path, link: str) -> None:
    with pytest.raises(RunFileError, match="link that leads outside its tree"):
        restore([Entry("d/link", "symlink", 0o777, link=link)], tmp_path / "box",
                source=tmp_path / "r.wtape")
    assert not (tmp_path / "box" / "d" / "link").is_symlink()


def test_restore_keeps_links_inside_the_tree(tmp_path: Path) -> None:
    entries = [Entry("d/f.txt", "file", 0o644, b"x"),
               Entry("d/up", "symlink", 0o777, link="../top"),
               Entry("d/same", "symlink", 0o777, link="./f.txt")]
    restore(entries, tmp_path / "box", source=tmp_path / "r.wtape")
    assert os.readlink(tmp_path / "box" / "d" / "up") == "../top"
    assert (tmp_path / "box" / "d" / "same").read_bytes() == b"x"


def links(*pairs: str) -> list[Entry]:
    """Entries from ``"path -> target"`` (a link) and ``"path/"`` (a folder)."""
    out = []
    for pair in pairs:
        if pair.endswith("/"):
            out.append(Entry(pair.rstrip("/"), "dir", 0o755))
        else:
            path, _, target = pair.partition(" -> ")
            out.append(Entry(path, "symlink", 0o777, link=target))
    return out


@pytest.mark.parametrize("entries", [
    ("sub/", "sub/q -> ..", "sub/p -> q/../.."),  # each alone stays inside
    ("d/", "d/l -> ..", "x -> d/l/.."),
    ("a/", "a/b/", "a/b/up -> ../..", "a/far -> b/up/a/b/up/.."),
    ("d/", "d/l -> ../d/m", "d/m -> n/..", "d/x -> l/../.."),
])
def test_links_that_escape_only_through_each_other_are_refused(
        tmp_path: Path, entries: tuple[str, ...]) -> None:
    with pytest.raises(RunFileError, match="link that leads outside its tree"):
        check_entries(links(*entries), tmp_path / "r.wtape")
    with pytest.raises(RunFileError, match="link that leads outside its tree"):
        restore(links(*entries), tmp_path / "box", source=tmp_path / "r.wtape")
    assert not (tmp_path / "box").exists()


@pytest.mark.parametrize("entries", [
    ("d/", "d/up -> ..", "x -> d/up/d/up"),
    ("d/", "d/e/", "d/e/l -> ../../d", "x -> d/e/l/.."),
    ("a -> b", "b -> a"),  # a loop: the kernel resolves it to nothing
    ("d/", "d/dangling -> ../nowhere/../d"),
])
def test_links_that_stay_inside_through_each_other_are_kept(
        tmp_path: Path, entries: tuple[str, ...]) -> None:
    check_entries(links(*entries), tmp_path / "r.wtape")
    restore(links(*entries), tmp_path / "box", source=tmp_path / "r.wtape")


@pytest.mark.parametrize("root", ["/home/me/project", "/tmp/x", "/var/tmp", "/var/tmp/x",
                                  "/root/.nanobot", "/usrlocal", "/opt/agent", "/srv/x"])
def test_a_root_of_a_users_tree_is_no_system_folder(tmp_path: Path, root: str) -> None:
    check_roots([root], tmp_path / "r.wtape")
    assert not system_folder(root)


@pytest.mark.parametrize("root", ["/usr/local/bin", "/usr", "/etc", "/var", "/var/lib/docker",
                                  "/lib64", "/proc/self", "/bin", "/sys/fs", "/run/user/0"])
def test_a_system_folder_is_one_for_a_same_paths_replay(tmp_path: Path, root: str) -> None:
    check_roots([root], tmp_path / "r.wtape")  # a mapped replay may restore it elsewhere
    assert system_folder(root)


@pytest.mark.parametrize(("roots", "said"), [
    (["/"], "is the root folder"),
    (["/home/me/p", "/home/me/q", "/home/me/p"], "names the snapshot root '/home/me/p' twice"),
    (["/home/me/../../etc"], "not an absolute, normalised path"),
    (["relative"], "not an absolute, normalised path"),
])
def test_a_root_that_is_no_place_for_a_snapshot_is_refused(
        tmp_path: Path, roots: list[str], said: str) -> None:
    with pytest.raises(RunFileError, match=said) as caught:
        check_roots(roots, tmp_path / "r.wtape")
    assert str(tmp_path / "r.wtape") in str(caught.value)
    assert "record the run again, or ask its author for the original" in str(caught.value)


@pytest.mark.parametrize(("mode", "applied"), [(0o4755, 0o755), (0o2750, 0o750), (0o1777, 0o777),
                                               ((1 << 40) | 0o640, 0o640)])
def test_restore_applies_permission_bits_only(tmp_path: Path, mode: int, applied: int) -> None:
    restore([Entry("f", "file", mode, b"x"), Entry("d", "dir", mode)], tmp_path / "box",
            source=tmp_path / "r.wtape")
    assert (tmp_path / "box" / "f").stat().st_mode & 0o7777 == applied
    assert (tmp_path / "box" / "d").stat().st_mode & 0o7777 == applied | 0o700


def test_files_facet_lists_each_difference_in_stored_member_order() -> None:
    def change(path: str, kind: ChangeKind, after: str | None, diff: str) -> ChangeJSON:
        return {"path": path, "change": kind, "before_hash": "b", "after_hash": after,
                "before_size": 1, "after_size": 2 if after else None, "binary": False,
                "diff": diff}

    recorded = {1: [change("a.txt", "modified", "h1", "-x\n+y\n"),
                    change("b.txt", "modified", "h2", "")]}
    replayed = {1: [change("a.txt", "modified", "h3", "-x\n+z\n"),
                    change("b.txt", "deleted", None, "")]}
    contents = {"h1": b"y\n", "h3": b"z\n"}
    facet = files_facet(recorded, replayed, lambda _s, _p, h: contents.get(h or ""),
                        lambda _s, _p, h: contents.get(h or ""))
    assert facet["same"] is False and facet["differing_count"] == 2
    known, deleted = facet["differing"]
    assert list(known) == ["path", "recorded", "replayed", "real", "recorded_diff",
                           "replayed_diff"]
    assert known["recorded"] == "modified (2 bytes)" and known["replayed_diff"] == "-x\n+z\n"
    assert list(deleted) == ["path", "recorded", "replayed", "recorded_diff", "replayed_diff"]
    assert deleted["replayed"] == "deleted"


# -- what a snapshot leaves out ------------------------------------------------------------------


def _project(root: Path) -> None:
    (root / ".git" / "objects").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n")
    (root / ".env").write_text("KEY=value1234\n")
    (root / ".env.local").write_text("KEY=value1234\n")
    (root / "sub" / ".ssh").mkdir(parents=True)
    (root / "sub" / ".ssh" / "config").write_text("Host x\n")
    (root / "sub" / "id_rsa").write_text("key")
    (root / "sub" / "server.pem").write_text("pem")
    (root / ".docker").mkdir()
    (root / ".docker" / "config.json").write_text("{}")
    (root / "credentials-prod.json").write_text("{}")
    (root / "old.wtape").write_bytes(b"SQLite format 3\x00")
    (root / "deploy.txt").write_text("-----BEGIN RSA PRIVATE KEY-----\nabc\n"
                                     "-----END RSA PRIVATE KEY-----\n")
    (root / "image.png").write_bytes(b"\x89PNG\x00\x01\x02")
    (root / "main.py").write_text("print('hi')\n")
    (root / "README.md").write_text("# readme\n")


def test_the_default_snapshot_leaves_out_secrets_git_run_files_and_binaries(
        tmp_path: Path) -> None:
    _project(tmp_path)
    left: list[LeftOut] = []
    found = {e.path: e for e in walk(tmp_path, policy=DEFAULT_POLICY, left_out=left)}
    kept = sorted(p for p, e in found.items() if not e.left_out)
    # Folders left out keep their place, empty.
    assert kept == [".docker", ".git", "README.md", "main.py", "sub", "sub/.ssh"]
    assert found[".git"].kind == found["sub/.ssh"].kind == "dir"
    reasons = {item.path: item.reason for item in left}
    assert reasons == {
        ".git/": "repository", ".env": "secrets", ".env.local": "secrets",
        ".docker/config.json": "secrets", "credentials-prod.json": "secrets",
        "old.wtape": "run file", "deploy.txt": "private key", "image.png": "binary",
        "sub/.ssh/": "secrets", "sub/id_rsa": "private key", "sub/server.pem": "private key"}
    # A binary file is still hashed: the outcome sees the agent change it.
    png = found["image.png"]
    assert png.left_out == "binary" and png.data == b"" and png.nbytes == 7
    assert png.digest == hashlib.sha256(b"\x89PNG\x00\x01\x02").hexdigest()
    assert "11 path(s)" in summary(left) and "and 7 more" in summary(left)


def test_include_patterns_and_binary_take_what_would_be_left_out(tmp_path: Path) -> None:
    _project(tmp_path)
    policy = SnapshotPolicy(include=(".env.local", ".git", "sub/*.pem"), binary=True)
    left: list[LeftOut] = []
    found = {e.path: e for e in walk(tmp_path, policy=policy, left_out=left)}
    assert {".env.local", ".git", ".git/config", "sub/server.pem"} <= set(found)
    assert found["image.png"].data == b"\x89PNG\x00\x01\x02"
    assert ".env" in {item.path for item in left}
    assert SnapshotPolicy.from_json(policy.to_json()) == policy
    assert SnapshotPolicy.from_json(None) == LEGACY
    # Runs recorded before policies: everything as it was.
    assert {e.path for e in walk(tmp_path)} >= {".env", ".git/config", "image.png", "old.wtape"}


def test_left_out_paths_are_never_changes(tmp_path: Path) -> None:
    _project(tmp_path)
    before = {e.path: e for e in walk(tmp_path, policy=DEFAULT_POLICY)}
    (tmp_path / ".env").unlink()
    (tmp_path / ".env.new").write_text("x")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\x00changed")
    (tmp_path / "new.bin").write_bytes(b"\x00\x01")
    after = {e.path: e for e in walk(tmp_path, policy=DEFAULT_POLICY)}
    changes = {c.path: c for c in compare(before, after)}
    assert sorted(changes) == ["image.png", "new.bin"]
    assert changes["image.png"].change == "modified" and changes["image.png"].binary
    assert changes["new.bin"].after_size == 2 and changes["new.bin"].diff == ""
    # In a sandbox restored without the binary file, it is not "deleted".
    restored = {p: e for p, e in before.items() if not e.left_out}
    sandbox = {p: e for p, e in after.items() if p != "image.png"}
    assert {c.path: c.change for c in compare(restored, sandbox)} == {"new.bin": "added"}


def test_a_copy_shown_over_a_folder_on_path_is_found_but_a_tool_folder_is_not() -> None:
    from wiretape.launch.sandbox import Copy, shadowed

    copies = [Copy(1, Path("/home/me/project"), Path("/tmp/box/0-project"), ())]
    path = os.pathsep.join(["/home/me/project/.venv/bin", "/usr/bin", "relative/bin",
                            "/home/me/project/bin", "/home/me/project/./scripts/",
                            "/home/me/projects/bin"])
    assert shadowed(copies, path) == [(Path("/home/me/project"), "/home/me/project/bin"),
                                      (Path("/home/me/project"), "/home/me/project/./scripts/")]
