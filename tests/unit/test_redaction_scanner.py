"""The one-pass secret scanner finds what running each rule's regex over
the text one after another finds: the same masks, labels, order and
fingerprints. The slow algorithm is kept here, as the reference."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wiretape import redaction
from wiretape.model import Redaction
from wiretape.redaction import KEY_SHAPES, STANDARD, Rules, fingerprint, redact_text

DATA = Path(__file__).resolve().parents[1] / "data"

# -- the reference: every rule's regex, one after another ------------------------------------

_MASK = re.compile(rb"<redacted\**>|\*{4,}")


def _is_mask(value: bytes) -> bool:
    return _MASK.fullmatch(value) is not None or set(value) <= set(b"*")


def _mask(n: int) -> bytes:
    return b"<redacted" + b"*" * (n - 10) + b">" if n >= 10 else b"*" * n


def reference(data: bytes, location: str, rules: Rules) -> tuple[bytes, list[Redaction]]:
    """The redaction as it was: each shape, then each pattern, then one
    regex of the literals (longest first), each ``re.sub`` over the text
    the ones before it masked."""
    wanted = {v: label for label, v in rules.literals if v and not _is_mask(v)}
    shapes = [*rules.shapes, *rules.patterns]
    if wanted:
        alternatives = b"|".join(re.escape(v) for v in sorted(wanted, key=len, reverse=True))
        shapes.append(("", re.compile(alternatives)))
    found: list[Redaction] = []
    for label, pattern in shapes:
        if pattern.search(data) is None:
            continue

        def repl(match: re.Match[bytes], label: str = label) -> bytes:
            secret = match.group(0)
            if not secret or _is_mask(secret):
                return secret
            found.append(Redaction(location, label or wanted.get(secret, "literal"),
                                   fingerprint(secret)))
            return _mask(len(secret))

        data = pattern.sub(repl, data)
    return data, found


# -- the ways the scanner runs ----------------------------------------------------------------


@pytest.fixture(params=["python", "re2"])
def scanner(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The pure-Python candidate search, or RE2's (on texts of any size)."""
    if request.param == "python":
        monkeypatch.setattr(redaction, "_candidate_re2", None)
        monkeypatch.setattr(redaction, "_re2", None)
    elif redaction._candidate_re2 is None:
        pytest.skip("RE2 is not installed")
    else:
        monkeypatch.setattr(redaction, "_SMALL", 0)
    return str(request.param)


OPENAI_KEY = b"sk-proj-" + b"A1b2C3d4" * 5
ANTHROPIC_KEY = b"sk-ant-api03-" + b"Z9y8X7w6" * 5
SECRET = b"plain-secret-without-a-shape-42"
LITERALS = (("env:MY_SERVICE_TOKEN", b"tok3n-abcdef-12345"), ("env:DB_PASSWORD", b"hunter2hunter2"),
            ("env:MY_TOKEN", SECRET), ("learned:x", b"AKIAABCDEFGHIJKLMNOP"))


# literals that overlap, hold regex syntax and bytes past ASCII
OVERLAPPING = [("a", b"abcabc"), ("b", b"abc1"), ("c", b"bcab"), ("d", b"p\xe4ss w\xf6rd\t(x)|*")]


def rule_sets() -> list[Rules]:
    many = [*OVERLAPPING, *((f"env:V{i}", b"value-%d-" % i + b"x" * i) for i in range(9))]
    return [STANDARD, STANDARD.with_literals(LITERALS),
            STANDARD.with_literals(LITERALS).with_patterns(
                [("rules:tok", re.compile(rb"tok[0-9a-z]+")), ("rules:star", re.compile(rb"\*+"))]),
            STANDARD.with_literals([*LITERALS, *many]), STANDARD.with_literals(OVERLAPPING),
            Rules(shapes=KEY_SHAPES[2:5])]


EXISTING = [
    b'{"note":"' + OPENAI_KEY + b'","other":"' + ANTHROPIC_KEY
    + b'","task-12345678901234567890":1}',
    b"/v1/x?key=GKEY&api_key=AKEY&keep=1", b"Bearer " + OPENAI_KEY,
    b'{"k":"' + OPENAI_KEY[:10], OPENAI_KEY[10:] + b'"}', b"\x1f\x8b" + OPENAI_KEY,
    b'{"messages": [{"role": "user", "content": "my key is ' + OPENAI_KEY + b'"}]}',
    b'data: {"delta": "' + OPENAI_KEY + b'"}\n\n',
    b"line one\nexport OPENAI_API_KEY=" + OPENAI_KEY + b"\nline three\n",
    b"--api-key=" + OPENAI_KEY, b"token tok3n-abcdef-12345 and hunter2hunter2.",
    b"ConnectError: refused for key " + OPENAI_KEY, b'{"t":"' + SECRET + b'"}',
    b"echo " + SECRET, b"prefix that moved <redacted*********************> rest",
    b"-----BEGIN RSA PRIVATE KEY-----\n"
    b"MIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgwMbRvI0MBZhpI\n"
    b"-----END RSA PRIVATE KEY-----",
]


