"""A client for the durability tests: ``N`` quick JSON requests in a row,
then one streaming request that the upstream keeps open, read until the
process is killed. Writes its own pid to PIDFILE first; reports progress
on stderr only.

    slow_tail.py N PIDFILE
"""

from __future__ import annotations

import json
import os
import sys
import time

import httpx


def main() -> None:
    count, pidfile = int(sys.argv[1]), sys.argv[2]
    with open(pidfile, "w") as fh:
        fh.write(str(os.getpid()))
    base = os.environ["OPENAI_BASE_URL"].rstrip("/")
    with httpx.Client(timeout=120) as client:
        for i in range(count):
            body = json.dumps({"request": i, "padding": "x" * (100 * i)})
            resp = client.post(f"{base}/quick/{i}", content=body,
                               headers={"Content-Type": "application/json"})
            print(f"quick {i}: {resp.status_code} {len(resp.content)} bytes", file=sys.stderr,
                  flush=True)
        with client.stream("POST", f"{base}/slow?hang=1", content=b'{"slow": true}',
                           headers={"Content-Type": "application/json"}) as resp:
            for frame in resp.iter_raw():
                print(f"slow frame {len(frame)} bytes", file=sys.stderr, flush=True)
    time.sleep(120)


if __name__ == "__main__":
    main()
