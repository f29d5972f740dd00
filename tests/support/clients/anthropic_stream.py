"""Anthropic SDK: ``messages.stream(...)`` with a case's request body.

Used for B12, B17, B20. The base URL comes from ANTHROPIC_BASE_URL (read by
the SDK itself). Prints the text received (also when the stream breaks),
tool_use blocks with their parsed input, the stop reason, usage, and the
exception if the stream failed.
"""

from __future__ import annotations

import os

import anthropic
import httpx
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
    params.pop("stream", None)  # the helper sets it
    timing = Timing()
    client = anthropic.Anthropic(
        api_key=os.environ.get("ANTHROPIC_API_KEY", "sk-ant-test-REDACTED"),
        http_client=anthropic.DefaultHttpxClient(
            transport=timing_transport(httpx, timing, exact_body=exact_body(args))),
    )
    obs = {"client": "anthropic_stream", "text": "", "tool_calls": [], "stop_reason": None,
           "usage": None, "n_events": 0, "event_types": []}
    exc = None
    text: list[str] = []
    try:
        with client.messages.stream(**params) as stream:
            for event in stream:
                timing.event(event.type)
                obs["n_events"] += 1
                obs["event_types"].append(event.type)
                if event.type == "text":
                    text.append(event.text)
            final = stream.get_final_message()
        obs["tool_calls"] = [
            {"id": b.id, "name": b.name, "input": b.input}
            for b in final.content if b.type == "tool_use"
        ]
        obs["stop_reason"] = final.stop_reason
        obs["usage"] = jsonable(final.usage)
    except Exception as e:
        exc = e
    obs["text"] = "".join(text)
    obs["exception"] = exception_info(exc)
    emit(obs, timing, args.timing_file)


if __name__ == "__main__":
    main()
