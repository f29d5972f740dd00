"""A raw ``websockets`` client of the Responses API's WebSocket mode that
answers the model's function calls, as Codex does.

Reads ``OPENAI_BASE_URL``, opens ``GET {base}/responses``, sends one
``response.create`` with the prompt from the command line and the ``add``
tool, reads the events until ``response.completed``; while the response
made function calls, sends another ``response.create`` whose ``input``
holds each call's ``function_call_output`` (the sum of its arguments'
``a`` and ``b``), with ``previous_response_id`` naming the response.
``--off-by N`` adds N to each sum. Closes with 1000 and prints
``WS {json}``: the calls and the text.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from websockets.asyncio.client import connect

TOOL = {"type": "function", "name": "add", "description": "Add two numbers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                        "b": {"type": "number"}}}}


async def main(prompt: str, off_by: int) -> int:
    base = os.environ["OPENAI_BASE_URL"].rstrip("/")
    url = base.replace("http://", "ws://", 1).replace("https://", "wss://", 1) + "/responses"
    seen: dict[str, object] = {"calls": [], "text": ""}
    calls: list[object] = seen["calls"]  # type: ignore[assignment]
    async with connect(url, additional_headers={
            "Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY', '')}"},
            open_timeout=20, compression=None) as ws:
        event: dict[str, object] = {
            "type": "response.create", "model": "gpt-test", "tools": [TOOL],
            "input": [{"role": "user", "content": prompt}]}
        for _ in range(4):
            await ws.send(json.dumps(event))
            outputs = []
            while True:
                got = json.loads(await ws.recv())
                if got["type"] == "response.output_text.delta":
                    seen["text"] = str(seen["text"]) + got["delta"]
                elif (got["type"] == "response.output_item.done"
                      and got["item"]["type"] == "function_call"):
                    item = got["item"]
                    calls.append([item["name"], item["arguments"]])
                    args = json.loads(item["arguments"])
                    outputs.append({"type": "function_call_output", "call_id": item["call_id"],
                                    "output": str(args["a"] + args["b"] + off_by)})
                if got["type"] in ("response.completed", "error"):
                    break
            if not outputs or got["type"] == "error":
                break
            event = {"type": "response.create", "model": "gpt-test", "tools": [TOOL],
                     "previous_response_id": got["response"]["id"], "input": outputs}
        await ws.close(1000, "done")
    print("WS " + json.dumps(seen), flush=True)
    return 0


if __name__ == "__main__":
    argv = sys.argv[1:]
    off = 0
    if "--off-by" in argv:
        at = argv.index("--off-by")
        off = int(argv[at + 1])
        del argv[at : at + 2]
    sys.exit(asyncio.run(main(argv[0] if argv else "add 2 and 3", off)))
