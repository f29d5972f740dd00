"""A small agent on the real openai SDK (default retry budget): ask
``--count`` questions in a row, each a non-streaming chat completion, and
print one line ``PROBE {json}`` with what the SDK gave back. ``--raw``
sends the same requests with plain httpx instead (no SDK import, so it
starts fast) and reports the error from the response itself.

``--grandchild PIDFILE`` first starts ``sleep 300`` in the same process
group (no pipes inherited) and writes its pid there. After an API error,
``--wait-term S`` waits up to S seconds for SIGTERM (noted, not fatal)
before printing, so a test can see both what the SDK raised and that the
stop reached the process. ``--sleep S`` sleeps before printing;
``--pidfile`` names a file for this process's own pid. Every HTTP attempt the SDK makes is counted.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

import httpx

got_term = False


def on_term(signum: int, frame: object) -> None:
    global got_term
    got_term = True


def sdk_asker(http: httpx.Client):  # type: ignore[no-untyped-def]
    import openai

    client = openai.OpenAI(api_key=os.environ.get("OPENAI_API_KEY", "sk-none"), http_client=http)

    def ask(question: str) -> tuple[str | None, dict | None]:
        try:
            resp = client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": question}])
        except openai.APIStatusError as exc:
            return None, {
                "class": type(exc).__name__,
                "status": exc.status_code,
                "should_retry": exc.response.headers.get("x-should-retry"),
                "wiretape_error": exc.response.headers.get("x-wiretape-error"),
                "body": exc.body,
                "message": str(exc),
            }
        return resp.choices[0].message.content, None

    return ask


def raw_asker(http: httpx.Client):  # type: ignore[no-untyped-def]
    base = os.environ["OPENAI_BASE_URL"].rstrip("/")

    def ask(question: str) -> tuple[str | None, dict | None]:
        body = json.dumps({"model": "gpt-4o-mini",
                           "messages": [{"role": "user", "content": question}]})
        resp = http.post(base + "/chat/completions", content=body,
                         headers={"Content-Type": "application/json",
                                  "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
        if resp.status_code >= 400:
            data = resp.json()
            return None, {
                "class": None,
                "status": resp.status_code,
                "should_retry": resp.headers.get("x-should-retry"),
                "wiretape_error": resp.headers.get("x-wiretape-error"),
                "body": data.get("error", data),
                "message": None,
            }
        return resp.json()["choices"][0]["message"]["content"], None

    return ask


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("question")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--grandchild")
    p.add_argument("--wait-term", type=float, default=0.0)
    p.add_argument("--raw", action="store_true")
    p.add_argument("--pidfile", help="write this process's pid here first")
    p.add_argument("--sleep", type=float, default=0.0, help="sleep this long before printing")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, on_term)
    if args.pidfile:
        with open(args.pidfile, "w") as fh:
            fh.write(str(os.getpid()))
    if args.grandchild:
        child = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(args.grandchild, "w") as fh:
            fh.write(str(child.pid))
    attempts: list[str] = []
    http = httpx.Client(event_hooks={"request": [lambda r: attempts.append(str(r.url.path))]},
                        timeout=30)
    ask = raw_asker(http) if args.raw else sdk_asker(http)
    answers: list[str | None] = []
    error = None
    for i in range(args.count):
        answer, error = ask(f"{args.question} (question {i + 1})")
        if error is not None:
            break
        answers.append(answer)
    if error is not None and args.wait_term:
        deadline = time.monotonic() + args.wait_term
        while not got_term and time.monotonic() < deadline:
            time.sleep(0.02)
    time.sleep(args.sleep)
    out = {"answers": answers, "error": error, "attempts": len(attempts)}
    if error is not None:
        out["sigterm"] = got_term
    sys.stdout.write("PROBE " + json.dumps(out, sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0 if error is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
