"""A small agent on the anthropic SDK, with its defaults: the base URL comes
from ANTHROPIC_BASE_URL. A tool loop over ``messages.stream`` with
``tool_use``; prints what it observed as one JSON line on stdout."""

from __future__ import annotations

import json

import anthropic

MODEL = "messages-test-model"

TOOLS = [
    {
        "name": "get_weather",
        "description": "Temperature in a city.",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["city"],
        },
    }
]


def run_tool(name: str, arguments: dict) -> str:
    if name != "get_weather":
        raise SystemExit(f"unknown tool {name}")
    return f"21 degrees {arguments.get('unit', 'celsius')} in {arguments['city']}"


def main() -> None:
    client = anthropic.Anthropic(max_retries=0)
    messages: list[dict] = [{"role": "user", "content": "How warm is it in Lisbon?"}]
    turns = []
    for _ in range(4):
        with client.messages.stream(model=MODEL, max_tokens=256, messages=messages,
                                    tools=TOOLS) as stream:
            streamed_text = "".join(stream.text_stream)
            final = stream.get_final_message()
        tool_uses = [{"id": b.id, "name": b.name, "input": b.input}
                     for b in final.content if b.type == "tool_use"]
        text = "".join(b.text for b in final.content if b.type == "text")
        turns.append({
            "id": final.id, "model": final.model, "stop_reason": final.stop_reason,
            "text": text, "streamed_text": streamed_text, "tool_uses": tool_uses,
            "usage": {"input_tokens": final.usage.input_tokens,
                      "output_tokens": final.usage.output_tokens},
        })
        if final.stop_reason != "tool_use":
            break
        messages.append({"role": "assistant",
                         "content": [b.model_dump(exclude_none=True) for b in final.content]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": t["id"],
             "content": run_tool(t["name"], t["input"])}
            for t in tool_uses
        ]})
    print(json.dumps({"client": "anthropic", "turns": turns}, sort_keys=True))


if __name__ == "__main__":
    main()
