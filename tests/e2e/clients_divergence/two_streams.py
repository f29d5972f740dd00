"""Two streamed chat requests in flight at once; the order in which they
start is given on the command line (e.g. "a b" or "b a")."""

import asyncio
import json
import os
import sys

import httpx


async def one(client: httpx.AsyncClient, name: str, opened: asyncio.Event) -> str:
    body = {
        "model": "m",
        "stream": True,
        "messages": [{"role": "user", "content": f"stream {name}"}],
    }
    text = []
    async with client.stream("POST", os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                             content=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json"}) as resp:
        opened.set()
        async for line in resp.aiter_lines():
            if line.startswith("data: {"):
                delta = json.loads(line[6:])["choices"]
                if delta and delta[0]["delta"].get("content"):
                    text.append(delta[0]["delta"]["content"])
    return name + ":" + "".join(text)


async def main() -> None:
    first, second = sys.argv[1], sys.argv[2]
    async with httpx.AsyncClient(timeout=30) as client:
        first_open, second_open = asyncio.Event(), asyncio.Event()
        task1 = asyncio.create_task(one(client, first, first_open))
        # The first stream's head has arrived (so the provider took the first
        # request first) before the second starts; both then stream at once.
        await first_open.wait()
        task2 = asyncio.create_task(one(client, second, second_open))
        results = await asyncio.gather(task1, task2)
    print(sorted(results))


asyncio.run(main())
