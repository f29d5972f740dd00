"""A request body that is the previous one with new bytes spliced in is
stored as a splice (codec ``splice``): the bytes of the previous body's
start and end it keeps, then only the new bytes (DESIGN.md, "The run
file"). Round trips of every shape, the chain cap, the choice between a
splice and a dictionary, and rows that lie about themselves, read back as
one BlobError each.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import sqlite3
import struct
from collections.abc import Iterator

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from wiretape import commonbytes
from wiretape.store import blobs, schema

HEADER = struct.Struct(">4sBQQ")


@pytest.fixture
def db() -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    schema.create(conn)
    yield conn
    conn.close()


def row(db: sqlite3.Connection, digest: str) -> tuple[str, str | None, int, bytes]:
    codec, ref, depth, data = db.execute(
        "SELECT codec, ref, depth, data FROM blobs WHERE hash = ?", (digest,)).fetchone()
    return codec, ref, depth, data


def turns(n: int, seed: int = 1) -> list[bytes]:
    """Request bodies of a chat resent whole each turn, the tool list after
    the messages (as OpenAI's clients send it)."""
    rng = random.Random(seed)
    messages: list[dict[str, str]] = [{"role": "system", "content": "be brief " * 2000}]
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "d" * 300}}
             for i in range(8)]
    out = []
    for t in range(n):
        text = " ".join(rng.choice(["alpha", "beta", "gamma", "delta", str(t)])
                        for _ in range(400))
        messages.append({"role": "user" if t % 2 else "tool", "content": text})
        out.append(json.dumps({"messages": messages, "model": "m", "tools": tools}).encode())
    return out


# --- finding the common start and end ---------------------------------------------------------


