"""A client that sends its request body gzip-coded (as some SDKs and
gateways do) with its key in it, and asks for a gzip-coded answer, unary
then streamed. Prints what it got, decoded. Usage: gzip_client.py, with
the key in LEAKED_KEY; or gzip_client.py FILE NAME: the key is what FILE (a
.env) sets NAME to, and the client prints it too."""

import gzip
import json
import os
import sys

import httpx

if len(sys.argv) > 2:
    with open(sys.argv[1]) as fh:
        settings = dict(line.split("=", 1) for line in fh.read().splitlines() if "=" in line)
    key = settings[sys.argv[2]]
    print("using", key)
else:
    key = os.environ["LEAKED_KEY"]
base = os.environ["OPENAI_BASE_URL"]
payload = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"my key {key}"}]}
with httpx.Client(timeout=30) as client:
    for stream in (False, True):
        body = gzip.compress(json.dumps({**payload, "stream": stream}).encode())  # mtime: now
        reply = client.post(f"{base}/chat/completions", content=body,
                            headers={"Content-Encoding": "gzip", "Accept-Encoding": "gzip",
                                     "Content-Type": "application/json",
                                     "Authorization": f"Bearer {key}"})
        print(reply.status_code, reply.headers.get("content-encoding"), reply.text.strip())
