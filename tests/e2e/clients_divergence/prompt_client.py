"""Sends one chat request whose prompt carries a path and a time given on
the command line (as an agent putting its cwd and clock in a prompt would),
and prints the answer."""

import json
import os
import sys

import httpx

path, moment = sys.argv[1], sys.argv[2]
body = {"model": "gpt-4o-mini",
        "messages": [{"role": "system", "content": f"cwd={path} now={moment}"},
                     {"role": "user", "content": "hello"}]}
resp = httpx.post(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                  content=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
print(resp.status_code, resp.json().get("choices", [{}])[0].get("message", {}).get("content"))