@pytest.mark.parametrize("length", [0, 1, 4095, 4096, 4097, 12_288 + 5, 100_000])
def test_common_prefix_and_suffix_find_the_first_difference(length: int) -> None:
    base = os.urandom(length + 300)
    for at in sorted({0, length // 2, length}):
        changed = bytearray(base)
        changed[at] ^= 0xFF
        assert commonbytes.common_prefix(base, bytes(changed)) == at
        end = len(base) - 1 - at
        changed = bytearray(base)
        changed[end] ^= 0xFF
        assert commonbytes.common_suffix(base, bytes(changed)) == at
    assert commonbytes.common_prefix(base, base) == commonbytes.common_suffix(
        base, base) == len(base)
    assert commonbytes.common_prefix(base, base[:length]) == length  # one ends first
    assert commonbytes.common_suffix(base, base[300:]) == length
    assert commonbytes.common_prefix(base, base, limit=7) == min(7, len(base))
    # within ranges: a[a0:] against b[b0:], and a[:a1] against b[:b1]
    other = bytes(x ^ 0xFF for x in base[95:100]) + base[100:] + os.urandom(5)
    assert commonbytes.common_prefix(base, other, 100, 5) == len(base) - 100
    assert commonbytes.common_suffix(base, other, len(base), len(other) - 5) == len(base) - 100


# --- round trips --------------------------------------------------------------------------------


def spliced(db: sqlite3.Connection, ref: bytes, body: bytes) -> tuple[str, str | None, int, bytes]:
    """``body`` stored against ``ref``; asserts it reads back, returns its row."""
    first = blobs.put(db, ref)
    digest = blobs.put(db, body, ref=first)
    assert blobs.get(db, digest) == body
    assert blobs.get(db, digest, {}) == body
    return row(db, digest)


WORDS = ["alpha", "beta", "gamma", "delta", "tests", "fail", "in", "src/pkg", "fixed", "the"]
_rng = random.Random(5)
REF = (b'{"messages":['
       + b"".join(b'{"role":"user","content":"%s"},' % " ".join(
           _rng.choice(WORDS) for _ in range(12)).encode() for _ in range(200))
       + b'],"tools":[' + b"".join(b'{"name":"tool_%d"},' % i for i in range(100)) + b"]}")


@pytest.mark.parametrize(("body", "prefix", "suffix"), [
    # new bytes spliced in before the tool list: a common start and end
    (REF[:8013] + b'{"role":"tool","content":"found"},' + REF[8013:], 8013, len(REF) - 8013),
    (REF + b'{"extra":1}', len(REF), 0),  # appended: a common start only
    (b'{"model":"m2",' + REF[1:], 0, len(REF) - 1),  # a common end only
    (REF[:5000] + REF[5040:], 5000, len(REF) - 5040),  # bytes cut: no new bytes at all
    (REF[:-700], len(REF) - 700, 0),  # shorter than its reference
])
def test_a_body_spliced_from_its_reference_reads_back(db: sqlite3.Connection, body: bytes,
                                                      prefix: int, suffix: int) -> None:
    codec, ref, depth, data = spliced(db, REF, body)
    assert (codec, ref, depth) == ("splice", blobs.blob_hash(REF), 1)
    magic, how, kept_start, kept_end = HEADER.unpack_from(data)
    # at least the start and end the edit left (a few bytes more may match by chance)
    assert magic == b"WTS1" and kept_start >= prefix and kept_start + kept_end >= prefix + suffix
    new = len(body) - kept_start - kept_end
    assert len(data) <= HEADER.size + new
    if new < blobs.MIN_COMPRESS:
        assert how == 0 and data[HEADER.size:] == body[kept_start:len(body) - kept_end]


def test_the_new_bytes_are_compressed_only_when_that_is_smaller(db: sqlite3.Connection) -> None:
    text = REF[:6000] + b'{"role":"tool","content":"' + b"ok " * 400 + b'"},' + REF[6000:]
    noise = REF[:6000] + os.urandom(900) + REF[6000:]
    assert HEADER.unpack_from(spliced(db, REF, text)[3])[1] == 1  # zstd
    codec, _, _, data = spliced(db, REF, noise)
    _, how, prefix, suffix = HEADER.unpack_from(data)
    assert codec == "splice" and how == 0  # raw
    assert data[HEADER.size:] == noise[prefix:len(noise) - suffix]
    assert len(data) - HEADER.size >= 900 - 2  # (a byte may match by chance at either end)


def test_binary_bodies_splice_too(db: sqlite3.Connection) -> None:
    ref = os.urandom(50_000)
    new = bytearray(bytes(range(256)) * 4)
    new[0], new[-1] = ref[20_000] ^ 1, ref[19_999] ^ 1  # differs from what it stands beside
    body = ref[:20_000] + bytes(new) + ref[20_000:]
    codec, _, _, data = spliced(db, ref, body)
    assert codec == "splice" and HEADER.unpack_from(data)[2:] == (20_000, 30_000)


def test_an_identical_body_is_stored_once_never_against_itself(db: sqlite3.Connection) -> None:
    first = blobs.put(db, REF)
    assert blobs.put(db, REF, ref=first) == first
    assert row(db, first)[:3] == ("zstd", None, 0)
    packer = blobs.Packer()
    assert packer.pack(REF, blobs.Reference(first, REF, 0))[:3] == ("zstd", None, 0)
    packer.prepare(first, REF, 0)
    assert packer.pack_ahead(REF, first) is None


def test_a_body_mostly_new_is_compressed_against_the_reference_instead(
        db: sqlite3.Connection) -> None:
    """A conversation compacted (its messages reordered): no long common
    start or end, but the reference's bytes are all there."""
    body = REF[5000:] + REF[:5000]
    codec, ref, depth, _ = spliced(db, REF, body)
    assert (codec, ref, depth) == ("zstd-ref", blobs.blob_hash(REF), 1)
    other = os.urandom(len(REF))  # nothing in common: zstd alone
    assert spliced(db, REF, other)[:3] == ("zstd", None, 0)


def test_the_threshold_is_a_quarter_of_the_body(db: sqlite3.Connection) -> None:
    ref = os.urandom(30_000)
    at_quarter = ref[:15_000] + os.urandom(10_000) + ref[15_000:]  # 10000 of 40000 new
    past_quarter = ref[:15_000] + os.urandom(10_100) + ref[15_000:]
    assert spliced(db, ref, at_quarter)[0] == "splice"
    assert spliced(db, ref, past_quarter)[0] == "zstd-ref"


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=3000), st.data())
def test_any_body_stored_against_any_reference_reads_back(ref: bytes, data: st.DataObject) -> None:
    """get(put(x)) == x for a reference and random edits of it: cuts,
    insertions, replacements, anywhere."""
    body = bytearray(ref)
    for _ in range(data.draw(st.integers(0, 4))):
        at = data.draw(st.integers(0, len(body)))
        cut = data.draw(st.integers(0, len(body) - at))
        body[at:at + cut] = data.draw(st.binary(max_size=200))
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        schema.create(conn)
        first = blobs.put(conn, ref)
        digest = blobs.put(conn, bytes(body), ref=first)
        assert blobs.get(conn, digest) == bytes(body)
        packer = blobs.Packer(blobs.FAST_LEVEL)
        packer.prepare(first, ref, 0)
        ahead = packer.pack_ahead(bytes(body), digest)
        if ahead is not None and digest != first:
            conn.execute("DELETE FROM blobs WHERE hash = ?", (digest,))
            assert blobs.put_packed(conn, ahead)
            assert blobs.get(conn, digest) == bytes(body)
    finally:
        conn.close()


