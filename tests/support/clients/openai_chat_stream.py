"""OpenAI SDK: ``chat.completions.create(stream=True)`` with a case's request body.

Used for B01, B10, B14, B15, B18. The base URL comes from OPENAI_BASE_URL
(read by the SDK itself). Prints the streamed text, the tool calls rebuilt by
``index``, the finish reason, the usage chunk, and the number of chunks.
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
    args = base_parser(__doc__).parse_args()
    params = request_json(os.path.join(args.case, args.request))
    timing = Timing()
    client = openai.OpenAI(
        api_key=os.environ.get("OPENAI_API_KEY", "sk-test-REDACTED"),
        http_client=openai.DefaultHttpxClient(
            transport=timing_transport(httpx2, timing, exact_body=exact_body(args))),
    )
    text: list[str] = []
    calls: dict[int, dict] = {}
    finish = None
    usage = None
    n = 0
    exc = None
    try:
        stream = client.chat.completions.create(**params)
        for chunk in stream:
            timing.event(chunk.object)
            n += 1
            if chunk.usage is not None:
                usage = jsonable(chunk.usage)
            for choice in chunk.choices:
                d = choice.delta
                if d.content:
                    text.append(d.content)
                for tc in d.tool_calls or []:
                    c = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
                    if tc.id:
                        c["id"] = tc.id
                    if tc.function is not None:
                        if tc.function.name:
                            c["name"] = tc.function.name
                        if tc.function.arguments:
                            c["arguments"] += tc.function.arguments
                if choice.finish_reason:
                    finish = choice.finish_reason
    except Exception as e:
        exc = e
    emit({
        "client": "openai_chat_stream",
        "text": "".join(text),
        "tool_calls": [calls[i] for i in sorted(calls)],
        "stop_reason": finish,
        "usage": usage,
        "n_events": n,
        "exception": exception_info(exc),
    }, timing, args.timing_file)


if __name__ == "__main__":
    main()
