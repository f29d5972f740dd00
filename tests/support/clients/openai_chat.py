"""OpenAI SDK: non-streaming ``chat.completions.create`` with a case's request body.

Used for B07 (gzip response) and B22 (429 then the SDK's own retry).
``--max-retries N`` sets the client's retry budget (default: the SDK's own).
"""

from __future__ import annotations

import os

import httpx2
import openai
from _common import (
    Timing,
    base_parser,
    emit,
    exact_body,
    exception_info,
    jsonable,
    request_json,
    timing_transport,
)


def main() -> None:
    p = base_parser(__doc__)
    p.add_argument("--max-retries", type=int, default=None)
    args = p.parse_args()
    params = request_json(os.path.join(args.case, args.request))
    timing = Timing()
    kwargs = {}
    if args.max_retries is not None:
        kwargs["max_retries"] = args.max_retries
    client = openai.OpenAI(
        api_key=os.environ.get("OPENAI_API_KEY", "sk-test-REDACTED"),
        http_client=openai.DefaultHttpxClient(
            transport=timing_transport(httpx2, timing, exact_body=exact_body(args))),
        **kwargs,
    )
    obs = {"client": "openai_chat", "text": None, "tool_calls": [], "stop_reason": None,
           "usage": None, "n_events": 0}
    exc = None
    try:
        resp = client.chat.completions.create(**params)
        timing.event("chat.completion")
        obs["n_events"] = 1
        choice = resp.choices[0]
        obs["text"] = choice.message.content
        obs["tool_calls"] = [
            {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments}
            for tc in (choice.message.tool_calls or [])
        ]
        obs["stop_reason"] = choice.finish_reason
        obs["usage"] = jsonable(resp.usage)
    except Exception as e:
        exc = e
    obs["exception"] = exception_info(exc)
    obs["statuses"] = [a.get("status") for a in timing.attempts]
    emit(obs, timing, args.timing_file)


if __name__ == "__main__":
    main()
