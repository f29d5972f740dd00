"""Where an SSE frame's added time goes while recording: the process hop
itself against wiretape's own work per frame.

Three paths in front of the bench upstream (``common.upstream``, which
stamps each frame with its send time), measured round by round in one run,
their order rotating: direct; a byte pipe in Python (``common.relay``: an
asyncio protocol in a process of its own that writes what it receives,
parsing nothing: the floor of any Python proxy, one more process woken per
frame); and
``wiretape serve --record``. For each: the send-to-arrival added per frame
(p50, p99; direct's quantile subtracted) and the CPU time the path's
process ran per frame (ns from ``/proc/PID/task/*/schedstat``, Linux).
``--concurrent N`` adds N concurrent streams 20 ms apart per round.

Usage: python bench/sse_hop.py [--rounds 6] [--frames 200] [--concurrent 0]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from common import pct, relay, upstream, wiretape

from agents import streams


def cpu_ns(pid: int | None) -> int:
    """CPU time (ns) the process's threads have run, 0 for None."""
    if pid is None:
        return 0
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(stat.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # (a thread that ended meanwhile)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--gap-ms", type=int, default=5)
    parser.add_argument("--concurrent", type=int, default=0)
    args = parser.parse_args()
    with (upstream() as direct, relay(direct) as (pipe, pipe_pid),
          tempfile.TemporaryDirectory(prefix="wiretape-bench-hop-") as tmp):
        rec = wiretape(["serve", "--record", "--upstream", direct + "/v1",
                        "-o", str(Path(tmp) / "r.wtape")])
        paths: dict[str, tuple[str, int | None]] = {
            "direct": (direct, None), "byte pipe": (pipe, pipe_pid),
            "wiretape": (rec.url, rec.popen.pid)}
        one: dict[str, list[float]] = {name: [] for name in paths}
        many: dict[str, list[float]] = {name: [] for name in paths}
        cpu = dict.fromkeys(paths, 0)
        names = list(paths)
        try:
            for r in range(args.rounds):
                k = r % len(names)
                for name in names[k:] + names[:k]:
                    base, pid = paths[name]
                    before = cpu_ns(pid)
                    one[name] += streams(base, 1, args.frames, args.gap_ms)[0]
                    cpu[name] += cpu_ns(pid) - before
                    if args.concurrent:
                        many[name] += streams(base, args.concurrent, args.frames, 20)[0]
        finally:
            rec.stop()
    frames = args.rounds * args.frames
    print(f"{'path':10s}  {'added p50':>10s}  {'added p99':>10s}  {'CPU/frame':>10s}"
          + (f"  {args.concurrent} concurrent: added p50, p99" if args.concurrent else ""))
    for name in names:
        row = (f"{name:10s}  {pct(one[name], 50) - pct(one['direct'], 50):7.3f} ms"
               f"  {pct(one[name], 99) - pct(one['direct'], 99):7.3f} ms"
               f"  {cpu[name] / frames / 1000:7.1f} us")
        if args.concurrent:
            row += (f"  {pct(many[name], 50) - pct(many['direct'], 50):7.3f} ms"
                    f"  {pct(many[name], 99) - pct(many['direct'], 99):7.3f} ms")
        print(row)


if __name__ == "__main__":
    main()
