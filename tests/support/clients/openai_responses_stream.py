"""OpenAI SDK: ``responses.stream(...)`` (POST /v1/responses) with a case's request body.

Used for B19. The SDK's accumulating helper rebuilds the final response;
prints its ``output_text``, the function calls, the event types in order,
and the usage.
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
    params.pop("stream", None)  # the helper sets it
    timing = Timing()
    client = openai.OpenAI(
        api_key=os.environ.get("OPENAI_API_KEY", "sk-test-REDACTED"),
        http_client=openai.DefaultHttpxClient(
            transport=timing_transport(httpx2, timing, exact_body=exact_body(args))),
    )
    obs = {"client": "openai_responses_stream", "text": None, "tool_calls": [],
           "stop_reason": None, "usage": None, "n_events": 0, "event_types": []}
    exc = None
    try:
        with client.responses.stream(**params) as stream:
            for event in stream:
                timing.event(event.type)
                obs["n_events"] += 1
                obs["event_types"].append(event.type)
            final = stream.get_final_response()
        obs["text"] = final.output_text
        obs["tool_calls"] = [
            {"id": item.call_id, "name": item.name, "arguments": item.arguments}
            for item in final.output if item.type == "function_call"
        ]
        obs["stop_reason"] = final.status
        obs["usage"] = jsonable(final.usage)
    except Exception as e:
        exc = e
    obs["exception"] = exception_info(exc)
    emit(obs, timing, args.timing_file)


if __name__ == "__main__":
    main()