def corpus() -> Iterator[tuple[str, bytes]]:
    for path in sorted(DATA.rglob("*")):
        if path.is_file():
            yield str(path.relative_to(DATA)), path.read_bytes()


def check(data: bytes, rules: Rules) -> None:
    assert redact_text(data, "here", rules) == reference(data, "here", rules)


@pytest.mark.parametrize("rules", rule_sets())
def test_the_existing_inputs_redact_as_before(scanner: str, rules: Rules) -> None:
    for data in EXISTING:
        check(data, rules)
        check(data * 3, rules)
        check(b" ".join([data] * 200), rules)  # large enough for RE2's search
    found = redact_text(b"\n".join(EXISTING), "here", rules)[1]
    if rules.shapes is KEY_SHAPES:
        assert {f.name for f in found} >= {"openai-key", "anthropic-key", "private-key"}


def test_the_recorded_traffic_redacts_as_before(scanner: str) -> None:
    rules = rule_sets()
    count = 0
    for _, data in corpus():
        for r in rules:
            check(data, r)
        count += 1
    assert count > 50
    # and with secrets dropped into it
    seeded = b"".join(data[:4000] + b" " + OPENAI_KEY + b"\n" for _, data in corpus())
    check(seeded, STANDARD)
    assert len(redact_text(seeded, "here")[1]) == count


# -- generated texts ---------------------------------------------------------------------------

STARTS = [b"sk-", b"sk-ant-", b"sk-proj-", b"sk-admin-", b"AIza", b"ghp_", b"gho_", b"ghx_",
          b"github_pat_", b"xoxb-", b"xoxz-", b"AKIA", b"gsk_", b"hf_", b"rk_live_", b"sk_live_",
          b"k_live_", b"-----BEGIN ", b"-----END ", b"PRIVATE KEY-----", b"RSA ", b"EC ",
          b"-----BEGIN RSA PRIVATE KEY-----", b"-----END RSA PRIVATE KEY-----\n",
          b"-----BEGIN PRIVATE KEY-----\n", b"-----END PRIVATE KEY-----", b"tok",
          b"tok3n-abcdef-12345", b"hunter2hunter2", b"hunter2", SECRET, b"<redacted>", b"****",
          b"<redacted**>", b"abc", b"abcabc", b"bcab", b"abc1", b"p\xe4ss w\xf6rd\t(x)|*"]
EDGES = [b" ", b"_", b"-", b"x", b"A", b"\n", b"/", b"+", b"=", b":", b",", b"<", b">", b"*",
         b"\xff", b"\xe2\x82", b'"', b"\t"]
ALPHABETS = [b"A1b2C3d4", b"ABCDEFGHIJKLMNOP0123456789", b"abc-def_", b"Zz9", b"aA0-", b"A",
             b"MIIEowIBAAKCAQEA+/=\n"]


KEYS = [(b"sk-", 20), (b"sk-ant-", 20), (b"AIza", 35), (b"ghp_", 36), (b"github_pat_", 40),
        (b"xoxb-", 10), (b"AKIA", 16), (b"gsk_", 20), (b"hf_", 30), (b"sk_live_", 20)]


