"""An agent that stamps each run as coding agents do: a session UUID and a
device id inside a JSON-in-a-string member, a clock reading, members in a
per-process order, the session id in the URL query, and a session log named
by the session id. Two chat requests (the second carries the first answer),
then the answer on stdout.

argv: MODE, where MODE ``break`` sends a new session id in the second
request (a broken correspondence).
"""

from __future__ import annotations

import json
import os
import random
import secrets
import sys
import time
import urllib.request
import uuid
from pathlib import Path

base = os.environ["OPENAI_BASE_URL"].rstrip("/")
mode = sys.argv[1] if len(sys.argv) > 1 else "same"
session = str(uuid.uuid4())
device = secrets.token_hex(32)


def ask(messages: list[dict[str, str]], session_id: str) -> str:
    members = [("model", "gpt-4o-mini"), ("messages", messages),
               ("metadata", {"user_id": json.dumps({"device_id": device,
                                                    "session_id": session_id}),
                             "sent_at": time.time()})]
    random.shuffle(members)  # another key order per process
    body = json.dumps(dict(members)).encode()
    request = urllib.request.Request(
        f"{base}/chat/completions?session={session_id}", data=body, method="POST",
        headers={"Content-Type": "application/json",
                 "Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "")})
    with urllib.request.urlopen(request, timeout=30) as response:
        answer = json.load(response)
    return str(answer["choices"][0]["message"]["content"])


history = [{"role": "user", "content": "Say hello."}]
first = ask(history, session)
history += [{"role": "assistant", "content": first}, {"role": "user", "content": "Again."}]
second = ask(history, str(uuid.uuid4()) if mode == "break" else session)
log = Path("sessions") / f"{session}.jsonl"
log.parent.mkdir(exist_ok=True)
log.write_text("".join(json.dumps({"uuid": str(uuid.uuid4()) if i else session,
                                   "sessionId": session, "at": time.time(), "text": text}) + "\n"
                       for i, text in enumerate((first, second))))
print(first)
print(second)
