"""Text from a run made safe to show a person: what a terminal or a page
would act on, or show as nothing, written as an escape (``\\x1b``).

Shared by the command line (``show``, errors) and the HTML report, so both
show the same bytes the same way. Pure.
"""

from __future__ import annotations

import re

#: What is never shown as it is: C0 and C1 control characters (a
#: terminal acts on ESC, BEL, CR ...), the bidirectional overrides (they
#: reorder what is shown), and lone surrogates (bytes that were not UTF-8).
UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escaped(match: re.Match[str]) -> str:
    """The escape of the one character ``match`` found: ``\\n``, ``\\x1b``,
    ``\\u202e``, or ``\\xe9`` for a byte that was not UTF-8 (PEP 383)."""
    char = match.group()
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (PEP 383)
        return f"\\x{code - 0xDC00:02x}"
    if code > 0xFF:
        return f"\\u{code:04x}"
    return _NAMED.get(char, f"\\x{code:02x}")


def printable(text: str, keep: str = "") -> str:
    """``text`` from a run file safe to show: control characters (ESC, BEL,
    CR, newline, C1 ...), bidirectional overrides and bytes that were not
    UTF-8 are shown as escapes (``\\x1b``, ``\\n``, ``\\xe9``), except those in
    ``keep`` (``"\\n\\t"`` where a body is shown on several lines on purpose)."""
    if not keep:
        return UNPRINTABLE.sub(escaped, text)
    return UNPRINTABLE.sub(lambda m: m.group() if m.group() in keep else escaped(m), text)