@st.composite
def fragment(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 5))
    if kind >= 4:  # a key of exactly its shortest length, or one byte short
        start, n = draw(st.sampled_from(KEYS))
        alphabet = draw(st.sampled_from(ALPHABETS[:3]))
        return start + (alphabet * 10)[:n - draw(st.integers(0, 1))]
    if kind == 0:
        return draw(st.sampled_from(STARTS))
    if kind == 1:
        return draw(st.sampled_from(EDGES))
    if kind == 2:
        alphabet = draw(st.sampled_from(ALPHABETS))
        n = draw(st.sampled_from([1, 9, 10, 15, 16, 19, 20, 21, 30, 35, 36, 40, 41, 60]))
        offset = draw(st.integers(0, len(alphabet) - 1))
        return (alphabet * (n // len(alphabet) + 2))[offset:offset + n]
    return draw(st.binary(max_size=6))


texts = st.lists(fragment(), max_size=40).map(b"".join)


@settings(max_examples=400, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=texts, which=st.integers(0, len(rule_sets()) - 1))
def test_generated_texts_redact_as_before(scanner: str, data: bytes, which: int) -> None:
    check(data, rule_sets()[which])


@settings(max_examples=100, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(parts=st.lists(texts, min_size=1, max_size=6))
def test_generated_texts_with_a_lot_between_redact_as_before(scanner: str,
                                                             parts: list[bytes]) -> None:
    # between the parts, more than a small text holds (RE2 searches it)
    check((b" filler text, " * 400).join(parts), STANDARD.with_literals(LITERALS))


@pytest.mark.parametrize("data", [
    b"AIza" + b"A" * 30 + b"-sk-" + b"B" * 25,  # a later shape inside an earlier one's run
    b"AIza" + b"C" * 35 + b"ghp_" + b"D" * 36,  # a mask ends where a start was hidden
    b"AKIA" + b"E" * 16 + b"AKIA" + b"F" * 16 + b"gsk_" + b"G" * 20,
    b"-----BEGIN RSA PRIVATE KEY-----\n" + b"H" * 20 + b" AKIA" + b"J" * 16
    + b"\n-----END RSA PRIVATE KEY-----",  # a key inside a private key breaks it
    b"xoxb-1234567890-----BEGIN PRIVATE KEY-----" + b"K" * 20 + b"-----END PRIVATE KEY-----",
    b"-----BEGIN PRIVATE KEY-----" + b"L" * 10 + b"-----END PRIVATE KEY-----" + b"M" * 10
    + b"-----END PRIVATE KEY-----",
    b"-----BEGIN PRIVATE KEY-----" * 3 + b"N" * 16 + b"-----END PRIVATE KEY-----",
])
def test_shapes_that_meet_redact_as_before(scanner: str, data: bytes) -> None:
    for rules in rule_sets():
        check(data, rules)
        check(b"x " + data + b" y", rules)


# -- linear work -------------------------------------------------------------------------------


class Counting:
    """A compiled pattern that counts the bytes its searches and matches go
    over (up to where they found something: a scan to the end when not)."""

    def __init__(self, pattern: re.Pattern[bytes], tally: dict[str, int]) -> None:
        self.pattern, self.tally = pattern, tally

    def match(self, text: bytes, pos: int = 0) -> re.Match[bytes] | None:
        m = self.pattern.match(text, pos)
        self.tally["attempts"] += 1
        self.tally["bytes"] += (m.end() - pos) if m else 0
        return m

    def search(self, text: bytes, pos: int = 0) -> re.Match[bytes] | None:
        m = self.pattern.search(text, pos)
        self.tally["bytes"] += (m.start() if m else len(text)) - pos
        return m


ADVERSARIAL = {
    "xsk- repeated": b"xsk-" * 50_000,
    "-sk- repeated": b"-sk-" * 50_000,
    "sk- then 1 MB of token bytes": b"sk-" + b"a" * (1 << 20),
    "headers without an end": b"-----BEGIN RSA PRIVATE KEY-----\n" * 10_000,
    "headers then an end far away": b"-----BEGIN RSA PRIVATE KEY-----\nAAAA*" * 10_000
                                    + b"-----END RSA PRIVATE KEY-----",
    "ends without a header": b"-----END RSA PRIVATE KEY-----" * 10_000,
    "masks and starts": (b"AKIA" + b"Q" * 16 + b"ghp_") * 10_000,
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_adversarial_texts_take_linear_work(scanner: str, name: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    data = ADVERSARIAL[name]
    tally = {"attempts": 0, "bytes": 0}
    shapes = tuple(replace(s, pattern=Counting(s.pattern, tally)) for s in redaction._SHAPES)
    monkeypatch.setattr(redaction, "_SHAPES", shapes)
    for pattern in ("_PK_HEAD", "_PK_FOOT", "_PK_NOT_BODY"):
        monkeypatch.setattr(redaction, pattern, Counting(getattr(redaction, pattern), tally))
    next_footer = redaction._PrivateKeys._next_footer

    def counted_footer(self: redaction._PrivateKeys, start: int) -> int:
        at = next_footer(self, start)
        tally["bytes"] += at - start
        return at

    monkeypatch.setattr(redaction._PrivateKeys, "_next_footer", counted_footer)
    masked, found = redact_text(data, "here")
    assert len(masked) == len(data)
    assert tally["attempts"] <= len(data)
    assert tally["bytes"] <= 4 * len(data), tally
    if name in ("-sk- repeated", "sk- then 1 MB of token bytes"):
        assert [f.name for f in found] == ["openai-key"]  # one key: the whole run
