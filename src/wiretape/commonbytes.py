"""The common start and end of two byte strings, found in C-speed
comparisons. Shared by the run file (a body spliced from the one before
it) and matching (where a live request differs from a recorded one). Pure.
"""

from __future__ import annotations

#: The first block (bytes) compared when looking for a common start or end;
#: each block that matches doubles the next, so a long match costs few steps.
BLOCK = 4096


def common_prefix(a: bytes, b: bytes, a0: int = 0, b0: int = 0,
                  limit: int | None = None) -> int:
    """The length (bytes) of the longest common start of ``a[a0:]`` and
    ``b[b0:]``, at most ``limit``. Linear in that length, in C-speed
    comparisons: blocks from ``BLOCK`` bytes, doubling while they match,
    then halving within the first block that does not (a 1 MB body costs a
    few dozen comparisons)."""
    n = min(len(a) - a0, len(b) - b0)
    if limit is not None:
        n = min(n, limit)
    view = memoryview(b)
    i, step = 0, BLOCK
    while i < n:
        k = min(step, n - i)
        if a.startswith(view[b0 + i:b0 + i + k], a0 + i):
            i += k
            step *= 2
            continue
        while k > 1:  # they differ within [i, i + k)
            half = k // 2
            if a.startswith(view[b0 + i:b0 + i + half], a0 + i):
                i += half
                k -= half
            else:
                k = half
        return i
    return max(n, 0)


def common_suffix(a: bytes, b: bytes, a1: int | None = None, b1: int | None = None,
                  limit: int | None = None) -> int:
    """The length (bytes) of the longest common end of ``a[:a1]`` and
    ``b[:b1]`` (the whole of each when None), at most ``limit``; as
    :func:`common_prefix`, from the end."""
    la = len(a) if a1 is None else a1
    lb = len(b) if b1 is None else b1
    n = min(la, lb)
    if limit is not None:
        n = min(n, limit)
    view = memoryview(b)
    j, step = 0, BLOCK  # a[la - j:la] == b[lb - j:lb]
    while j < n:
        k = min(step, n - j)
        if a.startswith(view[lb - j - k:lb - j], la - j - k):
            j += k
            step *= 2
            continue
        while k > 1:  # they differ within the k bytes before the matched end
            half = k // 2
            if a.startswith(view[lb - j - half:lb - j], la - j - half):
                j += half
                k -= half
            else:
                k = half
        return j
    return max(n, 0)
