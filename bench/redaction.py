"""Throughput of redaction (``redact_text``) against the algorithm it
replaced (each key shape's regex, with its look-behind, run over the whole
text one after another), measured in the same run.

Bodies: OpenAI chat requests of about 300 KiB and 1 MiB as a coding agent
sends them (the conversation so far: instructions, user turns, tool calls
writing code, tool results with code and logs, a few base64 images), and
adversarial texts of 1 MiB that make a careless scanner slow. Each case is
timed with the standard rules and with four literal secrets (what a
recording's environment adds). ``new`` uses RE2 for its one search when it
is installed; ``new, no RE2`` is the pure-Python search it falls back to.

Prints MB/s (10^6 bytes per second) and the median time of each, and the
ratio old/new. The old algorithm is quadratic on some adversarial texts: it
is timed on a shorter piece of them (the size is shown).

Usage: python bench/redaction.py [--repeat N]
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from wiretape import redaction
from wiretape.redaction import STANDARD, Rules, fingerprint, redact_text

# -- the algorithm redaction used before, for the baseline -------------------------------------
# The unit tests keep their own copy, as the reference the scanner is checked against; the
# bench keeps this one to time it (a bench imports nothing from the tests).

_MASK = re.compile(rb"<redacted\**>|\*{4,}")


def _is_mask(value: bytes) -> bool:
    return _MASK.fullmatch(value) is not None or set(value) <= set(b"*")


def _mask(n: int) -> bytes:
    return b"<redacted" + b"*" * (n - 10) + b">" if n >= 10 else b"*" * n


def old_redact_text(data: bytes, rules: Rules) -> tuple[bytes, list[tuple[str, str]]]:
    wanted = {v: label for label, v in rules.literals if v and not _is_mask(v)}
    shapes = [*rules.shapes, *rules.patterns]
    if wanted:
        alternatives = b"|".join(re.escape(v) for v in sorted(wanted, key=len, reverse=True))
        shapes.append(("", re.compile(alternatives)))
    found: list[tuple[str, str]] = []
    for label, pattern in shapes:
        if pattern.search(data) is None:
            continue

        def repl(match: re.Match[bytes], label: str = label) -> bytes:
            secret = match.group(0)
            if not secret or _is_mask(secret):
                return secret
            found.append((label or wanted.get(secret, "literal"), fingerprint(secret)))
            return _mask(len(secret))

        data = pattern.sub(repl, data)
    return data, found


# -- bodies ------------------------------------------------------------------------------------

_TEXT = ("the of and to in is that for it with as on be by this are from at or not we can "
         "function return import class value error file path test data result through "
         "right might thought github task ask skip risk desk --verbose x-request-id api_key "
         "build install package module config README.md src/app.py TypeError None")
_WORDS = _TEXT.split(" ")


def _source() -> str:
    # (not redaction.py: its key shapes would be candidates everywhere)
    root = Path(redaction.__file__).parent
    return "\n".join(p.read_text() for p in sorted(root.rglob("*.py"))[:40]
                     if p.name != "redaction.py")


def chat_body(size: int, seed: int = 1) -> bytes:
    """An OpenAI chat request of about ``size`` bytes, agent-shaped."""
    rng = random.Random(seed)
    code = _source()
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are a coding agent. Use the tools. " * 40}]
    length, i = 0, 0
    while length < size:
        i += 1
        kind = rng.random()
        at = rng.randrange(len(code) - 4000)
        if kind < 0.25:
            text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(20, 300)))
            message: dict[str, object] = {"role": "user", "content": text}
        elif kind < 0.55:
            arguments = json.dumps({"path": f"src/mod_{i}.py",
                                    "content": code[at:at + rng.randint(400, 3000)]})
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{rng.getrandbits(96):024x}", "type": "function",
                 "function": {"name": "write_file", "arguments": arguments}}]}
        elif kind < 0.93:
            message = {"role": "tool", "tool_call_id": f"call_{rng.getrandbits(96):024x}",
                       "content": code[at:at + rng.randint(200, 4000)]}
        else:
            image = base64.b64encode(rng.randbytes(rng.randint(3000, 12000))).decode()
            message = {"role": "user", "content": [
                {"type": "text", "text": "what is in this screenshot?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64," + image}}]}
        messages.append(message)
        length += len(json.dumps(message))
    body = {"model": "gpt-4o", "messages": messages, "stream": True,
            "tools": [{"type": "function", "function": {"name": "write_file",
                                                        "parameters": {"type": "object"}}}]}
    return json.dumps(body).encode()


def adversarial(size: int) -> dict[str, bytes]:
    def fill(unit: bytes) -> bytes:
        return (unit * (size // len(unit) + 1))[:size]

    return {
        "adversarial: xsk- repeated": fill(b"xsk-"),
        "adversarial: sk- then token bytes": b"sk-" + b"a" * (size - 3),
        "adversarial: BEGIN headers, no END": fill(b"-----BEGIN RSA PRIVATE KEY-----\n"),
        "adversarial: keys back to back": fill(b"AKIA" + b"Q" * 16 + b"-sk-" + b"z" * 24),
    }


# -- timing ------------------------------------------------------------------------------------


def median_s(run: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def without_re2(run: Callable[[], object]) -> Callable[[], object]:
    def go() -> object:
        saved = redaction._candidate_re2
        redaction._candidate_re2 = None
        try:
            return run()
        finally:
            redaction._candidate_re2 = saved
    return go


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=31)
    args = parser.parse_args()
    secrets = [
        ("env:GITHUB_TOKEN", b"gho_" + b"x1Y2" * 9), ("env:DB_PASSWORD", b"hunter2hunter2"),
        ("env:MY_SERVICE_TOKEN", b"tok3n-abcdef-12345"), (".env:SECRET", b"s3cr3t-value-9")]
    literals = STANDARD.with_literals(secrets)
    saved, redaction._re2 = redaction._re2, None
    literals_without_re2 = STANDARD.with_literals(secrets)  # its own searches: find
    redaction._re2 = saved
    cases = {"chat 300 KiB": chat_body(300 << 10), "chat 1 MiB": chat_body(1 << 20, seed=2),
             **adversarial(1 << 20)}
    print(f"RE2 installed: {redaction._candidate_re2 is not None}")
    print("| body | rules | new | new, no RE2 | old | old/new |")
    print("|---|---|---|---|---|---|")
    for name, body in cases.items():
        for rules_name, rules in (("standard", STANDARD), ("+4 literals", literals)):
            new = redact_text(body, "b", rules)
            old_body = body if not name.startswith("adversarial") else body[:64 << 10]
            old_result = old_redact_text(old_body, rules)
            if old_body is body:
                assert new[0] == old_result[0]
                assert [(f.name, f.fingerprint) for f in new[1]] == old_result[1]
            t_new = median_s(lambda b=body, r=rules: redact_text(b, "b", r), args.repeat)
            py_rules = rules if rules is STANDARD else literals_without_re2
            t_py = median_s(without_re2(lambda b=body, r=py_rules: redact_text(b, "b", r)),
                            max(3, args.repeat // 3))
            t_old = median_s(lambda b=old_body, r=rules: old_redact_text(b, r), 3)

            def rate(n: int, t: float) -> str:
                return f"{n / t / 1e6:,.0f} MB/s ({t * 1e3:.2f} ms)"

            old_text = rate(len(old_body), t_old)
            if old_body is not body:
                old_text += f" on {len(old_body) >> 10} KiB"
            ratio = (len(body) / t_new) / (len(old_body) / t_old)
            print(f"| {name} ({len(body) / 1024:,.0f} KiB) | {rules_name} "
                  f"| {rate(len(body), t_new)} | {rate(len(body), t_py)} | {old_text} "
                  f"| {ratio:,.0f}x |")


if __name__ == "__main__":
    main()
