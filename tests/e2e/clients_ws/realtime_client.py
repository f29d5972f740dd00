"""The openai SDK's Realtime client (``client.realtime.connect``) in a text
session with a function call.

Reads ``OPENAI_BASE_URL``/``OPENAI_API_KEY`` as the SDK does. Sets up the
session with one tool (``add``), sends the prompt from the command line,
asks for a response, answers the function call it makes with the sum, asks
again, and prints ``RT {json}``: the server event types, the calls, the
text.
"""

from __future__ import annotations

import asyncio
import json
import sys

from openai import AsyncOpenAI

TOOL = {"type": "function", "name": "add", "description": "Add two numbers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                        "b": {"type": "number"}}}}


async def main(prompt: str) -> int:
    client = AsyncOpenAI()
    seen: dict[str, list[object] | str] = {"types": [], "calls": [], "text": ""}
    types: list[object] = seen["types"]  # type: ignore[assignment]
    calls: list[object] = seen["calls"]  # type: ignore[assignment]
    async with client.realtime.connect(model="gpt-realtime") as conn:
        await conn.session.update(session={"type": "realtime", "output_modalities": ["text"],
                                           "tools": [TOOL]})
        await conn.conversation.item.create(item={
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": prompt}]})
        await conn.response.create()
        for _ in range(2):
            async for event in conn:
                types.append(event.type)
                if event.type == "response.output_text.delta":
                    seen["text"] = str(seen["text"]) + event.delta
                elif event.type == "response.function_call_arguments.done":
                    calls.append([event.name, event.arguments])
                    args = json.loads(event.arguments)
                    await conn.conversation.item.create(item={
                        "type": "function_call_output", "call_id": event.call_id,
                        "output": str(args["a"] + args["b"])})
                elif event.type == "error":
                    print("RT " + json.dumps(seen), flush=True)
                    return 1
                if event.type == "response.done":
                    break
            if not calls or len(types) > 40:
                break
            if "response.done" in types and types.count("response.done") == 1:
                await conn.response.create()
    print("RT " + json.dumps(seen), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "add 2 and 3")))
