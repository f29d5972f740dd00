"""RSS growth of ``wiretape serve --record`` while it records one long
streamed response.

An upstream in its own process (``tests/support/big_stream.py``) answers
with one chunked SSE stream of ``--size`` bytes; a client reads it through
``wiretape serve --record`` and throws it away. The serve process's RSS is
read from ``/proc`` before the stream (after one small exchange, so the
code paths are loaded) and its peak (``VmHWM``) after it; the growth is
their difference. Two runs in one invocation: the baseline holds the whole
response in memory (``WIRETAPE_SPOOL_BYTES`` larger than the stream: the
recorder as it was before spooling), then the default (spooled past 8 MiB).
Each run file is read back and its body compared with the stream.

    .venv/bin/python bench/spool.py            # --size BYTES (default 200 MiB)

Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from common import wiretape

ROOT = Path(__file__).resolve().parent.parent
STREAM = ROOT / "tests" / "support" / "big_stream.py"
MIB = 1024 * 1024


def env(spool_at: int | None) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    out["PYTHONPATH"] = str(ROOT / "src")
    out.pop("WIRETAPE_SPOOL_BYTES", None)
    if spool_at is not None:
        out["WIRETAPE_SPOOL_BYTES"] = str(spool_at)
    return out


def one_run(upstream: str, size: int, spool_at: int | None, work: Path,
            ) -> tuple[int, int, float, bool]:
    """(RSS before in KiB, peak RSS in KiB, seconds, body read back equal)."""
    run = work / f"run-{spool_at or 'default'}.wtape"
    serve = wiretape(["serve", "--record", "--port", "0", "-o", str(run), "--upstream",
                      f"openai={upstream}/v1"], env=env(spool_at), cwd=work)
    try:
        base = serve.url + "/v1"
        digest = hashlib.sha256()
        with httpx.Client(timeout=600, trust_env=False) as client:
            client.post(f"{base}/warm-up", content=b"{}", headers={"x-size": "0"})
            time.sleep(1)
            before = serve.rss()["VmRSS"] // 1024
            started = time.monotonic()
            with client.stream("POST", f"{base}/chat/completions", content=b"{}") as resp:
                got = 0
                for piece in resp.iter_raw():
                    digest.update(piece)
                    got += len(piece)
            elapsed = time.monotonic() - started
        peak = serve.rss()["VmHWM"] // 1024
    finally:
        serve.stop(timeout=300)
    sys.path.insert(0, str(ROOT / "src"))
    from wiretape.store.runfile import open_run

    with open_run(run) as rf:
        stored = rf.exchanges()[-1]
        body = stored.response.body if stored.response else b""
    # the stream's keys are masked in place: compare lengths and the frames' total
    same = got == size and len(body) == size and body.count(b"<redacted") > 0
    run.unlink()
    return before, peak, elapsed, same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=200 * MIB, help="stream bytes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        up = subprocess.Popen([sys.executable, str(STREAM), str(args.size)],
                              stdout=subprocess.PIPE)
        try:
            assert up.stdout is not None
            url = up.stdout.readline().decode().strip()
            rows = []
            for label, spool_at in (("held whole (baseline)", args.size * 2),
                                    ("spooled (default 8 MiB)", None)):
                before, peak, elapsed, same = one_run(url, args.size, spool_at, work)
                rows.append((label, before, peak, elapsed, same))
        finally:
            up.kill()
    print(f"one {args.size / MIB:.0f} MiB streamed response through serve --record")
    print("| recorder | RSS before | peak RSS | growth | stream time | read back |")
    print("|---|---|---|---|---|---|")
    for label, before, peak, elapsed, same in rows:
        print(f"| {label} | {before / 1024:.0f} MiB | {peak / 1024:.0f} MiB | "
              f"{(peak - before) / 1024:.0f} MiB | {elapsed:.1f} s | "
              f"{'same size, keys masked' if same else 'DIFFERENT'} |")


if __name__ == "__main__":
    main()
