"""An agent with an MCP client (the ``mcp`` SDK's stdio client, which
starts its server with a reduced environment) and a model client: it asks
the model, runs the tool call the model makes on the MCP server, sends the
result back, and prints the model's answer.

Usage: mcp_agent.py NOTE -- SERVER_COMMAND...   (OPENAI_BASE_URL: the model)
"""

from __future__ import annotations

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from openai import OpenAI


async def main() -> None:
    note = sys.argv[1]
    server = sys.argv[sys.argv.index("--") + 1:]
    client = OpenAI(max_retries=0)
    params = StdioServerParameters(command=server[0], args=server[1:])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = (await session.list_tools()).tools
        specs = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                   "parameters": t.inputSchema}} for t in tools]
        messages: list[dict[str, object]] = [
            {"role": "user", "content": "What does the note say?"}]
        first = client.chat.completions.create(model="gpt-test", messages=messages,  # type: ignore[arg-type]
                                               tools=specs)  # type: ignore[arg-type]
        call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
        args = json.loads(call.function.arguments)  # type: ignore[union-attr]
        args["name"] = note  # the agent passes its own argument on
        result = await session.call_tool(call.function.name, args)  # type: ignore[union-attr]
        text = result.content[0].text  # type: ignore[union-attr]
        messages += [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": text}]
        final = client.chat.completions.create(model="gpt-test", messages=messages)  # type: ignore[arg-type]
        print(final.choices[0].message.content)


if __name__ == "__main__":
    asyncio.run(main())