# --- chains -------------------------------------------------------------------------------------


def test_a_chain_of_splices_stops_at_the_cap_and_starts_again(db: sqlite3.Connection) -> None:
    bodies = turns(blobs.MAX_REF_DEPTH + 4)
    ref = None
    for body in bodies:
        ref = blobs.put(db, body, ref=ref)
    rows = [row(db, blobs.blob_hash(b)) for b in bodies]
    assert [r[2] for r in rows] == [*range(blobs.MAX_REF_DEPTH + 1), 0, 1, 2]
    assert {r[0] for r in rows[1:blobs.MAX_REF_DEPTH + 1]} == {"splice"}
    assert rows[blobs.MAX_REF_DEPTH + 1][:2] == ("zstd", None)  # a new chain
    assert all(blobs.get(db, blobs.blob_hash(b)) == b for b in bodies)
    stored = sum(len(r[3]) for r in rows)
    assert stored < sum(map(len, bodies)) / 10  # each turn costs about its new bytes


def test_the_packer_splices_ahead_without_making_a_dictionary(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Preparing the next reference keeps its bytes; a dictionary is made
    only when a body is not a splice of them."""
    made: list[int] = []
    real = zstandard.ZstdCompressionDict

    def counting(data: bytes, **kwargs: object) -> zstandard.ZstdCompressionDict:
        made.append(len(data))
        return real(data, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(zstandard, "ZstdCompressionDict", counting)
    bodies = turns(6)
    packer = blobs.Packer(blobs.FAST_LEVEL)
    for depth, (before, body) in enumerate(itertools.pairwise(bodies)):
        packer.prepare(blobs.blob_hash(before), before, depth)
        packed = packer.pack_ahead(body, blobs.blob_hash(body))
        assert packed is not None and (packed.codec, packed.depth) == ("splice", depth + 1)
    assert made == []
    reordered = bodies[5][3000:] + bodies[5][:3000]
    packed = packer.pack_ahead(reordered, blobs.blob_hash(reordered))
    assert packed is not None and (packed.codec, packed.ref) == (
        "zstd-ref", blobs.blob_hash(bodies[5]))  # the body packed ahead before it
    assert made == [len(bodies[5])]


def test_a_body_is_packed_ahead_against_the_one_packed_before_it(
        db: sqlite3.Connection) -> None:
    """The next body may come before the one before it is committed (and
    made the reference): it is packed against that one as packed, and
    stored so only if that one was committed as packed. A chain at its cap
    restarts once, not for every body until the reference catches up."""
    bodies = turns(4)
    digests = [blobs.blob_hash(b) for b in bodies]
    packer = blobs.Packer(blobs.FAST_LEVEL)
    packer.prepare(digests[0], bodies[0], blobs.MAX_REF_DEPTH)  # its chain is full
    assert blobs.put(db, bodies[0]) == digests[0]
    db.execute("UPDATE blobs SET depth = ? WHERE hash = ?", (blobs.MAX_REF_DEPTH, digests[0]))
    restart = packer.pack_ahead(bodies[1], digests[1])
    assert restart is not None and (restart.codec, restart.ref, restart.depth) == (
        "zstd", None, 0)
    after = packer.pack_ahead(bodies[2], digests[2])  # nothing prepared since
    assert after is not None and (after.codec, after.ref, after.depth) == (
        "splice", digests[1], 1)
    assert not blobs.put_packed(db, after)  # its reference is not committed yet
    assert blobs.put_packed(db, restart) and blobs.put_packed(db, after)
    assert blobs.get(db, digests[2]) == bodies[2]
    # A body not packed ahead (committed raw, its depth known later): the
    # next one goes back to the body last prepared.
    assert packer.pack_ahead(b"x" * 100 + os.urandom(2000), "f" * 64) is None
    packer.prepare(digests[2], bodies[2], 1)
    last = packer.pack_ahead(bodies[3], digests[3])
    assert last is not None and (last.codec, last.ref, last.depth) == ("splice", digests[2], 2)


# --- rows that lie ------------------------------------------------------------------------------


@pytest.fixture
def lying(db: sqlite3.Connection) -> tuple[sqlite3.Connection, str, str, bytes]:
    """(db, the reference's hash, a splice's hash, its body)."""
    body = REF[:8013] + b'{"role":"tool","content":"found it"},' + REF[8013:]
    first = blobs.put(db, REF)
    digest = blobs.put(db, body, ref=first)
    assert row(db, digest)[0] == "splice"
    return db, first, digest, body


def set_row(db: sqlite3.Connection, digest: str, **values: object) -> None:
    for column, value in values.items():
        db.execute(f"UPDATE blobs SET {column} = ? WHERE hash = ?", (value, digest))


def refused(db: sqlite3.Connection, digest: str, said: str) -> None:
    with pytest.raises(blobs.BlobError) as err:
        blobs.get(db, digest)
    assert said in str(err.value) and "\n" not in str(err.value)


def header(how: int, prefix: int, suffix: int) -> bytes:
    return HEADER.pack(b"WTS1", how, prefix, suffix)


BOMB = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(8 * 1024 * 1024))

#: (what the row's payload and size become, what the error says), from the
#: stored splice's kept start ``p`` and end ``s`` and its new bytes' length ``n``
LIES = {
    "short header": lambda p, s, n: (b"WTS", None, "stored as a splice but its header is "
                                                   "malformed"),
    "no magic": lambda p, s, n: (b"XXXX" + bytes(17), None, "its header is malformed"),
    "unknown way": lambda p, s, n: (header(7, p, s), None, "stored in an unknown way (7)"),
    "keeps more than it is": lambda p, s, n: (
        header(0, 2 ** 63, 2 ** 63), None, "bytes but keeps 9223372036854775808 + "),
    "keeps more than its size": lambda p, s, n: (
        header(0, len(REF) - 10, 0), 100, "says it is 100 bytes but keeps"),
    "keeps more than the reference has": lambda p, s, n: (
        header(0, len(REF), 1) + b"x" * 9, len(REF) + 10,
        f"keeps {len(REF)} + 1 bytes of the body {blobs.blob_hash(REF)[:12]} it is spliced "
        f"from, which has {len(REF)}"),
    "new bytes short": lambda p, s, n: (
        header(0, p, s) + b"x" * 5, None, f"says its new bytes are {n} but 5 are stored"),
    "new bytes not zstd": lambda p, s, n: (
        header(1, p, s) + b"not zstd", None, "(its new bytes) is not zstd data"),
    "a bomb for new bytes": lambda p, s, n: (
        header(1, p, s) + BOMB, None,
        f"(its new bytes) says it is {n} bytes but decompresses to more"),
    "other new bytes": lambda p, s, n: (
        header(0, p, s) + b"y" * n, None, "does not have the hash it is stored under"),
}


@pytest.mark.parametrize("lie", sorted(LIES))
def test_a_splice_that_lies_is_one_blob_error(
        lying: tuple[sqlite3.Connection, str, str, bytes], lie: str) -> None:
    db, _, digest, body = lying
    _, _, prefix, suffix = HEADER.unpack_from(row(db, digest)[3])
    payload, size, said = LIES[lie](prefix, suffix, len(body) - prefix - suffix)
    set_row(db, digest, data=payload, **({"size": size} if size is not None else {}))
    refused(db, digest, said)


def test_a_splice_from_a_body_not_held_is_refused(
        lying: tuple[sqlite3.Connection, str, str, bytes]) -> None:
    db, _, digest, _ = lying
    set_row(db, digest, ref="0" * 64)
    refused(db, digest, "stored against the body 000000000000, which the file does not hold")
    set_row(db, digest, ref=None)
    refused(db, digest, "names no body it is stored against")


def test_a_splice_chain_that_loops_or_runs_past_the_cap_is_refused(
        lying: tuple[sqlite3.Connection, str, str, bytes]) -> None:
    db, first, digest, _ = lying
    set_row(db, digest, ref=digest)
    refused(db, digest, "compressed against itself")
    # two bodies spliced from each other
    set_row(db, digest, ref=first)
    set_row(db, first, codec="splice", ref=digest, depth=2,
            data=header(0, 0, 0) + REF)
    refused(db, digest, "compressed against itself")
    # a chain longer than the cap, whatever depths the rows claim
    bodies = turns(blobs.MAX_REF_DEPTH + 3, seed=7)
    packer = blobs.Packer()
    before = None
    for body in bodies:
        codec, ref, _, payload = packer.pack(body, before and blobs.Reference(
            blobs.blob_hash(before), before, 0))
        db.execute("INSERT INTO blobs (hash, size, codec, ref, depth, data) VALUES (?,?,?,?,0,?)",
                   (blobs.blob_hash(body), len(body), codec, ref, payload))
        before = body
    refused(db, blobs.blob_hash(bodies[-1]), f"a chain of more than {blobs.MAX_REF_DEPTH}")
    assert blobs.get(db, blobs.blob_hash(bodies[blobs.MAX_REF_DEPTH])) == bodies[
        blobs.MAX_REF_DEPTH]


def test_a_splice_larger_than_the_limit_is_refused_unread(
        lying: tuple[sqlite3.Connection, str, str, bytes]) -> None:
    db, _, digest, _ = lying
    set_row(db, digest, size=blobs.MAX_BLOB_BYTES + 1, data=header(0, 0, 0) + b"x" * 37)
    refused(db, digest, "more than the 268435456 bytes wiretape reads back")
    with pytest.raises(blobs.BlobError, match="more than the 1000 bytes"):
        blobs.get(db, blobs.blob_hash(REF), limit=1000)


def test_a_moving_cache_breakpoint_still_splices(db: sqlite3.Connection) -> None:
    """Anthropic Messages bodies: the ``cache_control`` breakpoint moves from
    the previous last message to the new one each turn; the new bytes are
    the new message and the few bytes around the old breakpoint."""
    rng = random.Random(3)
    messages: list[dict[str, object]] = []
    last: dict[str, object] | None = None
    ref = None
    for turn in range(6):
        if last is not None:
            del last["cache_control"]
        text = " ".join(rng.choice(WORDS) for _ in range(500))
        last = {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}
        messages.append({"role": "user" if turn % 2 else "assistant", "content": [last]})
        body = json.dumps({"model": "claude", "max_tokens": 4096,
                           "system": [{"type": "text", "text": "be brief " * 3000}],
                           "messages": messages,
                           "tools": [{"name": f"t{i}", "input_schema": {"type": "object"}}
                                     for i in range(20)]}).encode()
        digest = blobs.put(db, body, ref=ref)
        codec, _, _, data = row(db, digest)
        if ref is not None:
            assert codec == "splice"
            _, _, prefix, suffix = HEADER.unpack_from(data)
            assert len(body) - prefix - suffix < len(text) + 200
        assert blobs.get(db, digest) == body
        ref = digest
