"""A client that puts a secret in every place wiretape must redact: the
credential headers, a cookie, the ``key`` and ``api_key`` query parameters,
and two provider-shaped keys inside the JSON body. The secrets come from
the environment (``WT_SECRET_*``), never from argv, and are never printed:
stdout carries only what is the same from run to run.
"""

from __future__ import annotations

import json
import os
import sys

import httpx


def main() -> None:
    s = {k[len("WT_SECRET_"):].lower(): v for k, v in os.environ.items()
         if k.startswith("WT_SECRET_")}
    base = os.environ["OPENAI_BASE_URL"].rstrip("/")
    body = json.dumps({
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": f"my keys are {s['openai_key']} and "
                                                 f"{s['anthropic_key']}, keep them safe"}],
    })
    headers = [
        ("Content-Type", "application/json"),
        ("Authorization", "Bearer " + s["authorization"]),
        ("Proxy-Authorization", "Basic " + s["proxy_authorization"]),
        ("x-api-key", s["x_api_key"]),
        ("api-key", s["api_key_header"]),
        ("x-goog-api-key", s["goog"]),
        ("Cookie", "session=" + s["cookie"]),
    ]
    url = f"{base}/chat/completions?alt=json&key={s['key_param']}&api_key={s['api_key_param']}"
    with httpx.Client(timeout=30) as client:
        resp = client.post(url, content=body, headers=headers)
    answer = resp.json()
    print(json.dumps({"status": resp.status_code, "request_bytes": answer.get("request_bytes"),
                      "set_cookie_seen": "set-cookie" in resp.headers}), flush=True)
    sys.exit(0 if resp.status_code == 200 else 1)


if __name__ == "__main__":
    main()
