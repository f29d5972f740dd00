"""A small agent on the openai SDK, with its defaults: the base URL comes
from OPENAI_BASE_URL, as it would for any user. Prints what it observed as
one JSON line on stdout.

usage: openai_client.py chat-stream | chat | embeddings | responses-stream
"""

from __future__ import annotations

import json
import sys

import openai

MODEL = "gpt-4o-mini"

CHAT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties},
        },
    }
    for name, description, properties in [
        ("add", "Add two integers.", {"a": {"type": "integer"}, "b": {"type": "integer"}}),
        ("lookup", "Weather of a city.", {"city": {"type": "string"}}),
    ]
]

RESPONSES_TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Weather of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]


def run_tool(name: str, arguments: str) -> str:
    """The tools this agent has: deterministic, so record and replay agree."""
    args = json.loads(arguments)
    if name == "add":
        return str(args["a"] + args["b"])
    if name in ("lookup", "get_weather"):
        return f"sunny in {args['city']}"
    raise SystemExit(f"unknown tool {name}")


def usage_of(usage: openai.BaseModel | None) -> dict | None:
    return None if usage is None else usage.model_dump(exclude_none=True)


def chat_stream(client: openai.OpenAI) -> dict:
    """A tool loop over streamed chat completions, assembling tool calls from deltas."""
    messages: list[dict] = [{"role": "user", "content": "Add 2 and 3, and look up Lisbon."}]
    turns = []
    for _ in range(4):
        stream = client.chat.completions.create(
            model=MODEL, messages=messages, tools=CHAT_TOOLS, stream=True,
            stream_options={"include_usage": True},
        )
        text, calls, finish, usage, chunks, ids = "", {}, None, None, 0, set()
        for chunk in stream:
            chunks += 1
            ids.add(chunk.id)
            usage = usage_of(chunk.usage) or usage
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
                delta = choice.delta
                text += delta.content or ""
                for tc in delta.tool_calls or []:
                    call = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                    call["id"] = tc.id or call["id"]
                    if tc.function is not None:
                        call["name"] += tc.function.name or ""
                        call["arguments"] += tc.function.arguments or ""
        tool_calls = [calls[i] for i in sorted(calls)]
        turns.append({"text": text, "tool_calls": tool_calls, "finish_reason": finish,
                      "usage": usage, "chunks": chunks, "completion_ids": sorted(ids)})
        if not tool_calls:
            break
        messages.append({
            "role": "assistant", "content": text or None,
            "tool_calls": [{"id": c["id"], "type": "function",
                            "function": {"name": c["name"], "arguments": c["arguments"]}}
                           for c in tool_calls],
        })
        for c in tool_calls:
            messages.append({"role": "tool", "tool_call_id": c["id"],
                             "content": run_tool(c["name"], c["arguments"])})
    return {"turns": turns}


def chat(client: openai.OpenAI) -> dict:
    """The same loop without streaming."""
    messages: list[dict] = [{"role": "user", "content": "Add 2 and 3, and look up Lisbon."}]
    turns = []
    for _ in range(4):
        completion = client.chat.completions.create(model=MODEL, messages=messages,
                                                    tools=CHAT_TOOLS)
        choice = completion.choices[0]
        tool_calls = [{"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments}
                      for tc in choice.message.tool_calls or []]
        turns.append({"text": choice.message.content, "tool_calls": tool_calls,
                      "finish_reason": choice.finish_reason, "usage": usage_of(completion.usage),
                      "completion_id": completion.id, "model": completion.model})
        if not tool_calls:
            break
        messages.append(choice.message.model_dump(exclude_none=True))
        for c in tool_calls:
            messages.append({"role": "tool", "tool_call_id": c["id"],
                             "content": run_tool(c["name"], c["arguments"])})
    return {"turns": turns}


def embeddings(client: openai.OpenAI) -> dict:
    """Two embedding requests: a batch at the default size, one input with ``dimensions``."""
    results = []
    for kwargs in ({"input": ["alpha", "beta"]}, {"input": "gamma", "dimensions": 16}):
        response = client.embeddings.create(model="text-embedding-3-small", **kwargs)
        results.append({
            "model": response.model,
            "usage": usage_of(response.usage),
            "vectors": [{"index": d.index, "length": len(d.embedding), "first": d.embedding[:4]}
                        for d in response.data],
        })
    return {"embeddings": results}


def responses_stream(client: openai.OpenAI) -> dict:
    """A tool loop over the Responses API with ``client.responses.stream``."""
    items: list = [{"role": "user", "content": "What is the weather in Paris?"}]
    turns = []
    for _ in range(4):
        with client.responses.stream(model=MODEL, input=items, tools=RESPONSES_TOOLS) as stream:
            events = [event.type for event in stream]
            final = stream.get_final_response()
        calls = [{"call_id": o.call_id, "name": o.name, "arguments": o.arguments}
                 for o in final.output if o.type == "function_call"]
        turns.append({"id": final.id, "status": final.status, "text": final.output_text,
                      "function_calls": calls, "usage": usage_of(final.usage), "events": events})
        if not calls:
            break
        items += [o.model_dump(exclude_none=True) for o in final.output]
        items += [{"type": "function_call_output", "call_id": c["call_id"],
                   "output": run_tool(c["name"], c["arguments"])} for c in calls]
    return {"turns": turns}


MODES = {
    "chat-stream": chat_stream,
    "chat": chat,
    "embeddings": embeddings,
    "responses-stream": responses_stream,
}


def main() -> None:
    client = openai.OpenAI(max_retries=0)
    observed = MODES[sys.argv[1]](client)
    print(json.dumps({"client": "openai", "mode": sys.argv[1], **observed}, sort_keys=True))


if __name__ == "__main__":
    main()
