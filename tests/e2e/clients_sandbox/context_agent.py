"""A small agent that puts its working directory and the current time (to
the minute, UTC) into its prompt, may try to fetch a URL first (as a web
tool would), writes its answer to a file, and prints it.

``CONTEXT_AGENT_NOW`` set: the agent puts that text in its prompt instead of
reading its clock, so a test about something else than the clock is not at
the mercy of a minute turning over between recording and replay."""

import json
import os
import sys
import time
import urllib.request

import httpx

if len(sys.argv) > 1:  # a "web tool": fetch a URL, note the failure
    try:
        urllib.request.urlopen(sys.argv[1], timeout=3)
        print("fetched")
    except OSError as exc:
        print("fetch failed:", type(exc).__name__)
now = os.environ.get("CONTEXT_AGENT_NOW") or time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime())
body = {"model": "m", "messages": [
    {"role": "system", "content": f"You work in {os.getcwd()}. It is {now}."},
    {"role": "user", "content": "hello"}]}
resp = httpx.post(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                  content=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
answer = resp.json()["choices"][0]["message"]["content"] if resp.status_code == 200 else resp.text
with open("answer.txt", "w") as fh:
    fh.write(answer + "\n")
print(answer)
